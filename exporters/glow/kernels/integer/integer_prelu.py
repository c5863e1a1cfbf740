"""Emitter for QPRelu (pegasus/ops/integer_prelu.py): per element, c = x - zx and, by the sign of c, one of two
requantisations (requant.py's, in the op's rounding): c by the identity multiplier, or c * (alpha - zalpha) by
the slope's. The slope broadcasts to x (one per channel, usually) through ``broadcast_loop``'s strides.

Both results are computed and one selected: straight-line code, no branch on the data. The identity side of an
8-bit x with more elements than levels is one load from a 256-entry table of its outputs (computed at export time
by the reference's arithmetic, as Requantize's); the slope side is 32-bit (requant.narrow_scale: one SMMULR and
shifts on Cortex-M) when requant.narrow_bound allows it for |c * (alpha - zalpha)|, else 64-bit. The product is
exact in i32 when it is below 2**31 (an 8-bit operand times an 8/16-bit one), in i64 otherwise, as the reference
computes it in int64. The 53 PReLUs of iris_landmark (per-channel int8) on Cortex-M7: 27.8 M instructions in
64-bit, 21.5 M this way (its largest layer 38.7 instructions an element, then 27.2).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_elementwise import centered
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import load_as
from pegasus.exporters.glow.llvm.lanes import broadcast_loop
from pegasus.exporters.glow.llvm.loops import const
from pegasus.exporters.glow.llvm.requant import clamp, laundered, narrow_bound, narrow_scale, requantize, widen
from pegasus.exporters.glow.llvm.tables import constant_table, table_load
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import I32, I64
from pegasus.ir.dtypes import DType
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.fixedpoint import requantize as requantize_values
from pegasus.ops.integer import clamp_bounds


def _narrow_product(x_bytes: int, alpha_bytes: int) -> bool:
    """Whether (x - zx) * (alpha - zalpha) fits in i32: at most one 16-bit operand, the other 8-bit."""
    return max(x_bytes, alpha_bytes) <= 2 and x_bytes + alpha_bytes <= 3


def _centred_bound(ref: TensorRef, zero_point: int) -> int:
    low, high = integer_range(ref.type.dtype.numpy)
    return max(abs(low - zero_point), abs(high - zero_point))


def _identity_table(k: KernelContext) -> ir.GlobalVariable | None:
    """The identity side's outputs for every level of an 8-bit x (None for wider x or a layer of fewer elements)."""
    x, y, a = k.inputs[0], k.outputs[0], k.attrs
    if x.type.dtype.itemsize != 1 or y.type.size <= 1 << 8:
        return None
    low, high = integer_range(x.type.dtype.numpy)
    levels = np.arange(low, high + 1, dtype=np.int64) - a.x_zero_point
    values = requantize_values(levels, a.multiplier[0], a.shift[0], a.out_zero_point, *clamp_bounds(a), a.rounding)
    return constant_table(k.builder.module, values.astype(y.type.dtype.numpy))


@emitter("QPRelu")
def q_prelu(k: KernelContext) -> None:
    """y = requant(c) for c = x - zx >= 0, else requant(c * (alpha - zalpha)) by the slope's multiplier."""
    b, (x, alpha), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    lo, hi = clamp_bounds(a)
    narrow = _narrow_product(x.type.dtype.itemsize, alpha.type.dtype.itemsize)
    bound = _centred_bound(x, a.x_zero_point) * _centred_bound(alpha, a.alpha_zero_point)
    short = narrow and narrow_bound(bound, a.alpha_multiplier, a.alpha_shift, a.rounding) is not None
    factor = laundered(b, a.alpha_multiplier) if short and a.rounding == "tflite" else None
    table = _identity_table(k)
    first = -integer_range(x.type.dtype.numpy)[0]
    with broadcast_loop(b, y, [x, alpha]) as (out, fx, fa):
        c = centered(b, x, fx, a.x_zero_point)
        slope = centered(b, alpha, fa, a.alpha_zero_point)
        if narrow:
            product = b.mul(c, slope)
        else:
            product = b.mul(widen(b, c, I64, signed=True), widen(b, slope, I64, signed=True))
        if table is not None:
            up = table_load(b, table, b.add(load_as(b, x, fx, DType.INT32), const(first)))
        else:
            up = requantize(b, c, a.multiplier[0], a.shift[0], a.out_zero_point, lo, hi, y.element, a.rounding)
        if short:
            scaled = narrow_scale(b, product, a.alpha_multiplier, a.alpha_shift, a.rounding, factor,
                                  lo >= a.out_zero_point)
            down = widen(b, clamp(b, b.add(scaled, ir.Constant(I32, a.out_zero_point)), lo, hi), y.element, True)
        else:
            down = requantize(b, product, a.alpha_multiplier, a.alpha_shift, a.out_zero_point, lo, hi, y.element,
                              a.rounding)
        y.store(b, b.select(b.icmp_signed(">=", c, ir.Constant(c.type, 0)), up, down), out)
