"""The integer arithmetic every quantized kernel shares, written once so that the NumPy reference
(``pegasus inference --dtype quantized``) and the generated code compute the same bits.

A real factor ``r`` (e.g. ``s_in * s_w / s_out``) is applied to an integer accumulator as a
fixed-point multiplier ``M`` and a right shift ``S``: ``r ≈ M * 2**-S`` with ``M`` a positive integer of
at most 31 bits (fewer when the accumulator is wide, so that ``acc * M`` always fits in 64 bits).
Powers of two become ``M = 1`` — dynamic fixed point is a pure shift.

Requantisation (the one rounding rule, "round half up"; ``>>`` is an arithmetic shift = floor)::

    y = clamp(((acc * M + 2**(S-1)) >> S) + zero_point, lo, hi)        (S >= 1)
    y = clamp(acc * M + zero_point, lo, hi)                            (S == 0)

computed in 64-bit integers. ``lo``/``hi`` are the output type's range, narrowed by a fused
ReLU/ReLU6/Clip. Quantizing a real value to a tensor's grid (weights, tables, graph inputs) uses
round-half-to-even as ONNX QuantizeLinear does: ``clamp(rint(x / scale) + zero_point, lo, hi)``.

That rule is the ``half_up`` rounding. A quantization table may name another one (``rounding:`` in the
.quantize file, carried into every integer op's ``rounding`` attribute), so that a model quantized
elsewhere runs with the arithmetic it was made for. ``tflite`` is TFLite's reference kernels' (which TFLite
Micro and CMSIS-NN match), with the same ``M * 2**-S`` meaning of a multiplier and shift:

    M = round_half_away(frexp(r).mantissa * 2**31)   (Q31, QuantizeMultiplier), S = 31 - frexp(r).exponent
    t = 31 - S (TFLite's shift: > 0 shifts left)
    y = RoundingDivideByPOT(SRDHM(acc << max(t, 0), M), max(-t, 0))    (MultiplyByQuantizedMultiplier)

where SRDHM(a, b) = (a * b + nudge) / 2**31 truncated toward zero (C division), nudge = 2**30 when a * b >= 0
else 1 - 2**30, saturating the one overflow (a = b = -2**31) -- that is floor(a * b / 2**31 + 1/2), ties up
for either sign; and RoundingDivideByPOT rounds half away from zero. TFLite derives ``r`` in double from
float32 scales, in each kernel's own order (the rules in pegasus/quantized/rules do so); a kernel that rounds
once (TF 2.21's FULLY_CONNECTED) is ``half_up`` with TFLite's multiplier. ``tflite_wide`` is TFLite's scaling
of the int64 accumulators of 16x8 kernels: a 16-bit multiplier ``(M + 2**15) >> 16`` (0x7FFF past 0x7FFF0000)
and one rounding half up: ``(acc * M16 + 2**(S-17)) >> (S - 16)``. The gemmlowp fixed-point functions TFLite's
int8 SOFTMAX uses (exp on negative values, 1 / (1 + x), the reciprocal of a sum) are here too, on int64 arrays
holding int32 values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Largest right shift a multiplier may use (the accumulator product is at most 63 bits).
MAX_SHIFT = 62
#: Largest multiplier width: M fits a signed 32-bit register (ARM SMULL operand).
MAX_MULTIPLIER_BITS = 31
#: The arithmetic a quantization table can ask for (its ``rounding`` entry; ``half_up`` when absent).
ROUNDINGS = ("half_up", "tflite")
#: What an integer op's ``rounding`` attribute may say: a table's rounding, or TFLite's wide-accumulator form.
OP_ROUNDINGS = ROUNDINGS + ("tflite_wide",)
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def integer_range(dtype: str | np.dtype) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


@dataclass(frozen=True)
class Multiplier:
    """``r ≈ multiplier * 2**-shift``."""

    multiplier: int
    shift: int

    @property
    def value(self) -> float:
        return self.multiplier * 2.0 ** -self.shift


def quantize_multiplier(real: float, acc_bits: int = 32, rounding: str = "half_up") -> Multiplier:
    """The closest ``M * 2**-S`` to ``real`` with ``M`` of at most ``min(31, 63 - acc_bits)`` bits.

    ``acc_bits`` bounds the accumulator's magnitude (|acc| < 2**(acc_bits - 1)), so ``acc * M`` never
    overflows 64 bits. Powers of two give ``M = 1``; a factor too small to matter gives ``M = 0``.
    The TFLite roundings take TFLite's QuantizeMultiplier instead (``tflite_multiplier``).
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantisation factor must be finite and >= 0, got {real}")
    if rounding != "half_up":
        return tflite_multiplier(real)
    if real == 0:
        return Multiplier(0, 0)
    bits = max(1, min(MAX_MULTIPLIER_BITS, 63 - acc_bits))
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2**exponent, mantissa in [0.5, 1)
    multiplier = round(mantissa * (1 << bits))
    shift = bits - exponent
    if multiplier == 1 << bits:  # rounding carried into the next power of two
        multiplier >>= 1
        shift -= 1
    while multiplier and multiplier % 2 == 0 and shift > 0:  # strip trailing zeros: 2**-k becomes (1, k)
        multiplier >>= 1
        shift -= 1
    if shift < 0:
        raise ValueError(f"requantisation factor {real} is too large (needs a left shift)")
    if shift > MAX_SHIFT:
        drop = shift - MAX_SHIFT
        multiplier = (multiplier + (1 << (drop - 1))) >> drop
        shift = MAX_SHIFT
    if multiplier == 0:
        return Multiplier(0, 0)
    return Multiplier(int(multiplier), int(shift))


def quantize_multipliers(reals: np.ndarray | list[float], acc_bits: int = 32,
                         rounding: str = "half_up") -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-channel multipliers and shifts as two tuples (what integer ops carry as attributes)."""
    pairs = [quantize_multiplier(float(r), acc_bits, rounding) for r in np.ravel(reals)]
    return tuple(p.multiplier for p in pairs), tuple(p.shift for p in pairs)


def tflite_multiplier(real: float) -> Multiplier:
    """TFLite's QuantizeMultiplier: the Q31 mantissa of ``real`` rounded half away from zero (a carry into
    2**31 halves it), as ``Multiplier(M, 31 - exponent)``; a factor below 2**-32 is 0 (``Multiplier(0, 31)``,
    TFLite's shift 0)."""
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantisation factor must be finite and >= 0, got {real}")
    if real == 0:
        return Multiplier(0, 31)
    mantissa, exponent = math.frexp(real)
    q = math.floor(mantissa * (1 << 31) + 0.5)  # exact in double: the mantissa has 53 bits
    if q == 1 << 31:
        q //= 2
        exponent += 1
    if exponent < -31:
        return Multiplier(0, 31)
    if exponent > 31:
        raise ValueError(f"requantisation factor {real} is too large for a Q31 multiplier")
    return Multiplier(int(q), 31 - exponent)


def rounding_shift(values: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """``(v + 2**(S-1)) >> S`` for S >= 1, ``v`` for S == 0, on int64 (round half up)."""
    values = np.asarray(values, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    half = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return np.right_shift(values + half, shift)


def scale(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
          rounding: str = "half_up") -> np.ndarray:
    """``acc * multiplier * 2**-shift`` rounded as ``rounding`` says (see the module docstring), on int64."""
    acc = np.asarray(acc, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if rounding == "half_up":
        return rounding_shift(acc * multiplier, shift)
    if rounding == "tflite":
        return multiply_by_quantized_multiplier(acc, multiplier, 31 - shift)
    if rounding == "tflite_wide":
        return multiply_by_quantized_multiplier_wide(acc, multiplier, 31 - shift)
    raise ValueError(f"unknown rounding '{rounding}' (valid: {', '.join(OP_ROUNDINGS)})")


def requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int, zero_point: int,
               lo: int, hi: int, rounding: str = "half_up") -> np.ndarray:
    """The requantisation rule above on an int64 accumulator; per-channel parameters broadcast."""
    return np.clip(scale(acc, multiplier, shift, rounding) + np.int64(zero_point), lo, hi)


# ---- TFLite's arithmetic (gemmlowp's fixed point) on int64 arrays holding int32 values -------------------

def _int64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _truncating_divide_pot(v: np.ndarray, exponent: int) -> np.ndarray:
    """``v / 2**exponent`` rounded toward zero, as C's integer division."""
    return np.where(v >= 0, v >> exponent, -((-v) >> exponent))


def srdhm(a, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul: ``(a * b + nudge) / 2**31`` (C division), -2**31 * -2**31 saturating."""
    a, b = _int64(a), _int64(b)
    product = a * b
    nudge = np.where(product >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    result = _truncating_divide_pot(product + nudge, 31)
    return np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), result)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """RoundingDivideByPOT: ``x / 2**exponent`` rounded to nearest, ties away from zero (exponent >= 0)."""
    x, exponent = _int64(x), _int64(exponent)
    mask = np.left_shift(np.int64(1), exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, tflite_shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier (int32 accumulators): a left shift, SRDHM, a rounding right shift."""
    tflite_shift = _int64(tflite_shift)
    left = np.maximum(tflite_shift, 0)
    right = np.maximum(-tflite_shift, 0)
    return rounding_divide_by_pot(srdhm(np.left_shift(_int64(x), left), multiplier), right)


def multiply_by_quantized_multiplier_wide(x, multiplier, tflite_shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier of an int64 accumulator (16x8 kernels): the multiplier reduced to
    16 bits, one shift rounding half up."""
    multiplier = _int64(multiplier)
    reduced = np.where(multiplier < 0x7FFF0000, (multiplier + (1 << 15)) >> 16, np.int64(0x7FFF))
    total = 15 - _int64(tflite_shift)
    return (_int64(x) * reduced + np.left_shift(np.int64(1), total - 1)) >> total


def saturating_left_shift(x, exponent: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingMultiplyByPOT with a positive exponent on int32 values."""
    x = _int64(x)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, np.int64(INT32_MAX),
                    np.where(x < -threshold, np.int64(INT32_MIN), x << exponent))


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((_int64(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _exp_on_quarter_interval(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out: Taylor around -1/8."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    polynomial = rounding_divide_by_pot(srdhm(x4_over_4 + x3, one_third) + x2, 1)
    return constant_term + srdhm(constant_term, x + polynomial)


#: exp(-2**k) in Q0.31 for k = -2..4: the barrel shifter of exp_on_negative_values
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
               (4, 242))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp's exp(a) for a <= 0 given in Q(integer_bits).(31 - integer_bits); the result is Q0.31."""
    a = _int64(a)
    fractional = 31 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_on_quarter_interval(saturating_left_shift(a_mod, integer_bits))
    remainder = a_mod - a
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = np.int64(1) << (fractional + exponent)
            result = np.where(remainder & bit, srdhm(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), np.int64(0), result)
    return np.where(a == 0, np.int64(INT32_MAX), result)


def one_over_one_plus_x(a) -> np.ndarray:
    """gemmlowp's 1 / (1 + a) for a in [0, 1) in Q0.31 (Newton-Raphson, three steps), Q0.31 out."""
    a = _int64(a)
    total = a + INT32_MAX
    half_denominator = _truncating_divide_pot(total + np.where(total >= 0, 1, -1), 1)  # RoundingHalfSum
    x = 1515870810 + srdhm(half_denominator, -1010580540)  # 48/17 - 32/17 * d, Q2.29
    for _ in range(3):
        one_minus = (1 << 29) - srdhm(half_denominator, x)
        x = x + saturating_left_shift(srdhm(x, one_minus), 2)
    return saturating_left_shift(x, 1)


def reciprocal(total, integer_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's GetReciprocal of positive int32 ``total`` in Q(integer_bits): (1 / total scaled into Q0.31,
    num_bits_over_unit)."""
    total = _int64(total)
    bit_length = np.sum(total[..., None] >= np.left_shift(np.int64(1), np.arange(32)), axis=-1)
    headroom_plus_one = 32 - bit_length
    bits_over_unit = integer_bits - headroom_plus_one
    shifted_minus_one = _wrap32(np.left_shift(total, headroom_plus_one) - (1 << 31))
    return one_over_one_plus_x(shifted_minus_one), bits_over_unit


def channel_view(values: tuple[int, ...], rank: int, axis: int) -> np.ndarray:
    """Per-channel parameters shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    array = np.asarray(values, dtype=np.int64)
    if array.size == 1:
        return array.reshape(())
    return array.reshape([-1 if i == axis % rank else 1 for i in range(rank)])


def quantize_values(x: np.ndarray, scale: np.ndarray | float, zero_point: np.ndarray | int, dtype: str) -> np.ndarray:
    """Real values onto an integer grid: clamp(rint(x / scale) + zp), round half to even (ONNX's rule)."""
    lo, hi = integer_range(dtype)
    q = np.rint(np.asarray(x, dtype=np.float64) / np.asarray(scale, dtype=np.float64)) + np.asarray(zero_point)
    return np.clip(q, lo, hi).astype(dtype)


def dequantize_values(q: np.ndarray, scale: np.ndarray | float, zero_point: np.ndarray | int) -> np.ndarray:
    """Integers back to reals: (q - zp) * scale, in float32 as the bundles compute it."""
    diff = (np.asarray(q, dtype=np.int64) - np.asarray(zero_point, dtype=np.int64)).astype(np.float32)
    return diff * np.asarray(scale, dtype=np.float32)


def bits_needed(magnitude: float) -> int:
    """Bits of a signed integer holding values of absolute value up to ``magnitude``."""
    return max(1, math.ceil(math.log2(magnitude + 1))) + 1
