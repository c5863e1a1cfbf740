"""Calibration observers against answers known without them: numpy min/max of all batches, the
moving-average recurrence in closed form, the KL threshold of distributions whose shape fixes it
(uniform, Gaussian, Laplace), and a plain-loop transcription of the TensorRT threshold search."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pegasus.errors import PegasusError
from pegasus.quantizers.observers import kl_threshold_bins, make_observer

NBINS = 2048  # the default --divergence-first-quantize-bits 11

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)
batches = st.lists(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=6), elements=finite),
                   min_size=1, max_size=6)


def observe(algorithm: str, data: list[np.ndarray], *, signed: bool = True, **options) -> tuple[float, float]:
    observer = make_observer(algorithm, signed=signed, **options)
    for batch in data:
        observer.update(batch)
    return observer.range()


# ---- normal --------------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(batches)
def test_normal_is_min_max_of_all_batches(data):
    union = np.concatenate([b.ravel() for b in data])
    expected = (float(union.min()), float(union.max())) if union.size else (0.0, 0.0)
    assert observe("normal", data) == expected


@pytest.mark.parametrize("algorithm", ["normal", "moving_average", "kl_divergence"])
def test_never_updated_gives_zero_range(algorithm):
    observer = make_observer(algorithm, signed=True)
    observer.update(np.zeros((0, 3), np.float32))  # an empty batch counts as nothing
    assert observer.range() == (0.0, 0.0)


@pytest.mark.parametrize("algorithm", ["normal", "moving_average", "kl_divergence"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_reported(algorithm, bad):
    observer = make_observer(algorithm, signed=True)
    with pytest.raises(PegasusError, match="NaN or infinity"):
        observer.update(np.array([1.0, bad, -2.0], np.float32))


# ---- moving_average ------------------------------------------------------------------------------------------

def test_moving_average_follows_closed_form():
    w = 0.25
    ranges = [(-1.0, 2.0), (-3.0, 1.0), (0.5, 4.0), (-2.0, 2.0)]
    data = [np.array([lo, (lo + hi) / 2, hi]) for lo, hi in ranges]
    # unrolled recurrence: x_n = (1-w)^n x_0 + sum_k w (1-w)^(n-k) x_k
    n = len(ranges) - 1
    expected = tuple((1 - w) ** n * ranges[0][j] + sum(w * (1 - w) ** (n - k) * ranges[k][j] for k in range(1, n + 1))
                     for j in (0, 1))
    assert observe("moving_average", data, moving_average_weight=w) == pytest.approx(expected, rel=1e-12)


def test_moving_average_default_weight_is_001():
    data = [np.array([-1.0, 1.0]), np.array([-101.0, 201.0])]
    assert observe("moving_average", data) == pytest.approx((-2.0, 3.0), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(batches)
def test_moving_average_with_weight_one_is_last_batch(data):
    nonempty = [b for b in data if b.size]
    expected = (float(nonempty[-1].min()), float(nonempty[-1].max())) if nonempty else (0.0, 0.0)
    assert observe("moving_average", data, moving_average_weight=1.0) == expected


@pytest.mark.parametrize("weight", [0.0, -0.1, 1.5, math.nan, "0.1"])
def test_moving_average_weight_outside_unit_interval_is_rejected(weight):
    with pytest.raises(PegasusError, match="--moving-average-weight"):
        make_observer("moving_average", signed=True, moving_average_weight=weight)


# ---- the threshold search against a plain transcription ------------------------------------------------------

def reference_divergences(hist: list[int], levels: int) -> dict[int, float]:
    """KL(P || Q) for every candidate bin count, written out loop by loop after the TensorRT recipe."""
    out = {}
    for i in range(levels, len(hist) + 1):
        p = [float(c) for c in hist[:i]]
        p[-1] += sum(hist[i:])
        q = [0.0] * i
        for g in range(levels):
            members = [k for k in range(i) if k * levels // i == g]
            total = sum(hist[k] for k in members)
            nonzero = [k for k in members if p[k] > 0]
            for k in nonzero:
                q[k] = total / len(nonzero)

        def normalise(v):
            v = [x if x > 0 else 1e-4 for x in v]
            return [x / sum(v) for x in v]

        p, q = normalise(p), normalise(q)
        out[i] = sum(a * math.log(a / b) for a, b in zip(p, q))
    return out


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 8).flatmap(lambda levels: st.tuples(
    st.just(levels), st.lists(st.integers(0, 50), min_size=levels + 1, max_size=48).filter(any))))
def test_search_picks_the_minimal_divergence(case):
    levels, hist = case
    divergences = reference_divergences(hist, levels)
    chosen = kl_threshold_bins(np.array(hist), levels)
    assert divergences[chosen] == pytest.approx(min(divergences.values()), rel=1e-9, abs=1e-12)


# ---- kl_divergence on distributions with known thresholds ----------------------------------------------------

@pytest.mark.parametrize("a", [0.01, 3.0, 250.0])
def test_kl_uniform_keeps_the_whole_range(a):
    x = np.random.default_rng(1).uniform(-a, a, 200_000)
    lo, hi = observe("kl_divergence", [x])
    bin_width = np.abs(x).max() / NBINS
    assert hi >= a - 2 * bin_width and lo <= -a + 2 * bin_width
    assert (lo, hi) == pytest.approx((-hi, hi), abs=2 * bin_width)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kl_gaussian_with_outliers_clips_to_a_few_sigma(seed):
    g = np.random.default_rng(seed).standard_normal(100_000)
    x = np.concatenate([g, [20.0, -20.0, 20.0]])  # a min/max range would spend 80 % of the levels on 3 values
    lo, hi = observe("kl_divergence", [x])
    assert lo == -hi
    # int8 KL on a Gaussian: keep at least 99 % of the mass (|x| < 2.58 sigma) and clip beyond ~4.5 sigma
    assert np.quantile(np.abs(g), 0.99) <= hi <= 4.5
    assert hi >= 2.5


def test_kl_gaussian_with_huge_outliers_stays_far_below_them():
    g = np.random.default_rng(3).standard_normal(100_000)
    x = np.concatenate([g, [1000.0, -1000.0, 1000.0]])
    lo, hi = observe("kl_divergence", [x])
    # 2048 bins over [0, 1000] put the whole Gaussian into ~10 bins; the narrowest candidate spans 128 bins
    narrowest = 128 * 1000.0 / NBINS
    assert lo == -hi
    assert hi <= narrowest + 1000.0 / NBINS
    assert hi < 0.1 * 1000.0


def test_kl_laplace_clips_its_long_tail():
    x = np.random.default_rng(4).laplace(0.0, 1.0, 100_000)
    lo, hi = observe("kl_divergence", [x])
    t = max(-lo, hi)  # (-t, t), cut back on the side where the data ends sooner
    assert (lo, hi) == (max(-t, float(x.min())), min(t, float(x.max())))
    assert np.quantile(np.abs(x), 0.99) < t < np.abs(x).max()


@pytest.mark.parametrize("signed", [False, True])
def test_kl_non_negative_data_gives_zero_to_t(signed):
    g = np.random.default_rng(5).standard_normal(100_000)
    relu = np.maximum(np.concatenate([g, [20.0]]), 0.0)  # half exact zeros, like after a ReLU
    lo, hi = observe("kl_divergence", [relu], signed=signed)
    assert lo == 0.0
    assert np.quantile(relu[relu > 0], 0.99) <= hi <= 4.5


def test_kl_is_never_wider_than_observed():
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(-0.5, 0.0, 1000), rng.laplace(0.0, 1.0, 50_000).clip(0.0, None)])
    lo, hi = observe("kl_divergence", [x])
    assert lo == float(x.min())  # -t would lie below -0.5
    assert 0.0 < hi < float(x.max())


def test_kl_falls_back_to_min_max_without_values_near_zero():
    x = np.random.default_rng(7).uniform(5.0, 6.0, 50_000)
    lo, hi = observe("kl_divergence", [x], signed=False)
    assert float(x.min()) <= lo < hi <= float(x.max())
    assert observe("kl_divergence", [np.full(100, -2.5)]) == (-2.5, -2.5)
    assert observe("kl_divergence", [np.zeros(100)]) == (0.0, 0.0)


def test_kl_widening_by_powers_of_two_matches_one_batch():
    g = np.random.default_rng(8).standard_normal(200_000)
    x = np.concatenate([g, [16.0, -16.0]])
    small = np.concatenate([x[np.abs(x) < 2.0][:5000], [2.0]])  # the first range is 16 / 2**3
    rest = np.concatenate([x[np.abs(x) < 2.0][5000:], x[np.abs(x) >= 2.0]])
    assert observe("kl_divergence", [small, rest]) == observe("kl_divergence", [np.concatenate([small, rest])])


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_kl_growing_batches_give_nearly_the_same_threshold(kind):
    rng = np.random.default_rng(9)
    x = rng.standard_normal(200_000) if kind == "gaussian" else rng.laplace(0.0, 1.0, 200_000)
    x = np.concatenate([x, [20.0, -20.0]])
    growing = np.array_split(x[np.argsort(np.abs(x))], 5)  # each batch reaches further than the last
    _, at_once = observe("kl_divergence", [x])
    _, in_batches = observe("kl_divergence", growing)
    assert in_batches == pytest.approx(at_once, rel=0.1)


def test_kl_search_is_fast_on_a_full_histogram():
    observer = make_observer("kl_divergence", signed=False)
    observer.update(np.random.default_rng(10).uniform(0.0, 1.0, 500_000))  # every one of the 2048 bins occupied
    start = time.perf_counter()
    observer.range()
    assert time.perf_counter() - start < 1.0


# ---- make_observer -------------------------------------------------------------------------------------------

def test_unknown_algorithm_names_the_valid_ones():
    with pytest.raises(PegasusError) as err:
        make_observer("auto", signed=True)
    assert all(name in str(err.value) for name in ("normal", "kl_divergence", "moving_average"))


@pytest.mark.parametrize("bits", [0, 7, 17, 2.5, True])
def test_bad_first_quantize_bits_is_rejected(bits):
    with pytest.raises(PegasusError, match="--divergence-first-quantize-bits"):
        make_observer("kl_divergence", signed=True, first_quantize_bits=bits)


def test_first_quantize_bits_sets_the_histogram_size():
    x = np.random.default_rng(11).uniform(-1.0, 1.0, 100_000)
    _, hi = observe("kl_divergence", [x], first_quantize_bits=8)
    assert hi == pytest.approx(np.abs(x).max(), abs=2 * np.abs(x).max() / 256)
