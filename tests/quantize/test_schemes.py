"""Quantization schemes (pegasus.quantizers.schemes) against the bounds that define them: quantizing then
dequantizing a value of the calibrated range moves it by at most half a step, real 0 is exact, zero points
stay in the type's range, dynamic fixed point uses power-of-two steps wide enough for max|x|, per-channel
symmetric weights use |q| <= 127 with zero point 0, symmetric_affine (Glow's symmetric / symmetric_with_uint8)
has zero point 0 and Glow's scale; invalid quantizer/qtype pairs are refused by name.

Round trips are measured in float64 on the grid ((q - zp) * scale) so that the bound is the scheme's, not
float32's; float64 division at an exact .5 tie is allowed 1e-9 of a step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pegasus.errors import PegasusError
from pegasus.ops.fixedpoint import integer_range, quantize_values
from pegasus.quantized.context import broadcast_params
from pegasus.quantizers.schemes import (
    SCALE_FLOOR,
    VALID,
    Scheme,
    asymmetric,
    check_pair,
    dynamic_fixed_point,
    symmetric,
)

TIE = 1e-9  # of a step: float64 rounding of x / scale at an exact tie

# float32 calibration ranges of normal magnitude (what observers produce on float32 tensors)
magnitudes = st.floats(1e-4, 1e4)
bounds = st.one_of(st.just(0.0), magnitudes, magnitudes.map(lambda v: -v))


def round_trip(values: np.ndarray, q) -> tuple[np.ndarray, np.ndarray]:
    scale, zero = broadcast_params(q, values.ndim)
    levels = quantize_values(values, scale, zero, q.numpy_dtype)
    return levels, (levels.astype(np.float64) - zero) * scale


def inside(lo: float, hi: float, count: int = 64) -> np.ndarray:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    return np.concatenate([np.linspace(lo, hi, count), [lo, hi, 0.0]])


@settings(max_examples=300, deadline=None)
@given(bounds, bounds, st.sampled_from(["u8", "i8"]))
def test_asymmetric_round_trip_is_within_half_a_step(a, b, qtype):
    lo, hi = min(a, b), max(a, b)
    q = asymmetric(lo, hi, qtype)
    scale, zero = q.scale[0], q.zero_point[0]
    tmin, tmax = integer_range(q.numpy_dtype)
    assert tmin <= zero <= tmax
    if hi > lo or lo < 0 or hi > 0:
        assert scale == pytest.approx((max(hi, 0.0) - min(lo, 0.0)) / 255.0, rel=1e-12)
    values = inside(lo, hi)
    levels, restored = round_trip(values, q)
    assert np.abs(restored - values).max() <= scale / 2 * (1 + TIE)
    assert restored[-1] == 0.0 and levels[-1] == zero  # real 0 is exactly the zero point


@pytest.mark.parametrize("qtype", ["u8", "i8"])
def test_asymmetric_zero_point_at_the_edges(qtype):
    tmin, tmax = integer_range({"u8": "uint8", "i8": "int8"}[qtype])
    assert asymmetric(0.0, 6.0, qtype).zero_point == [tmin]  # ReLU6 output: 0 at the bottom
    assert asymmetric(-6.0, 0.0, qtype).zero_point == [tmax]
    assert asymmetric(3.0, 6.0, qtype).min_value == [0.0]  # the range is widened to contain 0
    assert asymmetric(0.0, 0.0, qtype).scale == [1.0]  # an all-zero tensor still has a usable grid


@settings(max_examples=300, deadline=None)
@given(bounds, bounds, st.sampled_from([("i8", 8), ("i16", 16)]))
@example(-0.998, 0.998, ("i8", 8))  # max|x| in the top half step, on both sides
def test_dynamic_fixed_point_is_a_power_of_two_grid_wide_enough(a, b, qtype_bits):
    qtype, bits = qtype_bits
    lo, hi = min(a, b), max(a, b)
    q = dynamic_fixed_point(lo, hi, qtype, bits)
    top = max(abs(lo), abs(hi))
    assert q.zero_point == [0] and q.scale == [2.0 ** -q.fl]
    if top == 0:
        return
    top_level = 2 ** (bits - 1) - 1
    assert top * 2.0 ** q.fl < top_level + 0.5  # max|x| rounds onto a level, not past the top one...
    assert top * 2.0 ** (q.fl + 1) >= top_level + 0.5  # ...and fl is the largest with that property
    values = inside(lo, hi)
    levels, restored = round_trip(values, q)
    step = q.scale[0]
    # every value up to the top level + half a step rounds to its nearest level (the bottom level is
    # -2**(bits-1) steps, beyond any -max|x|)
    regular = values <= (2 ** (bits - 1) - 0.5) * step
    assert np.abs(restored - values)[regular].max(initial=0) <= step / 2 * (1 + TIE)
    # above it (within half a step of 2**(bits-1) steps) the clamp to the top level costs under one step
    assert np.abs(restored - values).max() < step


def test_dynamic_fixed_point_max_is_not_clamped():
    """0.998 with int8 would be 127.74 steps of 2**-7: fl drops by one so it is not saturated."""
    q = dynamic_fixed_point(0.0, 0.998, "i8", 8)
    _, restored = round_trip(np.array([0.998]), q)
    assert abs(restored[0] - 0.998) <= q.scale[0] / 2


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 8), st.integers(1, 3), st.integers(1, 4)),
                  elements=st.floats(-10, 10, width=32)), st.sampled_from([0, 2]))
@example(np.array([[[1e-30]], [[0.0]], [[-0.5]]], np.float32), 0)  # a dead channel (BatchNorm-folded) and a zero one
@example(np.array([[[1.8e-44]], [[0.0]]], np.float32), 0)   # the largest channel denormal: its grid at the floor too
def test_per_channel_symmetric_weights(weights, axis):
    q = Scheme.of("perchannel_symmetric_affine", "int8").weight(weights, axis)
    channels = weights.shape[axis]
    assert q.per_channel and q.axis == axis and len(q.scale) == channels
    assert q.zero_point == [0] * channels
    levels, restored = round_trip(weights.astype(np.float64), q)
    assert np.abs(levels.astype(np.int64)).max() <= 127
    scale, _ = broadcast_params(q, weights.ndim)
    assert np.all(np.abs(restored - weights) <= scale / 2 * (1 + TIE))
    reduce = tuple(i for i in range(weights.ndim) if i != axis)
    top = np.abs(weights.astype(np.float64)).max(axis=reduce)
    alive = top > top.max() * 2.0 ** -24  # the others are zero at float32 precision: the largest channel's grid
    np.testing.assert_allclose(np.asarray(q.scale)[alive], np.maximum(top[alive] / 127, SCALE_FLOOR), rtol=1e-12)
    # dead channels take the largest channel's grid, which is floored like every other scale
    dead = max(top.max() / 127, SCALE_FLOOR) if top.max() > 0 else 1.0
    np.testing.assert_allclose(np.asarray(q.scale)[~alive], dead, rtol=1e-12)


@settings(max_examples=300, deadline=None)
@given(bounds, bounds, st.booleans())
def test_symmetric_round_trip_is_within_half_a_step(a, b, unsigned):
    lo, hi = min(a, b), max(a, b)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    q = symmetric(lo, hi, unsigned)
    assert q.zero_point == [0] and q.dtype == "symmetric_quantized"
    if unsigned and lo >= 0:  # Glow's symmetric_with_uint8 on a non-negative range: uint8 [0, max]
        assert q.qtype == "u8" and (hi == 0 or q.scale[0] == pytest.approx(hi / 255, rel=1e-12))
    else:  # Glow's chooseQuantizationParams: the later-saturating end widened so that 0 maps to 0 in -128..127
        assert q.qtype == "i8"
        if hi > lo:
            assert q.scale[0] == pytest.approx(max(-lo / 128, hi / 127), rel=1e-12)
    if hi == lo:
        assert q.scale[0] == 0.1  # Glow's scale of an all-zero range
    values = inside(lo, hi)
    levels, restored = round_trip(values, q)
    assert np.abs(restored - values).max() <= q.scale[0] / 2 * (1 + TIE)
    assert restored[-1] == 0.0 and levels[-1] == 0


def test_symmetric_affine_scheme_weights_and_activations():
    signed, mixed = Scheme.of("symmetric_affine", "int8"), Scheme.of("symmetric_affine", "uint8")
    w = np.array([[-0.5, 0.25], [1.0, 0.0]])
    for scheme in (signed, mixed):
        q = scheme.weight(w, 0)  # per tensor, symmetric: max(0.5/128, 1/127) = 1/127
        assert (q.qtype, q.method, q.zero_point, q.scale) == ("i8", "layer", [0], [pytest.approx(1 / 127)])
    assert signed.activation(0.0, 6.0).qtype == "i8" and signed.activation(0.0, 6.0).scale[0] == 6.0 / 127
    assert mixed.activation(0.0, 6.0).qtype == "u8" and mixed.activation(0.0, 6.0).scale[0] == 6.0 / 255
    assert mixed.activation(-1.0, 6.0).qtype == "i8"


def test_per_channel_activations_are_asymmetric_int8():
    q = Scheme.of("perchannel_symmetric_affine", "int8").activation(-1.0, 3.0)
    assert (q.qtype, q.method, q.dtype) == ("i8", "layer", "asymmetric_quantized")
    assert q.scale[0] == pytest.approx(4.0 / 255)


VALID_PAIRS = [f"{q}-{t}" for q, types in VALID.items() for t in types if t != "qbfloat16"]


@pytest.mark.parametrize("quantizer, qtype, canonical", [
    ("asymmetric_affine", "uint8", "u8"), ("asymmetric_affine", "int8", "i8"), ("dynamic_fixed_point", "int8", "i8"),
    ("dynamic_fixed_point", "int16", "i16"), ("perchannel_symmetric_affine", "int8", "i8"),
    ("qbfloat16", "bfloat16", "bf16"), ("asymmetric_affine", "u8", "u8"), ("symmetric_affine", "int8", "i8"),
    ("symmetric_affine", "uint8", "u8")])
def test_valid_pairs(quantizer, qtype, canonical):
    assert check_pair(quantizer, qtype) == canonical


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(VALID)), st.sampled_from(["uint8", "int8", "int16", "int32", "uint16", "float32",
                                                         "bfloat16", "float16", "i4", ""]))
def test_invalid_pairs_name_the_valid_ones(quantizer, qtype):
    spelled = {"u8": "uint8", "i8": "int8", "i16": "int16", "bf16": "bfloat16", "float16": "bfloat16"}.get(qtype, qtype)
    if spelled in VALID[quantizer]:
        return
    with pytest.raises(PegasusError) as error:
        check_pair(quantizer, qtype)
    message = str(error.value)
    assert quantizer in message and f"--qtype {qtype}" in message
    for pair in VALID_PAIRS:
        assert pair in message


def test_unknown_quantizer_names_the_known_ones():
    with pytest.raises(PegasusError) as error:
        check_pair("affine_symmetric", "int8")
    assert all(name in str(error.value) for name in VALID)


@pytest.mark.parametrize("lo, hi", [(-math.inf, 1.0), (-1.0, math.inf), (math.nan, 1.0), (-1.0, math.nan)])
def test_non_finite_ranges_are_refused(lo, hi):
    with pytest.raises(PegasusError, match="not finite"):
        asymmetric(lo, hi, "u8")
    with pytest.raises(PegasusError, match="not finite"):
        dynamic_fixed_point(lo, hi, "i8", 8)
