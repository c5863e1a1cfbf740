"""LLVM for the integer arithmetic of ``pegasus.ops.fixedpoint``, shared by every integer emitter so
that the generated code rounds exactly as ``pegasus inference --dtype quantized`` does.

``requantize`` computes ``clamp(scale(acc, M, S) + zp, lo, hi)`` in 64-bit integers with the op's
``rounding``: ``half_up`` is ``(acc * M + 2**(S-1)) >> S`` (on 32-bit ARM the product is one SMULL, the
shift a pair of register shifts; when ``M`` is 1 the multiply disappears, when ``S`` is 0 the rounding
does); ``tflite`` is TFLite's MultiplyByQuantizedMultiplier — ``acc << max(31 - S, 0)``, SRDHM (the
64-bit product, its nudge, a division by 2**31 truncating toward zero, INT32_MIN * INT32_MIN saturating)
and RoundingDivideByPOT by ``max(S - 31, 0)`` (half away from zero); ``tflite_wide`` is ``half_up`` with
TFLite's 16-bit multiplier ``wide_multiplier`` gives. ``M``/``S`` may be per-channel LLVM values (loaded
from a parameter table, kernels/parameters.py) or Python ints (folded into the instruction stream).
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.llvm.barriers import opaque
from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.types import I32, I64
from pegasus.ops.fixedpoint import INT32_MAX, INT32_MIN

Scalar = ir.Value | int


def widen(b: ir.IRBuilder, value: ir.Value, to: ir.IntType, signed: bool) -> ir.Value:
    """Sign- or zero-extend (or truncate) an integer value to ``to``."""
    width = value.type.width
    if width == to.width:
        return value
    if width > to.width:
        return b.trunc(value, to)
    return b.sext(value, to) if signed else b.zext(value, to)


def _as(value: Scalar, ty: ir.IntType) -> ir.Value:
    return ir.Constant(ty, int(value)) if isinstance(value, int) else value


def rounding_shift(b: ir.IRBuilder, value: ir.Value, shift: Scalar) -> ir.Value:
    """``(v + 2**(S-1)) >> S`` (arithmetic) for S >= 1, ``v`` for S == 0, on the value's own width."""
    ty = value.type
    if isinstance(shift, int):
        if shift == 0:
            return value
        half = ir.Constant(ty, 1 << (shift - 1))
        return b.ashr(b.add(value, half), ir.Constant(ty, shift))
    shift = widen(b, shift, ty, signed=False)
    one = ir.Constant(ty, 1)
    # 2**(S-1) when S >= 1, else 0: (1 << S) >> 1 is exactly that for every S in 0..62
    half = b.lshr(b.shl(one, shift), one)
    return b.ashr(b.add(value, half), shift)


def clamp(b: ir.IRBuilder, value: ir.Value, lo: int, hi: int) -> ir.Value:
    """min(max(value, lo), hi) by LLVM's smax/smin, which Arm turns into one SSAT/USAT when the bounds are a
    signed or unsigned n-bit range (an int8 output's clamp), and x86 into CMOVs or PMAXSD/PMINSD."""
    ty = value.type
    suffix = f"v{ty.count}{ty.element.intrinsic_name}" if isinstance(ty, ir.VectorType) else ty.intrinsic_name
    low, high = ir.Constant(ty, lo), ir.Constant(ty, hi)
    if isinstance(ty, ir.VectorType):
        low, high = (ir.Constant(ty, [ir.Constant(ty.element, v)] * ty.count) for v in (lo, hi))
    smax = intrinsic(b.module, f"llvm.smax.{suffix}", ty, [ty, ty])
    smin = intrinsic(b.module, f"llvm.smin.{suffix}", ty, [ty, ty])
    return b.call(smin, [b.call(smax, [value, low]), high])


def wide_multiplier(multiplier: int, shift: int) -> tuple[int, int]:
    """``tflite_wide``'s (M, S) as the ``half_up`` pair computing the same bits: TFLite's 16-bit multiplier
    ``(M + 2**15) >> 16`` (0x7FFF past 0x7FFF0000) and the shift ``S - 16`` (pegasus.ops.fixedpoint)."""
    reduced = (multiplier + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF
    return reduced, shift - 16


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def srdhm(b: ir.IRBuilder, a: ir.Value, m: ir.Value, saturate: bool = True) -> ir.Value:
    """SaturatingRoundingDoublingHighMul of two i64 values holding int32 values (``a`` may be wider, as the
    reference's): ``(a * m + nudge) / 2**31`` truncated toward zero, nudge 2**30 for a product >= 0 else
    1 - 2**30; INT32_MIN * INT32_MIN gives INT32_MAX (checked only when ``saturate``)."""
    product = b.mul(a, m)
    zero = _i64(0)
    nudged = b.add(product, b.select(b.icmp_signed("<", product, zero), _i64(1 - (1 << 30)), _i64(1 << 30)))
    # C's division by 2**31: an arithmetic shift of the value biased by 2**31 - 1 when negative
    toward_zero = b.add(nudged, b.select(b.icmp_signed("<", nudged, zero), _i64((1 << 31) - 1), zero))
    result = b.ashr(toward_zero, _i64(31))
    if not saturate:
        return result
    both = b.and_(b.icmp_signed("==", a, _i64(INT32_MIN)), b.icmp_signed("==", m, _i64(INT32_MIN)))
    return b.select(both, _i64(INT32_MAX), result)


def rounding_divide_by_pot(b: ir.IRBuilder, x: ir.Value, exponent: Scalar) -> ir.Value:
    """RoundingDivideByPOT on i64: ``x / 2**exponent`` to nearest, ties away from zero (0 <= exponent < 63)."""
    if isinstance(exponent, int):
        if exponent == 0:
            return x
        exponent = _i64(exponent)
    mask = b.sub(b.shl(_i64(1), exponent), _i64(1))
    threshold = b.add(b.ashr(mask, _i64(1)), b.zext(b.icmp_signed("<", x, _i64(0)), I64))
    above = b.icmp_signed(">", b.and_(x, mask), threshold)
    return b.add(b.ashr(x, exponent), b.zext(above, I64))


def tflite_scale(b: ir.IRBuilder, acc: ir.Value, multiplier: Scalar, shift: Scalar,
                 saturate: bool | None = None) -> ir.Value:
    """MultiplyByQuantizedMultiplier(acc, M, 31 - S) on i64 (``fixedpoint.multiply_by_quantized_multiplier``).
    ``saturate`` (SRDHM's INT32_MIN case) defaults to whether M can be INT32_MIN at all."""
    x = widen(b, acc, I64, signed=True)
    if isinstance(shift, int):
        left, right = max(31 - shift, 0), max(shift - 31, 0)
        if left:
            x = b.shl(x, _i64(left))
    else:
        t = b.sub(_i64(31), widen(b, shift, I64, signed=False))
        zero = _i64(0)
        x = b.shl(x, b.select(b.icmp_signed(">", t, zero), t, zero))
        right = b.select(b.icmp_signed("<", t, zero), b.neg(t), zero)
    if saturate is None:
        saturate = multiplier == INT32_MIN if isinstance(multiplier, int) else True
    m = _as(multiplier, I64) if isinstance(multiplier, int) else widen(b, multiplier, I64, signed=True)
    return rounding_divide_by_pot(b, srdhm(b, x, m, saturate), right)


def requantize(b: ir.IRBuilder, acc: ir.Value, multiplier: Scalar, shift: Scalar, zero_point: int,
               lo: int, hi: int, out: ir.IntType, rounding: str = "half_up",
               saturate: bool | None = None) -> ir.Value:
    """The requantisation rule on a signed accumulator (any width), result as ``out``, rounded as ``rounding``
    says (``tflite_wide`` takes Python ints only: its multiplier is reduced here; ``saturate``: tflite_scale's)."""
    if rounding == "tflite":
        scaled = tflite_scale(b, acc, multiplier, shift, saturate)
    elif rounding in ("half_up", "tflite_wide"):
        if rounding == "tflite_wide":
            if not (isinstance(multiplier, int) and isinstance(shift, int)):
                raise TypeError("tflite_wide requantisation takes constant multipliers (wide_multiplier)")
            multiplier, shift = wide_multiplier(multiplier, shift)
        acc = widen(b, acc, I64, signed=True)
        if not (isinstance(multiplier, int) and multiplier == 1):
            acc = b.mul(acc, widen(b, _as(multiplier, I64), I64, signed=True))
        scaled = rounding_shift(b, acc, shift if isinstance(shift, int) else widen(b, shift, I64, signed=False))
    else:
        raise ValueError(f"unknown rounding '{rounding}'")
    if zero_point:
        scaled = b.add(scaled, ir.Constant(I64, zero_point))
    return b.trunc(clamp(b, scaled, lo, hi), out) if out.width < 64 else clamp(b, scaled, lo, hi)


def narrow_bound(bound: int, multiplier: int, shift: int, rounding: str) -> int | None:
    """A bound on |scale(x, M, S)| for |x| <= ``bound`` when ``narrow_scale`` computes it in 32 bits, else None:
    ``tflite`` needs |x << max(31 - S, 0)| < 2**30 (so SRDHM is SMMULR(2x', M)) and e = S - 31 <= 30;
    ``half_up`` needs 32 <= S <= 64; both 0 <= M < 2**31."""
    if not 0 <= multiplier < (1 << 31) or bound >= (1 << 31):
        return None
    if rounding == "tflite" and not (bound << max(31 - shift, 0) >= (1 << 30) or shift - 31 > 30):
        return -(-(bound << max(31 - shift, 0)) * multiplier // (1 << max(shift, 31))) + 1
    if rounding == "half_up" and 32 <= shift <= 64:
        return -(-bound * multiplier // (1 << shift)) + 1
    return None


def high_word(b: ir.IRBuilder, x: ir.Value, multiplier: Scalar, rounded: bool) -> ir.Value:
    """The high 32 bits of x * M (x an i32 or i64 whose product fits 64 bits; M an int or a loaded table
    value): SMMUL on Arm with the DSP extension, SMMULR — + 2**31 before the shift — when ``rounded``."""
    m = ir.Constant(I64, multiplier) if isinstance(multiplier, int) else widen(b, multiplier, I64, True)
    product = b.mul(widen(b, x, I64, True), m)
    if rounded:
        product = b.add(product, ir.Constant(I64, 1 << 31))
    return b.trunc(b.ashr(product, ir.Constant(I64, 32)), I32)


def halve_rounding(b: ir.IRBuilder, value: ir.Value, shift: Scalar, plus: int = 0) -> ir.Value:
    """((v >> shift) + 1) >> 1 = floor((v + 2**shift) / 2**(shift + 1)) without overflow (``shift`` an int or
    an i8/i32 table value), + ``plus`` (an output zero point) folded in for free: ((v >> shift) + 1 + 2 plus) >> 1."""
    shift = ir.Constant(I32, shift) if isinstance(shift, int) else widen(b, shift, I32, True)
    one = ir.Constant(I32, 1)
    return b.ashr(b.add(b.ashr(value, shift), ir.Constant(I32, 1 + 2 * plus)), one)


def divide_away(b: ir.IRBuilder, value: ir.Value, shift: Scalar, plus: int = 0) -> ir.Value:
    """RoundingDivideByPOT(v, shift + 1) on i32 with |v| <= 2**30: floor((v - [v < 0] + 2**shift) / 2**(shift+1)),
    + ``plus``."""
    return halve_rounding(b, b.add(value, b.ashr(value, ir.Constant(I32, 31))), shift, plus)


def laundered(b: ir.IRBuilder, value: int) -> ir.Value:
    """The i32 ``value`` in a register LLVM cannot see into (computed in the function's entry block)."""
    with b.goto_entry_block():
        return opaque(b, ir.Constant(I32, value))


def narrow_prescale(shift: int, rounding: str) -> int:
    """The left shift ``narrow_scale`` first applies to its operand (a caller may apply it ahead: ``prescaled``)."""
    return max(31 - shift, 0) + 1 if rounding == "tflite" else 0


def narrow_scale(b: ir.IRBuilder, x: ir.Value, multiplier: int, shift: int, rounding: str,
                 factor: ir.Value | None = None, clamps_negatives: bool = False, prescaled: bool = False) -> ir.Value:
    """``scale(x, M, S)`` of an i32 ``x`` in 32-bit arithmetic, exactly, where ``narrow_bound`` allows it:
    ``tflite``: SRDHM(x', M) = SMMULR(2x', M) (see integer_dot.Requant), then RoundingDivideByPOT by e as
    two shifts; ``half_up``: SMMULR(x, M) for S = 32, else ((SMMUL(x, M) >> (S - 33)) + 1) >> 1. ``factor``:
    M already ``laundered`` (one register for every call in a loop). ``clamps_negatives``: a clamp at or above
    the zero point follows, sending every negative result to the same value however it is rounded, so TFLite's
    round-half-away of negative values (``divide_away``'s sign correction) is left out. ``prescaled``: ``x`` is
    already shifted left by ``narrow_prescale`` bits (exactly: the bound allows it)."""
    if rounding == "tflite":
        left, exponent = max(31 - shift, 0), max(shift - 31, 0)
        # both factors laundered: seeing a shifted operand or a constant multiplier, LLVM at times expands the
        # 64-bit product as UMLAL + MUL + shifts instead of one SMMULR
        factor = laundered(b, multiplier) if factor is None else factor
        y = high_word(b, opaque(b, x if prescaled else b.shl(x, ir.Constant(I32, left + 1))), factor, True)
        if not exponent:
            return y
        return halve_rounding(b, y, exponent - 1) if clamps_negatives else divide_away(b, y, exponent - 1)
    return high_word(b, x, multiplier, True) if shift == 32 else halve_rounding(b, high_word(b, x, multiplier, False),
                                                                                 shift - 33)
