"""Properties of the one integer arithmetic (pegasus.ops.fixedpoint), checked against exact rational
arithmetic (fractions.Fraction) rather than against the code itself:

- quantize_multiplier: M fits 31 bits (and 63 - acc_bits), M * 2**-S is within 2**-30 of the real factor,
  powers of two are pure shifts, and acc * M (+ the rounding half) cannot overflow int64;
- requantize is exactly clamp(floor(acc * M / 2**S + 1/2) + zp) (round half up), and within one step of
  round(acc * r) for the real factor r;
- quantize_values is clamp(round-half-to-even(x / scale) + zp), as ONNX QuantizeLinear;
- the tflite rounding is TFLite's C code (QuantizeMultiplier, SRDHM, RoundingDivideByPOT, the int64 form)
  re-written with Python integers, and SRDHM / RoundingDivideByPOT round exactly as stated (half up / half away
  from zero) in rational arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pegasus.ops.fixedpoint import (
    dequantize_values,
    integer_range,
    quantize_multiplier,
    quantize_values,
    requantize,
    rounding_shift,
)

INT64_MAX = 2**63 - 1
reals = st.floats(1e-9, 1e3, allow_nan=False, allow_infinity=False)
acc_widths = st.integers(8, 48)
out_types = st.sampled_from(["uint8", "int8", "int16", "int32"])


def exact_requantize(acc: int, multiplier: int, shift: int, zero_point: int, lo: int, hi: int) -> int:
    """clamp(floor(acc * M / 2**S + 1/2) + zp) in exact rational arithmetic."""
    value = math.floor(Fraction(acc * multiplier, 2**shift) + Fraction(1, 2))
    return min(max(value + zero_point, lo), hi)


def multiplier_bits(acc_bits: int) -> int:
    return max(1, min(31, 63 - acc_bits))


# ---- quantize_multiplier ----------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(reals, acc_widths)
def test_multiplier_fits_and_is_close(real, acc_bits):
    m = quantize_multiplier(real, acc_bits)
    assert 0 < m.multiplier < 2**31 and m.multiplier < 2 ** multiplier_bits(acc_bits)
    assert 0 <= m.shift <= 62
    error = abs(Fraction(m.multiplier, 2**m.shift) - Fraction(real)) / Fraction(real)
    # the closest M * 2**-S with M of b bits is within half a unit of b bits: 2**-b relative
    assert error <= Fraction(1, 2 ** multiplier_bits(acc_bits))
    if acc_bits <= 32:
        assert error <= Fraction(1, 2**30)


@settings(max_examples=300, deadline=None)
@given(reals, acc_widths)
def test_accumulator_product_never_overflows_int64(real, acc_bits):
    m = quantize_multiplier(real, acc_bits)
    largest = 2 ** (acc_bits - 1)  # |acc| <= 2**(acc_bits - 1)
    half = 2 ** (m.shift - 1) if m.shift else 0
    assert largest * m.multiplier + half <= INT64_MAX
    # and numpy's int64 arithmetic gives the exact answer at both extremes
    for acc in (largest - 1, -largest):
        got = int(requantize(np.array([acc]), m.multiplier, m.shift, 0, -(2**62), 2**62)[0])
        assert got == exact_requantize(acc, m.multiplier, m.shift, 0, -(2**62), 2**62)


@pytest.mark.parametrize("acc_bits", [8, 16, 32, 40, 62])
def test_powers_of_two_are_pure_shifts(acc_bits):
    for k in range(0, 63):
        m = quantize_multiplier(2.0**-k, acc_bits)
        assert (m.multiplier, m.shift) == (1, k)
    for k in range(1, 20):  # factors above 1: an integer multiplier, no shift, while M has the bits
        if k < multiplier_bits(acc_bits):
            m = quantize_multiplier(2.0**k, acc_bits)
            assert (m.multiplier, m.shift) == (2**k, 0)
        else:
            with pytest.raises(ValueError, match="too large"):
                quantize_multiplier(2.0**k, acc_bits)


def test_degenerate_factors():
    assert (quantize_multiplier(0.0).multiplier, quantize_multiplier(0.0).shift) == (0, 0)
    assert quantize_multiplier(2.0**-80).multiplier == 0  # below 2**-63 nothing survives the shift
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            quantize_multiplier(bad)
    with pytest.raises(ValueError, match="too large"):
        quantize_multiplier(2.0**40 + 1)


# ---- requantize -------------------------------------------------------------------------------------------

@st.composite
def requant_cases(draw):
    acc_bits = draw(st.integers(8, 40))
    real = draw(reals)
    m = quantize_multiplier(real, acc_bits)
    accs = draw(st.lists(st.integers(-(2 ** (acc_bits - 1)), 2 ** (acc_bits - 1) - 1), min_size=1, max_size=20))
    dtype = draw(out_types)
    tmin, tmax = integer_range(dtype)
    zero_point = draw(st.integers(tmin, tmax)) if dtype != "int32" else 0
    lo = draw(st.integers(tmin, tmax))
    hi = draw(st.integers(lo, tmax))
    return real, m, accs, zero_point, lo, hi


@settings(max_examples=400, deadline=None)
@given(requant_cases())
def test_requantize_is_exact_round_half_up(case):
    real, m, accs, zero_point, lo, hi = case
    got = requantize(np.array(accs, dtype=np.int64), m.multiplier, m.shift, zero_point, lo, hi)
    expected = [exact_requantize(a, m.multiplier, m.shift, zero_point, lo, hi) for a in accs]
    assert got.tolist() == expected


@settings(max_examples=400, deadline=None)
@given(st.integers(-(2**30), 2**30), reals, st.integers(-128, 127))
def test_requantize_is_within_one_of_rounding_the_real_product(acc, real, zero_point):
    """Where the result is a plausible output (|acc * r| < 2**20), the 31-bit multiplier's error is far
    below half a step: the only difference from round(acc * r) is the tie rule, at most 1."""
    assume(abs(acc * real) < 2**20)
    m = quantize_multiplier(real, 32)
    got = int(requantize(np.array([acc]), m.multiplier, m.shift, zero_point, -(2**40), 2**40)[0])
    assert abs(got - (round(Fraction(acc) * Fraction(real)) + zero_point)) <= 1
    assert abs(got - zero_point - acc * real) <= 0.5 + abs(acc * real) * 2.0**-30


def test_ties_round_up_not_to_even():
    # acc * M / 2**S = k + 1/2 exactly: half up gives k + 1 for positive and negative k
    for acc, expected in [(1, 1), (3, 2), (5, 3), (-1, 0), (-3, -1), (-5, -2)]:
        assert int(requantize(np.array([acc]), 1, 1, 0, -100, 100)[0]) == expected
    assert rounding_shift(np.array([7, -7, 8, -8]), 2).tolist() == [2, -2, 2, -2]
    assert rounding_shift(np.array([5, -5]), 0).tolist() == [5, -5]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=8), st.lists(reals, min_size=1, max_size=8))
def test_per_channel_parameters_broadcast(accs, channel_reals):
    pairs = [quantize_multiplier(r, 42) for r in channel_reals]
    acc = np.array(accs, dtype=np.int64)[:, None] * np.ones(len(pairs), dtype=np.int64)
    got = requantize(acc, np.array([p.multiplier for p in pairs]), np.array([p.shift for p in pairs]), 3, -(2**31),
                     2**31 - 1)
    for c, p in enumerate(pairs):
        assert got[:, c].tolist() == [exact_requantize(a, p.multiplier, p.shift, 3, -(2**31), 2**31 - 1) for a in accs]


# ---- quantize_values / dequantize_values ------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=1, max_size=30),
       st.floats(1e-4, 10.0), st.sampled_from(["uint8", "int8", "int16"]), st.data())
def test_quantize_values_rounds_half_to_even_and_saturates(values, scale, dtype, data):
    tmin, tmax = integer_range(dtype)
    zero_point = data.draw(st.integers(tmin, tmax))
    got = quantize_values(np.array(values, dtype=np.float32), scale, zero_point, dtype)
    assert got.dtype == np.dtype(dtype)
    for x, q in zip(values, got.tolist()):
        ratio = Fraction(x) / Fraction(scale)
        # round half to even of the exact ratio, unless float64 division landed on the other side of a tie
        nearest = round(ratio)
        if abs(ratio - math.floor(ratio) - Fraction(1, 2)) > Fraction(1, 2**40):
            assert q == min(max(nearest + zero_point, tmin), tmax)
        else:
            assert abs(q - min(max(nearest + zero_point, tmin), tmax)) <= 1


def test_quantize_values_ties_go_to_even():
    assert quantize_values(np.array([0.5, 1.5, 2.5, -0.5, -1.5]), 1.0, 0, "int8").tolist() == [0, 2, 2, 0, -2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=1, max_size=30), st.floats(1e-6, 1e3), st.integers(0, 255))
def test_dequantize_is_scale_times_offset(levels, scale, zero_point):
    got = dequantize_values(np.array(levels, dtype=np.uint8), scale, zero_point)
    assert got.dtype == np.float32
    expected = (np.array(levels, dtype=np.float64) - zero_point) * np.float32(scale)
    np.testing.assert_allclose(got, expected, rtol=2**-23, atol=0)


# ---- TFLite's rounding (rounding: tflite), against C's integer semantics re-written with Python ints ------------
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
int32s = st.integers(INT32_MIN, INT32_MAX)


def c_divide(a: int, b: int) -> int:
    """C's integer division of Python ints: truncated toward zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def c_srdhm(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul as written in C."""
    if a == b == INT32_MIN:
        return INT32_MAX
    product = a * b
    nudge = 2**30 if product >= 0 else 1 - 2**30
    return c_divide(product + nudge, 2**31)


def c_rounding_divide_by_pot(x: int, exponent: int) -> int:
    """gemmlowp's RoundingDivideByPOT on int32 (two's complement masks on Python ints)."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def c_quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: (Q31 multiplier, exponent), from frexp and C's round()."""
    mantissa, exponent = math.frexp(real)
    q = int(Fraction(mantissa) * 2**31 + Fraction(1, 2))   # round() of a positive value: half away from zero
    if q == 2**31:
        q, exponent = q // 2, exponent + 1
    if exponent < -31:
        return 0, 0
    return q, exponent


def round_half_away(value: Fraction) -> int:
    magnitude = math.floor(abs(value) + Fraction(1, 2))
    return magnitude if value >= 0 else -magnitude


@settings(max_examples=400, deadline=None)
@given(st.floats(2.0**-40, 2.0**20, allow_nan=False))
def test_tflite_multiplier_is_quantize_multiplier(real):
    from pegasus.ops.fixedpoint import tflite_multiplier

    q, exponent = c_quantize_multiplier(real)
    m = tflite_multiplier(real)
    if q == 0:
        assert m.multiplier == 0
        return
    assert (m.multiplier, 31 - m.shift) == (q, exponent)
    assert 2**30 <= m.multiplier < 2**31
    assert abs(Fraction(m.multiplier, 2**m.shift) - Fraction(real)) <= Fraction(real) / 2**31


@settings(max_examples=600, deadline=None)
@given(int32s, int32s)
def test_srdhm_is_c_and_rounds_half_up(a, b):
    from pegasus.ops.fixedpoint import srdhm

    got = int(srdhm(np.array([a]), np.array([b]))[0])
    assert got == c_srdhm(a, b)
    if not a == b == INT32_MIN:   # the nudge form is floor(a * b / 2**31 + 1/2) for either sign
        assert got == math.floor(Fraction(a * b, 2**31) + Fraction(1, 2))


@settings(max_examples=600, deadline=None)
@given(int32s, st.integers(0, 31))
def test_rounding_divide_by_pot_rounds_half_away(x, exponent):
    from pegasus.ops.fixedpoint import rounding_divide_by_pot

    got = int(rounding_divide_by_pot(np.array([x]), exponent)[0])
    assert got == c_rounding_divide_by_pot(x, exponent) == round_half_away(Fraction(x, 2**exponent))


@settings(max_examples=600, deadline=None)
@given(st.integers(-(2**24), 2**24), st.floats(2.0**-20, 2.0**6, allow_nan=False))
def test_multiply_by_quantized_multiplier_is_tflites(acc, real):
    """requantize(rounding='tflite') is MultiplyByQuantizedMultiplier: left shift, SRDHM, rounding right shift;
    within one step of the exact product (two roundings)."""
    q, exponent = c_quantize_multiplier(real)
    assume(q and exponent <= 7 and abs(acc) * 2**max(exponent, 0) < 2**31)
    left, right = max(exponent, 0), max(-exponent, 0)
    expected = c_rounding_divide_by_pot(c_srdhm(acc * 2**left, q), right)
    from pegasus.ops.fixedpoint import requantize, tflite_multiplier

    m = tflite_multiplier(real)
    got = int(requantize(np.array([acc]), m.multiplier, m.shift, 0, INT32_MIN, INT32_MAX, "tflite")[0])
    assert got == expected
    assert abs(got - Fraction(acc) * Fraction(q, 2**(31 - exponent))) <= 1


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**40), 2**40), st.floats(2.0**-30, 2.0**-4, allow_nan=False))
def test_wide_multiplier_is_tflites_int64_form(acc, real):
    """rounding='tflite_wide': TFLite's MultiplyByQuantizedMultiplier(int64): a 16-bit multiplier, round half up."""
    from pegasus.ops.fixedpoint import requantize, tflite_multiplier

    q, exponent = c_quantize_multiplier(real)
    assume(q and exponent >= -31 + 16)
    reduced = (q + 2**15) >> 16 if q < 0x7FFF0000 else 0x7FFF
    total = 15 - exponent
    expected = (acc * reduced + 2**(total - 1)) >> total
    m = tflite_multiplier(real)
    assert int(requantize(np.array([acc]), m.multiplier, m.shift, 0, -(2**62), 2**62, "tflite_wide")[0]) == expected


def test_tflite_ties_round_away_from_zero():
    """x * 0.25 = SRDHM(x, 2**30) (exact for even x) then a rounding shift by one: ties go away from zero, where
    half_up takes -0.5 to 0 and -1.5 to -1."""
    from pegasus.ops.fixedpoint import requantize, tflite_multiplier

    m = tflite_multiplier(0.25)
    assert (m.multiplier, m.shift) == (2**30, 32)
    got = requantize(np.array([2, -2, 6, -6]), m.multiplier, m.shift, 0, -100, 100, "tflite")
    assert got.tolist() == [1, -1, 2, -2]
    assert requantize(np.array([2, -2, 6, -6]), 1, 2, 0, -100, 100).tolist() == [1, 0, 2, -1]
