"""Emitter for Resize (pegasus/ops/resize.py): nearest, linear and cubic, every coordinate mode.

Everything that depends on coordinates is decided at export time by the op's own plan
(``Resize.sampling``: per resized axis the source samples and their weights, including antialias and
exclude_outside, exactly as the reference resamples): per resized axis, an index table (source offsets,
already multiplied by the axis stride) and a weight table, baked into the bundle as read-only
constants. The kernel is then only a gather and a weighted sum:

- nearest: one tap per axis, so the output is a pure gather (``shape_ops.gather_axes``) on raw
  elements, any dtype;
- linear/cubic: y[o] = Σ_tn wn[on,tn] · … Σ_t0 w0[o0,t0] · x[idx0[o0,t0] + … + idxn[on,tn]] over the
  resized axes 0..n (the separable filter, factored per axis). Float tensors are computed in float32
  (FMA allowed), within float32 rounding of the reference's float64. Integer tensors are computed in
  float64 with the reference's exact order of operations (the first axis innermost, products summed
  tap by tap, no FMA), so rounding half to even and clamping give its result exactly — a float32
  sum would land on the other side of .5 ties now and then. (Soft-float on cores without a
  double-precision FPU, e.g. Cortex-M4/M33; integer Resize is rare in float models.)

tf_crop_and_resize: positions whose source coordinate falls outside the input on any axis get
``extrapolation_value`` (the reference sets it per axis and then filters it with weights summing to
one, the same within rounding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.reference.reduce import Accumulator
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import load_as, store_as
from pegasus.exporters.glow.llvm.copies import gather_axes, raw_constant
from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.scalar import Arith
from pegasus.exporters.glow.llvm.tables import constant_table, table_load
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.ir.dtypes import DType
from pegasus.ops.resize import AxisSampling, Resize


def _extrapolation(dtype: DType, value: float) -> float | int:
    """extrapolation_value as the reference stores it in a tensor of ``dtype`` (integers: rounded, clamped)."""
    if dtype.is_integer:
        info = np.iinfo(dtype.numpy)
        return int(np.clip(np.rint(value), info.min, info.max))
    return value


def _nearest(k: KernelContext, resized: list[AxisSampling]) -> None:
    x, y = k.inputs[0], k.outputs[0]
    maps: list[np.ndarray | None] = [None] * len(x.shape)
    for taps in resized:
        maps[taps.axis] = np.where(taps.outside, -1, taps.index[:, 0])
    crop = any(taps.outside.any() for taps in resized)
    fill = raw_constant(x.type.dtype, _extrapolation(x.type.dtype, k.attrs.extrapolation_value)) if crop else None
    gather_axes(k.builder, y, x, maps, fill)


@dataclass
class _Tables:
    """One resized axis as bundle constants: offsets (index · stride) and weights, (n_out, taps)."""

    taps: AxisSampling
    offsets: ir.GlobalVariable
    weights: ir.GlobalVariable
    outside: ir.GlobalVariable | None


def _tables(module: ir.Module, taps: AxisSampling, stride: int, weight: DType) -> _Tables:
    outside = constant_table(module, taps.outside.astype(np.int8)) if taps.outside.any() else None
    return _Tables(taps, constant_table(module, (taps.index * stride).astype(np.int32)),
                   constant_table(module, taps.weights.astype(weight.numpy)), outside)


def _weighted_sum(ar: Arith, x: TensorRef, tables: list[_Tables], index: list[ir.Value], offset: ir.Value,
                  flags: tuple[str, ...]) -> ir.Value:
    """Σ_t w[o,t] · (the same over the remaining axes at offset + idx[o,t]); a load when none remain."""
    b = ar.b
    if not tables:
        return load_as(b, x, offset, ar.dtype)
    first, rest = tables[0], tables[1:]
    count = first.taps.taps
    row = b.mul(index[first.taps.axis], const(count), flags=("nsw",))
    total = Accumulator(b, ar.const(0))
    with for_range(b, count, name=f"t{first.taps.axis}") as t:
        entry = b.add(row, t, flags=("nsw",))
        weight = table_load(b, first.weights, entry)
        inner = _weighted_sum(ar, x, rest, index, b.add(offset, table_load(b, first.offsets, entry), flags=("nsw",)),
                              flags)
        total.set(b.fadd(total.get(), b.fmul(weight, inner, flags=flags), flags=flags))
    return total.get()


def _outside(b: ir.IRBuilder, tables: list[_Tables], index: list[ir.Value]) -> ir.Value | None:
    flags = [b.icmp_unsigned("!=", table_load(b, t.outside, index[t.taps.axis]), ir.Constant(ir.IntType(8), 0))
             for t in tables if t.outside is not None]
    return None if not flags else flags[0] if len(flags) == 1 else _any(b, flags)


def _any(b: ir.IRBuilder, flags: list[ir.Value]) -> ir.Value:
    result = flags[0]
    for flag in flags[1:]:
        result = b.or_(result, flag)
    return result


def _round_to_integer(ar: Arith, value: ir.Value, dtype: DType) -> ir.Value:
    """np.rint, clip to the type's range and astype, for a float64 value (the reference's order; clipping
    first is the same since the bounds are integers). Half to even without the math library, which is
    float32 only: the integer part by a saturating conversion, then the exact fraction decides."""
    b, info = ar.b, np.iinfo(dtype.numpy)
    wide = ir.IntType(64 if dtype.itemsize == 8 or dtype is DType.UINT32 else 32)
    clamped = ar.min(ar.max(value, float(info.min)), float(info.max))
    convert = intrinsic(b.module, f"llvm.fptosi.sat.{wide.intrinsic_name}.f64", wide, [ar.type])
    whole = b.call(convert, [clamped])                         # toward zero
    fraction = ar.sub(clamped, b.sitofp(whole, ar.type))
    half = ar.abs(fraction)
    away = b.or_(ar.cmp(">", half, 0.5), b.and_(ar.cmp("==", half, 0.5), b.trunc(whole, ir.IntType(1))))
    step = b.select(ar.cmp("<", fraction, 0), ir.Constant(wide, -1), ir.Constant(wide, 1))
    rounded = b.select(away, b.add(whole, step), whole)
    target = llvm_type(dtype)
    return b.trunc(rounded, target) if target.width < wide.width else rounded


def _store_result(ar: Arith, y: TensorRef, flat: ir.Value, value: ir.Value) -> None:
    """The float result as the reference stores it: integers rounded half to even and clamped."""
    dtype = y.type.dtype
    if dtype.is_integer:
        y.store(ar.b, _round_to_integer(ar, value, dtype), flat)
    else:
        store_as(ar.b, y, flat, value, ar.dtype)


def _filtered(k: KernelContext, resized: list[AxisSampling]) -> None:
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    exact = x.type.dtype.is_integer or x.type.dtype is DType.FLOAT64
    ar = Arith(b, DType.FLOAT64 if exact else DType.FLOAT32, k.math)
    tables = [_tables(b.module, taps, x.strides[taps.axis], ar.dtype) for taps in reversed(resized)]
    mapped = {taps.axis for taps in resized}
    with loop_nest(b, y.shape) as index:
        offset = const(0)
        for axis, i in enumerate(index):
            if axis not in mapped:
                offset = b.add(offset, b.mul(i, const(x.strides[axis]), flags=("nsw",)), flags=("nsw",))
        value = _weighted_sum(ar, x, tables, index, offset, () if exact else ("contract",))
        outside = _outside(b, tables, index)
        if outside is not None:
            value = b.select(outside, ar.const(k.attrs.extrapolation_value), value)
        _store_result(ar, y, y.flat(b, index), value)


@emitter("Resize")
def resize(k: KernelContext) -> None:
    if k.outputs[0].type.size == 0:
        return
    resized = Resize.sampling(k.attrs, k.inputs[0].shape)
    (_nearest if k.attrs.mode == "nearest" else _filtered)(k, resized)
