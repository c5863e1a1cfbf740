"""Emitters for the integer kernels of quantized models other than the matrix products
(pegasus/ops/integer.py): Requantize, QAdd, QMul, LookupTable (8-bit: a load; int16: interpolated between
513 knots), QSoftmax (QAveragePool: integer_pool.py); and for the two float ops of quantized graphs,
BFloat16Round and DtypeConverter.

Every emitter computes the bits of its NumPy reference: zero points are subtracted exactly (i32 for
8/16-bit tensors, i64 for wider ones), products and sums that may pass 32 bits are 64-bit, and the
rounding and clamping are ``requant.py``'s (the LLVM twin of ``pegasus.ops.fixedpoint``). No float
instruction touches an integer value. A Requantize of an 8-bit tensor is a 256-entry table computed at
export time by the op's own reference (Cortex-M7: 3 instructions per element instead of 14).

Division is the one operation whose semantics differ: LLVM's ``sdiv`` truncates where Python's ``//``
floors, and a 64-bit division is a library call on 32-bit targets (``__aeabi_ldivmod``), which bundles
do not make. QSoftmax's ``(e * 65536 + total // 2) // total`` has a quotient of at most 65536 (every e
is one of the non-negative terms of total): one 32-bit ``udiv`` when both operands fit in 32 bits
(always, with the Q15 exp tables of the lowering and fewer than 2**17 classes), else a 64-bit long
division of the magnitude, straight-line.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.reference.identity import identity
from pegasus.exporters.glow.kernels.reference.reduce import Accumulator, axis_loops
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import load_as
from pegasus.exporters.glow.llvm.copies import raw
from pegasus.exporters.glow.llvm.functions import entry_alloca, intrinsic
from pegasus.exporters.glow.llvm.lanes import broadcast_loop
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.requant import clamp, requantize, rounding_divide_by_pot, srdhm, tflite_scale, widen
from pegasus.exporters.glow.llvm.tables import constant_table, table_load
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import I32, I64, llvm_type
from pegasus.ir.dtypes import DType
from pegasus.ops.common import normalize_axis
from pegasus.ops.fixedpoint import INT32_MAX, INT32_MIN, integer_range
from pegasus.ops.integer import LookupTable, RequantAttrs, clamp_bounds
from pegasus.ops.registry import get_op

Value = ir.Value

# ---- exact integer helpers --------------------------------------------------------------------------


def _work_type(dtype: DType) -> DType:
    """The type in which ``x - zero_point`` is exact for a tensor of ``dtype``."""
    return DType.INT64 if dtype.itemsize >= 4 else DType.INT32


def centered(b: ir.IRBuilder, ref: TensorRef, flat: Value, zero_point: int) -> Value:
    """ref[flat] - zero_point, exactly (i32, or i64 for 32/64-bit tensors)."""
    work = _work_type(ref.type.dtype)
    value = load_as(b, ref, flat, work)
    return b.sub(value, ir.Constant(llvm_type(work), zero_point)) if zero_point else value


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def long_division(b: ir.IRBuilder, n: Value, d: Value, bits: int) -> Value:
    """floor(n / d) for unsigned i64 n and d >= 1 whose quotient is below 2**bits: restoring division,
    one quotient bit per step (no library call on any target), a rolled loop: it is the rare path of
    ``small_udiv``, whose unrolled steps took most of a softmax's code."""
    quotient, rest = entry_alloca(b, I64), entry_alloca(b, I64)
    b.store(_i64(0), quotient)
    b.store(n, rest)
    with for_range(b, bits, name="bit", unroll=False) as step:
        bit = b.zext(b.sub(const(bits - 1), step), I64)
        fits = b.icmp_unsigned(">=", b.lshr(b.load(rest), bit), d)     # rest >= d << bit, without overflow
        b.store(b.select(fits, b.sub(b.load(rest), b.shl(d, bit)), b.load(rest)), rest)
        b.store(b.select(fits, b.or_(b.load(quotient), b.shl(_i64(1), bit)), b.load(quotient)), quotient)
    return b.load(quotient)


def small_udiv(b: ir.IRBuilder, n: Value, d: Value, bits: int) -> Value:
    """floor(n / d) for unsigned i64 n and d >= 1 whose quotient is below 2**bits: one 32-bit udiv when
    both fit in 32 bits, else ``long_division``."""
    fits = b.icmp_unsigned("==", b.lshr(b.or_(n, d), _i64(32)), _i64(0))
    with b.if_else(fits, likely=True) as (narrow, wide):
        with narrow:
            fast = b.zext(b.udiv(b.trunc(n, I32), b.trunc(d, I32)), I64)
            fast_block = b.block
        with wide:
            slow = long_division(b, n, d, bits)
            slow_block = b.block
    result = b.phi(I64)
    result.add_incoming(fast, fast_block)
    result.add_incoming(slow, slow_block)
    return result


def _requantizer(attrs: RequantAttrs, out: ir.IntType) -> Callable[[ir.IRBuilder, Value], Value]:
    """acc -> the op's single-multiplier requantisation (``pegasus.ops.fixedpoint.requantize``)."""
    lo, hi = clamp_bounds(attrs)
    multiplier, shift = attrs.multiplier[0], attrs.shift[0]
    return lambda b, acc: requantize(b, acc, multiplier, shift, attrs.out_zero_point, lo, hi, out, attrs.rounding)


# ---- element-wise ---------------------------------------------------------------------------------


def _lookup(b: ir.IRBuilder, x: TensorRef, y: TensorRef, entry: Callable[[Value], Value]) -> None:
    """y[i] = entry(x[i] - min(x's type)) for an 8-bit x; entries are y's raw elements."""
    first = -integer_range(x.type.dtype.numpy)[0]
    out = raw(b, y)
    with for_range(b, y.type.size) as i:
        out.store(b, entry(b.add(load_as(b, x, i, DType.INT32), const(first))), i)


@emitter("Requantize")
def requantize_op(k: KernelContext) -> None:
    """y = requant(x - in_zero_point). An 8-bit x has 256 possible values: their results, computed at
    export time by the op's own reference, become a table (one load per element instead of a 64-bit
    multiply, shift and clamp)."""
    b, x, y, a = k.builder, k.inputs[0], k.outputs[0], k.attrs
    if x.type.dtype.itemsize == 1:
        info = np.iinfo(x.type.dtype.numpy)
        levels = np.arange(info.min, info.max + 1).astype(x.type.dtype.numpy)
        table = constant_table(b.module, get_op("Requantize").reference(a, [levels])[0])
        _lookup(b, x, y, lambda index: table_load(b, table, index))
        return
    finish = _requantizer(a, y.element)
    with for_range(b, y.type.size) as i:
        y.store(b, finish(b, centered(b, x, i, a.in_zero_point)), i)


def _wide(b: ir.IRBuilder, value: Value) -> Value:
    return widen(b, value, I64, signed=True)


@emitter("QAdd")
def q_add(k: KernelContext) -> None:
    """y = clamp(rounding_shift((a - za) * ma + (b - zb) * mb, shift) + zy), broadcasting."""
    b, (x1, x2), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    lo, hi = clamp_bounds(RequantAttrs(out_dtype=a.out_dtype, lo=a.lo, hi=a.hi))
    with broadcast_loop(b, y, [x1, x2]) as (out, f1, f2):
        acc = b.add(b.mul(_wide(b, centered(b, x1, f1, a.a_zero_point)), _i64(a.a_multiplier)),
                    b.mul(_wide(b, centered(b, x2, f2, a.b_zero_point)), _i64(a.b_multiplier)))
        y.store(b, requantize(b, acc, 1, a.shift, a.out_zero_point, lo, hi, y.element), out)


@emitter("QMul")
def q_mul(k: KernelContext) -> None:
    """y = requant((a - za) * (b - zb)), broadcasting (the product in 64 bits)."""
    b, (x1, x2), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    finish = _requantizer(a, y.element)
    with broadcast_loop(b, y, [x1, x2]) as (out, f1, f2):
        product = b.mul(_wide(b, centered(b, x1, f1, a.a_zero_point)), _wide(b, centered(b, x2, f2, a.b_zero_point)))
        y.store(b, finish(b, product), out)


@emitter("LookupTable")
def lookup_table(k: KernelContext) -> None:
    """8-bit x: y = table[x - min(x's type)], the table's raw elements (any dtype) copied bit for bit.
    int16 x: the reference's interpolation between knots, in i32 (|Δt| * 127 < 2**31 for 16-bit knots)."""
    b, (x, table), y = k.builder, k.inputs, k.outputs[0]
    if x.type.dtype == DType.INT16:
        _interpolate(b, x, table, y)
        return
    entries = raw(b, table)
    _lookup(b, x, y, lambda index: entries.load(b, index))


def _interpolate(b: ir.IRBuilder, x: TensorRef, table: TensorRef, y: TensorRef) -> None:
    """y = t[i] + (((t[i + 1] - t[i]) * f + half) >> bits) with u = x + 32768, i = u >> bits, f = u & (2**bits - 1)."""
    bits = LookupTable.SEGMENT_BITS
    with for_range(b, y.type.size) as n:
        u = b.add(load_as(b, x, n, DType.INT32), const(32768))
        index = b.lshr(u, const(bits))
        low = load_as(b, table, index, DType.INT32)
        high = load_as(b, table, b.add(index, const(1)), DType.INT32)
        step = b.mul(b.sub(high, low), b.and_(u, const((1 << bits) - 1)))
        value = b.add(low, b.ashr(b.add(step, const(1 << (bits - 1))), const(bits)))
        y.store(b, b.trunc(value, y.element), n)


@emitter("BFloat16Round")
def bfloat16_round(k: KernelContext) -> None:
    """The float32 bits rounded to the top 16, ties to even, NaN kept as it is: integer instructions on
    the raw bits (exact, and no float register can quieten a NaN)."""
    b = k.builder
    x, y = raw(b, k.inputs[0]), raw(b, k.outputs[0])

    def c(v: int) -> ir.Constant:
        return ir.Constant(I32, v)

    with for_range(b, y.type.size) as i:
        bits = x.load(b, i)
        odd = b.and_(b.lshr(bits, c(16)), c(1))
        rounded = b.and_(b.add(b.add(bits, c(0x7FFF)), odd), c(-0x10000))
        nan = b.icmp_unsigned(">", b.and_(bits, c(0x7FFFFFFF)), c(0x7F800000))
        y.store(b, b.select(nan, bits, rounded), i)


emitter("DtypeConverter")(identity)   # a float identity marking a precision boundary: Identity's copy


# ---- QSoftmax ---------------------------------------------------------------------------------------

#: Quotient bits of QSoftmax's division: (e * 2**16 + total // 2) // total <= 2**16 when 0 <= e <= total.
SOFTMAX_QUOTIENT_BITS = 17


def _row(b: ir.IRBuilder, x, base: Value, n: int, inner: int) -> tuple[Callable, Value]:
    """One softmax row (``n`` elements ``inner`` apart from ``base``): a visitor over its flat indices, and its
    largest value as i32."""
    def along(visit: Callable[[Value], None]) -> None:   # rolled: a row is short and its body long
        with for_range(b, n, name="j", unroll=False) as j:
            visit(affine(b, 0, (base, 1), (j, inner)))

    peak = Accumulator(b, load_as(b, x, base, DType.INT32))
    along(lambda flat: peak.set(_max(b, peak.get(), load_as(b, x, flat, DType.INT32))))
    return along, peak.get()


@emitter("QSoftmax")
def q_softmax(k: KernelContext) -> None:
    """Per row along ``axis``: m = max x; e = table[m - x] (two-level for int16, as the reference); total = Σ e (i64);
    y = requant((e * 65536 + total // 2) // total). The table's entries must be >= 0 (exp values)."""
    b, (x, table), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    axis = normalize_axis(a.axis, len(x.shape))
    outer, n, inner, nest = axis_loops(b, x.shape, axis)
    if x.type.size == 0:
        return
    if a.rounding == "tflite":
        _tflite_softmax(k, axis)
        return
    finish = _requantizer(a, y.element)
    with nest as (o, i):
        along, m = _row(b, x, affine(b, 0, (o, n * inner), (i, 1)), n, inner)

        def exp_of(flat: Value) -> Value:
            d = b.sub(m, load_as(b, x, flat, DType.INT32))
            if table.type.rank == 1:  # e = table[min(d, L - 1)]; uint16 entries are zero-extended
                last = const(table.shape[0] - 1)
                entry = table.load(b, b.select(b.icmp_signed(">", d, last), last, d))
                return b.zext(entry, I64) if table.type.dtype == DType.UINT16 else b.sext(entry, I64)
            low = table.load(b, b.and_(d, const(255)))           # exp(-(d & 255) s) and exp(-256 (d >> 8) s), Q15
            high = table.load(b, b.add(b.lshr(d, const(8)), const(256)))
            return b.sext(b.ashr(b.add(b.mul(high, low), const(16384)), const(15)), I64)

        total = Accumulator(b, _i64(0))
        along(lambda flat: total.set(b.add(total.get(), exp_of(flat))))
        t = total.get()
        half = b.ashr(t, _i64(1))
        divisor = b.select(b.icmp_signed("<", t, _i64(1)), _i64(1), t)   # total 0: every e is 0, so y = requant(0)

        def probability(flat: Value) -> None:
            numerator = b.add(b.mul(exp_of(flat), _i64(65536)), half)
            y.store(b, finish(b, small_udiv(b, numerator, divisor, SOFTMAX_QUOTIENT_BITS)), flat)

        along(probability)


def _max(b: ir.IRBuilder, x: Value, y: Value) -> Value:
    return b.select(b.icmp_signed(">", y, x), y, x)


# ---- QSoftmax, rounding tflite: TFLite's reference SOFTMAX (pegasus.ops.integer._tflite_softmax/16) -----------


def _bit_length32(b: ir.IRBuilder, total: Value) -> Value:
    """The reference's bit length of a positive i64 ``total``, counted over 32 bits (at most 32)."""
    ctlz = intrinsic(b.module, "llvm.ctlz.i64", I64, [I64, ir.IntType(1)])
    length = b.sub(_i64(64), b.call(ctlz, [total, ir.Constant(ir.IntType(1), 0)]))
    return b.select(b.icmp_signed(">", length, _i64(32)), _i64(32), length)


def _saturating_left_shift(b: ir.IRBuilder, x: Value, exponent: int) -> Value:
    threshold = (1 << (31 - exponent)) - 1
    shifted = b.select(b.icmp_signed("<", x, _i64(-threshold)), _i64(INT32_MIN), b.shl(x, _i64(exponent)))
    return b.select(b.icmp_signed(">", x, _i64(threshold)), _i64(INT32_MAX), shifted)


def _one_over_one_plus_x(b: ir.IRBuilder, a: Value) -> Value:
    """gemmlowp's 1 / (1 + a), Q0.31 in and out, on i64 as ``fixedpoint.one_over_one_plus_x``."""
    total = b.add(a, _i64(INT32_MAX))
    rounded = b.add(total, b.select(b.icmp_signed(">=", total, _i64(0)), _i64(1), _i64(-1)))
    half = b.sdiv(rounded, _i64(2))      # C's division by 2 (LLVM folds it into shifts: no library call)
    x = b.add(_i64(1515870810), srdhm(b, half, _i64(-1010580540), saturate=False))
    for _ in range(3):
        one_minus = b.sub(_i64(1 << 29), srdhm(b, half, x))
        x = b.add(x, _saturating_left_shift(b, srdhm(b, x, one_minus), 2))
    return _saturating_left_shift(b, x, 1)


def _tflite_softmax(k: KernelContext, axis: int) -> None:
    """Per row: d = max - x. 8-bit: e = table[d] (Q0.31), S = Σ RoundingDivideByPOT(e, 12),
    (r, u) = GetReciprocal(S, 12), y = clamp(RoundingDivideByPOT(SRDHM(r, e), u + 31 - bits(y)) + zy).
    int16: e = interp(table[0], clamp(scale(-d) + 32767)), S = Σ e, h = 32 - bit length of S,
    r = interp(table[1], clamp((((S << (h - 1)) + 2**13) >> 14) - 3 * 2**15)),
    y = clamp((e r + 2**(30 - h)) >> (31 - h), 0, 32767)."""
    b, (x, table), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    outer, n, inner, nest = axis_loops(b, x.shape, axis)
    sixteen = table.type.rank == 2
    lo, hi = clamp_bounds(a)
    with nest as (o, i):
        along, m = _row(b, x, affine(b, 0, (o, n * inner), (i, 1)), n, inner)

        def exp_of(flat: Value) -> Value:
            d = b.sub(m, load_as(b, x, flat, DType.INT32))
            if not sixteen:
                return b.sext(table.load(b, d), I64)
            scaled = b.add(tflite_scale(b, b.neg(widen(b, d, I64, True)), a.multiplier[0], a.shift[0]), _i64(32767))
            return widen(b, _knots(b, table, 0, _clamp16(b, scaled)), I64, True)

        total = Accumulator(b, _i64(0))
        along(lambda flat: total.set(b.add(total.get(), exp_of(flat) if sixteen
                                           else rounding_divide_by_pot(b, exp_of(flat), 12))))
        t = total.get()
        headroom = b.sub(_i64(32), _bit_length32(b, t))
        if sixteen:
            shifted = b.ashr(b.add(b.shl(t, b.sub(headroom, _i64(1))), _i64(1 << 13)), _i64(14))
            recip = widen(b, _knots(b, table, 1, _clamp16(b, b.sub(shifted, _i64(3 << 15)))), I64, True)
            right = b.sub(_i64(31), headroom)

            def probability(flat: Value) -> None:
                value = b.add(b.mul(exp_of(flat), recip), b.lshr(b.shl(_i64(1), right), _i64(1)))
                y.store(b, widen(b, clamp(b, b.ashr(value, right), 0, 32767), y.element, True), flat)
        else:
            wrapped = b.sext(b.trunc(b.sub(b.shl(t, headroom), _i64(1 << 31)), I32), I64)
            scale = _one_over_one_plus_x(b, wrapped)
            exponent = b.add(b.sub(_i64(12), headroom), _i64(31 - 8 * y.type.dtype.itemsize))

            def probability(flat: Value) -> None:
                value = rounding_divide_by_pot(b, srdhm(b, scale, exp_of(flat)), exponent)
                value = clamp(b, b.add(value, _i64(a.out_zero_point)), lo, hi)
                y.store(b, widen(b, value, y.element, True), flat)

        along(probability)


def _clamp16(b: ir.IRBuilder, value: Value) -> Value:
    return b.trunc(clamp(b, value, -32768, 32767), I32)


def _knots(b: ir.IRBuilder, table: TensorRef, row: int, u16: Value) -> Value:
    """LookupTable's int16 interpolation of ``u16`` (an int16 value as i32) between the knots of table[row]."""
    bits = LookupTable.SEGMENT_BITS
    u = b.add(u16, const(32768))
    index = b.add(b.lshr(u, const(bits)), const(row * LookupTable.INTERPOLATED_ENTRIES))
    low = load_as(b, table, index, DType.INT32)
    high = load_as(b, table, b.add(index, const(1)), DType.INT32)
    step = b.mul(b.sub(high, low), b.and_(u, const((1 << bits) - 1)))
    value = b.add(low, b.ashr(b.add(step, const(1 << (bits - 1))), const(bits)))
    return b.sext(b.trunc(value, ir.IntType(16)), I32)     # the reference's astype(int16)
