"""Float MaxPool and AveragePool of stride 1 whose output rows are as long as their input rows (Inception's
3x3 pad-1 pools beside the convolutions of a block) over the flattened plane, on x86-64 with AVX.

pool.py sweeps each row in vector tiles of interior positions and visits the positions next to the padding
one at a time, so a 7- or 14-wide row is mostly scalar work (MaxPool 3x3 on 1024x7x7: 225 us, onnxruntime
23 us). Here, as in conv_plane.py, a tile is any run of consecutive positions of the plane, each tap one
vector load at a fixed offset, the lanes whose tap falls outside the input masked (conv_plane ``_masks``):
-inf for a max (it never wins; NaN still propagates, first NaN first, as pool.py's), 0 for a sum. An
average divides by the taps inside the input, counted from the same masks, or with count_include_pad by the
kernel's size (stride 1 without ceil_mode overrun: every window lies inside the explicit padding).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from llvmlite import ir

from pegasus.exporters.glow.kernels.conv import axes_of
from pegasus.exporters.glow.kernels.conv_plane import _load, _masks, _offsets, tile_lanes
from pegasus.exporters.glow.kernels.linear import FLOATS, Numeric, Simd, affine, cover
from pegasus.exporters.glow.kernels.registry import KernelContext
from pegasus.exporters.glow.llvm.loops import for_range


def fits(k: KernelContext, axes, simd: Simd) -> bool:
    """x86-64 with AVX, a float channels-first 2-D pooling of stride 1, output rows as long as the input's,
    one output (no Indices)."""
    x, y = k.inputs[0], k.outputs[0]
    if k.target.arch != "x86_64" or simd.width < 32 or x.type.dtype not in FLOATS or len(axes) != 2:
        return False
    height, width = axes
    return (len([ref for ref in k.outputs if ref is not None]) == 1 and all(a.stride == 1 for a in axes)
            and width.size == width.out and x.strides[2:] == (width.size, 1) and y.strides[2:] == (width.out, 1)
            and height.out * width.out >= simd.lanes(ir.FloatType()))


def emit(k: KernelContext, geometry, simd: Simd, average: bool, include_pads: bool = False) -> bool:
    """The pooling over every (n, c) plane in tiles of the flattened plane; False (nothing emitted) when it
    does not ``fits``."""
    x, y = k.inputs[0], k.outputs[0]
    axes = axes_of(geometry(k.attrs, x.shape), x.shape[2:])
    if not fits(k, axes, simd):
        return False
    b = k.builder
    num = Numeric(b, x.type.dtype)
    height, width = axes
    total = height.out * width.out
    lanes = tile_lanes(simd, num, total)
    shape = SimpleNamespace(axes=axes)

    def tile(first, lanes: int) -> None:
        fill = num.constant(0, lanes) if average else num.lowest(lanes)
        masks = _masks(num, shape, first, lanes, True)
        x_flat = affine(b, 0, (plane, x.strides[1]), (first, 1))
        value, count = None, None
        for kh, kw, offset in _offsets(shape):
            mask = masks[kh, kw]
            tap = _load(num, x, affine(b, offset, (x_flat, 1)), lanes, mask, False, fill)
            if average:
                value = tap if value is None else num.add(value, tap)
                if not include_pads:
                    one = num.constant(1, lanes) if mask is None else b.select(mask, num.constant(1, lanes), fill)
                    count = one if count is None else num.add(count, one)
            else:
                value = tap if value is None else num.maximum(tap, value)
        if average:
            value = num.div(value, count if count is not None else
                            num.constant(math.prod(a.kernel for a in axes), lanes))
        num.store(y, affine(b, 0, (plane, y.strides[1]), (first, 1)), value)

    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        cover(b, 0, total, lanes, tile)
    return True
