"""Emitters for QuantizeLinear and DequantizeLinear (pegasus/ops/quantize_linear.py): the affine maps
between real and integer tensors, per tensor, per axis or blocked (the scale's shape says which).

QuantizeLinear divides (not multiplies by a reciprocal) and rounds half to even (half away from zero
with ``rounding`` half_away), so its integers are exactly the reference's. The rounded quotient is
clamped before it meets the zero point, in int32 (int64 for an int32 output), so the saturation is exact
for every finite input; NaN gives the type's minimum, as the reference and onnxruntime do.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import convert, load_as, store_as
from pegasus.exporters.glow.llvm.lanes import offset
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.scalar import Arith, compute_dtype
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.ir.dtypes import DType
from pegasus.ops.common import normalize_axis


@contextmanager
def param_loop(b: ir.IRBuilder, x: TensorRef, scale: TensorRef, attrs) -> Iterator[tuple[ir.Value, ir.Value]]:
    """Loop over x; yields (x's flat index, the flat index of its scale and zero point)."""
    if scale.type.size == 1 and scale.type.rank <= 1 and not attrs.block_size:
        with for_range(b, x.type.size) as i:
            yield i, const(0)
        return
    axis = normalize_axis(attrs.axis, len(x.shape))
    outer, along, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    with loop_nest(b, [outer, along, inner]) as (p, a, q):
        flat = offset(b, const(0), [p, a, q], [along * inner, inner, 1])
        if attrs.block_size:
            block = b.udiv(a, const(attrs.block_size))
            param = offset(b, const(0), [p, block, q], [scale.shape[axis] * inner, inner, 1])
        else:
            param = a
        yield flat, param


def _work_dtype(dtype: DType) -> DType:
    """Integer type wide enough to add a clamped quotient and a zero point of ``dtype`` exactly."""
    return DType.INT64 if dtype.itemsize >= 4 else DType.INT32


def _rounded_to(b: ir.IRBuilder, value: ir.Value, src: DType, out: DType, compute: DType) -> ir.Value:
    """value rounded to dtype ``out`` (as NumPy's astype does), then widened to ``compute``."""
    return convert(b, convert(b, value, src, out), out, compute)


@emitter("QuantizeLinear")
def quantize_linear(k: KernelContext) -> None:
    """y = clamp(round(x / scale) + zero_point) in y's integer type, rounded half to even (ONNX) or half away
    from zero (``rounding`` half_away, TFLite's QUANTIZE); x, scale and the quotient
    are rounded to the precision dtype as NumPy does (a float16 precision is emulated exactly in float32)."""
    x, scale, zero_point = (list(k.inputs) + [None])[:3]
    y, b = k.outputs[0], k.builder
    precision = DType(k.attrs.precision) if k.attrs.precision else scale.type.dtype
    real = Arith(b, compute_dtype(precision), k.math)
    work = Arith(b, _work_dtype(y.type.dtype))
    info = np.iinfo(y.type.dtype.numpy)
    span = float(2 ** (work.type.width - 2))   # |quotient| beyond this saturates whatever the zero point
    with param_loop(b, x, scale, k.attrs) as (flat, param):
        value = _rounded_to(b, x.load(b, flat), x.type.dtype, precision, real.dtype)
        step = _rounded_to(b, scale.load(b, param), scale.type.dtype, precision, real.dtype)
        quotient = _rounded_to(b, real.div(value, step), real.dtype, precision, real.dtype)
        if k.attrs.rounding == "half_away":     # TFLite's QUANTIZE (C's round): ties away from zero, every step exact
            magnitude = real.abs(quotient)
            floor = real.fn("floor", magnitude)
            up = real.cmp(">=", real.sub(magnitude, floor), 0.5)
            whole = real.copysign(real.select(up, real.add(floor, 1.0), floor), quotient)
        else:
            whole = real.fn("round_half_even", quotient)
        whole = real.select(real.is_nan(whole), -span, whole)   # NaN saturates to the minimum (onnxruntime)
        rounded = real.min(real.max(whole, -span), span)
        q = convert(b, rounded, real.dtype, work.dtype)
        if zero_point is not None:
            q = work.add(q, load_as(b, zero_point, param, work.dtype))
        store_as(b, y, flat, work.min(work.max(q, int(info.min)), int(info.max)), work.dtype)


@emitter("DequantizeLinear")
def dequantize_linear(k: KernelContext) -> None:
    """y = (x - zero_point) * scale; the difference is exact, then it and the scale are rounded to y's
    dtype and multiplied there (for a float16 output that is NumPy's roundings exactly)."""
    x, scale, zero_point = (list(k.inputs) + [None])[:3]
    y, b = k.outputs[0], k.builder
    out = y.type.dtype
    real, work = Arith(b, compute_dtype(out), k.math), Arith(b, _work_dtype(x.type.dtype))
    with param_loop(b, x, scale, k.attrs) as (flat, param):
        q = load_as(b, x, flat, work.dtype)
        if zero_point is not None:
            q = work.sub(q, load_as(b, zero_point, param, work.dtype))
        factor = _rounded_to(b, scale.load(b, param), scale.type.dtype, out, real.dtype)
        store_as(b, y, flat, real.mul(_rounded_to(b, q, work.dtype, out, real.dtype), factor), real.dtype)
