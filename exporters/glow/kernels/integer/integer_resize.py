"""Emitter for QResizeBilinear (pegasus/ops/integer_resize.py): TFLite's integer bilinear resize.

The coordinates are decided at export time by the op's own ``bilinear_taps``: per output row the two source
rows' offsets and the lower one's weight, per output column the same, baked into the bundle as read-only
tables; the kernel is four loads, four multiply-adds and the rounding division per element. 8-bit inputs sum in
i32 (|acc| < 128 * 2048**2 even where half-pixel centres extrapolate), 16-bit ones in i64, as the reference's
int64 gives the same value.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.exporters.glow.llvm.tables import constant_table, table_load
from pegasus.ops.integer_resize import FRACTION, bilinear_taps


def _axis_table(module: ir.Module, in_size: int, out_size: int, stride: int, attrs) -> ir.GlobalVariable:
    lower, upper, weight = bilinear_taps(in_size, out_size, attrs.align_corners, attrs.half_pixel_centers)
    return constant_table(module, np.stack([lower * stride, upper * stride, weight], axis=1).astype(np.int32))


@emitter("QResizeBilinear")
def resize_bilinear(k: KernelContext) -> None:
    b, x, y, a = k.builder, k.inputs[0], k.outputs[0], k.attrs
    n, h, w, c = x.shape
    out_h, out_w = a.sizes
    rows = _axis_table(b.module, h, out_h, w * c, a)
    columns = _axis_table(b.module, w, out_w, c, a)
    wide = ir.IntType(32 if x.type.dtype.itemsize == 1 else 64)
    one = const(1 << FRACTION)
    half = ir.Constant(wide, 1 << (2 * FRACTION - 1))

    def weight(value: ir.Value) -> ir.Value:
        return b.sext(value, wide) if wide.width > 32 else value

    with for_range(b, n, name="n") as batch:
        with for_range(b, out_h, name="oy") as oy:
            entry = b.mul(oy, const(3))
            top = b.add(b.mul(batch, const(h * w * c)), table_load(b, rows, entry))
            bottom = b.add(b.mul(batch, const(h * w * c)), table_load(b, rows, b.add(entry, const(1))))
            fy = table_load(b, rows, b.add(entry, const(2)))
            with for_range(b, out_w, name="ox") as ox:
                entry = b.mul(ox, const(3))
                left = table_load(b, columns, entry)
                right = table_load(b, columns, b.add(entry, const(1)))
                fx = table_load(b, columns, b.add(entry, const(2)))
                weights = [weight(b.mul(p, q)) for p, q in ((b.sub(one, fy), b.sub(one, fx)), (fy, b.sub(one, fx)),
                                                            (b.sub(one, fy), fx), (fy, fx))]
                corners = [b.add(top, left), b.add(bottom, left), b.add(top, right), b.add(bottom, right)]
                out = b.mul(b.add(b.mul(batch, const(out_h)), oy), const(out_w))
                out = b.mul(b.add(out, ox), const(c))
                with for_range(b, c, name="c") as channel:
                    acc = ir.Constant(wide, 0)
                    for corner, wt in zip(corners, weights):
                        value = b.sext(x.load(b, b.add(corner, channel)), wide)
                        acc = b.add(acc, b.mul(value, wt))
                    rounded = b.add(acc, b.select(b.icmp_signed(">", acc, ir.Constant(wide, 0)), half, b.neg(half)))
                    result = b.sdiv(rounded, ir.Constant(wide, 1 << (2 * FRACTION)))
                    y.store(b, b.trunc(result, y.element), b.add(out, channel))
