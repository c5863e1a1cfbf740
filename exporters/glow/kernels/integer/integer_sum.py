"""Emitters for the integer sums of TFLite's int8 kernels (pegasus/ops/integer_sum.py): QAddRescaled (ADD/SUB,
each operand moved onto a fine grid of its own, three roundings) and QReduceSum (SUM, MEAN with 1/count in the
multiplier). They exist so that a pre-quantized TFLite model's bundle computes its reference's bits; every
scaling is requant.py's, in the op's ``rounding``.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_dot import load_word
from pegasus.exporters.glow.kernels.integer.integer_elementwise import centered
from pegasus.exporters.glow.kernels.reference.reduce import Accumulator
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.barriers import opaque
from pegasus.exporters.glow.llvm.convert import load_as
from pegasus.exporters.glow.llvm.lanes import broadcast_loop
from pegasus.exporters.glow.llvm.loops import affine, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import (
    clamp,
    laundered,
    narrow_bound,
    narrow_prescale,
    narrow_scale,
    requantize,
    widen,
)
from pegasus.exporters.glow.llvm.types import I32, I64
from pegasus.ir.dtypes import DType
from pegasus.ops.fixedpoint import integer_range, scale
from pegasus.ops.integer import clamp_bounds
from pegasus.ops.integer_sum import QReduceSum

#: The unbounded range of an intermediate ``scale`` (no clamp: the reference clamps only the output).
_UNCLAMPED = (-(1 << 63), (1 << 63) - 1)


def _scaled(b: ir.IRBuilder, value: ir.Value, left_shift: int, multiplier: int, shift: int, rounding: str) -> ir.Value:
    """scale(value << left_shift, multiplier, shift) on i64, unclamped."""
    value = widen(b, value, I64, True)
    value = b.shl(value, ir.Constant(I64, left_shift)) if left_shift else value
    return requantize(b, value, multiplier, shift, 0, *_UNCLAMPED, I64, rounding)


def _centred_bound(ref, zero_point: int) -> int:
    low, high = integer_range(ref.type.dtype.numpy)
    return max(abs(low - zero_point), abs(high - zero_point))


def _narrow_plan(k: KernelContext) -> int | None:
    """The bound of A' ± B' when each of QAddRescaled's three roundings can be taken in 32 bits
    (requant.narrow_bound, the operands' ranges bounding every step), else None."""
    (x1, x2), a = k.inputs, k.attrs
    bounds = []
    for ref, zero, multiplier, shift in ((x1, a.a_zero_point, a.a_multiplier, a.a_shift),
                                         (x2, a.b_zero_point, a.b_multiplier, a.b_shift)):
        bounds.append(narrow_bound(_centred_bound(ref, zero) << a.left_shift, multiplier, shift, a.rounding))
    if None in bounds:
        return None
    total = sum(bounds)
    return total if narrow_bound(total, a.multiplier[0], a.shift[0], a.rounding) is not None else None


def _operands(k: KernelContext) -> tuple[tuple, tuple]:
    (x1, x2), a = k.inputs, k.attrs
    return ((x1, a.a_zero_point, a.a_multiplier, a.a_shift), (x2, a.b_zero_point, a.b_multiplier, a.b_shift))


def _prescale(k: KernelContext) -> int:
    """The bits the tables are shifted ahead of the sum's rounding: only when both operands have one."""
    return narrow_prescale(k.attrs.shift[0], k.attrs.rounding) if all(_tabled(k)) else 0


def _tabled(k: KernelContext) -> list[bool]:
    """Which operands read their scaled values from tables (``_scaled_tables``)."""
    size = k.outputs[0].type.size
    return [ref.type.dtype.itemsize == 1 and size > 1 << 8 for ref, *_ in _operands(k)]


def _scaled_tables(k: KernelContext, prescale: int) -> list[ir.Value | None]:
    """For each 8-bit operand of a sum of more elements than it has values, the table of its scaled value A'
    for every value (requant.py's ``scale``, as the reference computes it), in the layer's parameters: one load
    instead of the centring, shift and SMMULR rounding (ResNet-8's three adds on Cortex-M7: 83 K instructions
    fewer, 6 KB more weights), shifted left by ``prescale`` bits (requant.narrow_prescale, done ahead for the
    sum's rounding when both operands have tables). None for the others."""
    a = k.attrs
    tables = []
    for (ref, zero, multiplier, shift), tabled in zip(_operands(k), _tabled(k)):
        low, high = integer_range(ref.type.dtype.numpy)
        if not tabled:
            tables.append(None)
            continue
        values = scale((np.arange(low, high + 1, dtype=np.int64) - zero) << a.left_shift, multiplier, shift,
                       a.rounding) << prescale
        table = k.table(tuple(int(v) for v in values), I32)
        if isinstance(table, ir.GlobalVariable):
            table = table.gep([ir.Constant(I32, 0), ir.Constant(I32, 0)])
        # indexed by the value itself (one LDR with a shifted register), its base laundered so LLVM keeps it
        tables.append(opaque(k.builder, k.builder.gep(table, [ir.Constant(I32, -low)])))
    return tables


def _narrow_sum(b: ir.IRBuilder, k: KernelContext, f1: ir.Value, f2: ir.Value,
                tables: list[ir.Value | None], factors: dict[int, ir.Value]) -> ir.Value:
    """QAddRescaled's output in 32-bit arithmetic (``_narrow_plan`` said it may be)."""
    a = k.attrs
    parts = []
    for (ref, zero, multiplier, shift), flat, table in zip(_operands(k), (f1, f2), tables):
        if table is not None:
            parts.append(b.load(b.gep(table, [load_as(b, ref, flat, DType.INT32)])))
            continue
        centred = widen(b, centered(b, ref, flat, zero), I32, True)
        shifted = b.shl(centred, ir.Constant(I32, a.left_shift)) if a.left_shift else centred
        parts.append(narrow_scale(b, shifted, multiplier, shift, a.rounding, factors.get(multiplier)))
    return _narrow_output(b, k, parts, factors, None not in tables and _prescale(k) > 0)


def _word_sums(k: KernelContext, tables: list[ir.Value], factors: dict[int, ir.Value]) -> None:
    """Two same-shaped 8-bit operands read from tables, four elements a word: each operand's word loaded once
    and its bytes extracted in registers (SBFX/UBFX), the elements left over one by one."""
    b, (x1, x2), y = k.builder, k.inputs, k.outputs[0]
    words, rest = divmod(y.type.size, 4)
    signed = [ref.type.dtype.numpy.kind == "i" for ref in (x1, x2)]

    def byte(word: ir.Value, lane: int, is_signed: bool) -> ir.Value:
        high = b.shl(word, ir.Constant(I32, 24 - 8 * lane)) if lane < 3 else word
        return (b.ashr if is_signed else b.lshr)(high, ir.Constant(I32, 24))

    with for_range(b, words, name="word", unroll=False) as i:
        first = b.mul(i, ir.Constant(I32, 4))
        loaded = [load_word(b, ref, first) for ref in (x1, x2)]
        for lane in range(4):
            parts = [b.load(b.gep(table, [byte(word, lane, sign)]))
                     for word, table, sign in zip(loaded, tables, signed)]
            y.store(b, _narrow_output(b, k, parts, factors, _prescale(k) > 0), b.add(first, ir.Constant(I32, lane)))
    for flat in range(words * 4, words * 4 + rest):
        y.store(b, _narrow_sum(b, k, ir.Constant(I32, flat), ir.Constant(I32, flat), tables, factors), flat)


def _narrow_output(b: ir.IRBuilder, k: KernelContext, parts: list[ir.Value], factors: dict[int, ir.Value],
                   prescaled: bool) -> ir.Value:
    """requant(A' ± B') + zero point, clamped, in the output type (32-bit arithmetic)."""
    y, a = k.outputs[0], k.attrs
    total = b.sub(*parts) if a.subtract else b.add(*parts)
    lo, hi = clamp_bounds(a)
    out = narrow_scale(b, total, a.multiplier[0], a.shift[0], a.rounding, factors.get(a.multiplier[0]),
                       lo >= a.out_zero_point, prescaled)   # a fused ReLU: no rounding of negative results needed
    return widen(b, clamp(b, b.add(out, ir.Constant(I32, a.out_zero_point)), lo, hi), y.element, True)


@emitter("QAddRescaled")
def q_add_rescaled(k: KernelContext) -> None:
    """y = requant(A' ± B'), A' = scale((a - za) << left_shift, ma, sa), B' likewise, broadcasting: in 32-bit
    arithmetic where the operands' ranges allow it (``_narrow_plan``: three SMMULRs on Cortex-M), else in 64."""
    b, (x1, x2), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    lo, hi = clamp_bounds(a)
    narrow = _narrow_plan(k) is not None
    tables = _scaled_tables(k, _prescale(k)) if narrow else [None, None]
    # the multipliers the narrow form's SMMULRs take, each laundered once (requant.narrow_scale)
    factors = {m: laundered(b, m) for m in {a.a_multiplier, a.b_multiplier, a.multiplier[0]}} if narrow else {}
    if None not in tables and x1.shape == x2.shape == y.shape:
        _word_sums(k, tables, factors)
        return
    with broadcast_loop(b, y, [x1, x2]) as (out, f1, f2):
        if narrow:
            y.store(b, _narrow_sum(b, k, f1, f2, tables, factors), out)
        else:
            first = _scaled(b, centered(b, x1, f1, a.a_zero_point), a.left_shift, a.a_multiplier, a.a_shift,
                            a.rounding)
            second = _scaled(b, centered(b, x2, f2, a.b_zero_point), a.left_shift, a.b_multiplier, a.b_shift,
                             a.rounding)
            total = b.sub(first, second) if a.subtract else b.add(first, second)
            y.store(b, requantize(b, total, a.multiplier[0], a.shift[0], a.out_zero_point, lo, hi, y.element,
                                  a.rounding), out)


@emitter("QReduceSum")
def q_reduce_sum(k: KernelContext) -> None:
    """y = requant(Σ (x - zx)) over the reduced axes, per output element (the sum in i64, as the reference)."""
    b, x, y, a = k.builder, k.inputs[0], k.outputs[0], k.attrs
    rank = len(x.shape)
    axes = QReduceSum._axes(a, rank)
    kept = [d for d in range(rank) if d not in axes]
    strides = [math.prod(x.shape[d + 1:]) for d in range(rank)]
    lo, hi = clamp_bounds(a)
    if y.type.size == 0:
        return
    with loop_nest(b, [x.shape[d] for d in kept]) as outer:
        base = affine(b, 0, *((i, strides[d]) for i, d in zip(outer, kept)))
        out = affine(b, 0, *((i, math.prod(x.shape[e] for e in kept[n + 1:])) for n, i in enumerate(outer)))
        total = Accumulator(b, ir.Constant(I64, 0))
        with loop_nest(b, [x.shape[d] for d in axes]) as inner:
            flat = affine(b, 0, (base, 1), *((i, strides[d]) for i, d in zip(inner, axes)))
            total.set(b.add(total.get(), widen(b, centered(b, x, flat, a.x_zero_point), I64, True)))
        y.store(b, requantize(b, total.get(), a.multiplier[0], a.shift[0], a.out_zero_point, lo, hi, y.element,
                              a.rounding), out)
