"""Calibration observers: the value range each tensor is quantized with.

``pegasus quantize`` runs the float model over the calibration samples and hands each tensor's values,
batch by batch, to its own observer (made by :func:`make_observer`). After the last batch, the observer's
``range()`` gives the (min, max) that the quantization scheme turns into a scale and zero point (or a
fractional length). ``--algorithm`` (Acuity guide §3.6.9) chooses the observer:

``normal`` (the default)
    The exact minimum and maximum over all calibration batches. No value is clipped, but one extreme
    value widens the range, and so the quantization step, for every other value.

``moving_average`` (with ``--moving-average-weight w``, default 0.01)
    The first batch sets min and max. Each later batch pulls them towards its own min and max:
    ``min = (1 - w) * min + w * batch_min``, and the same for max. With a small w, a rare extreme batch
    counts for little. With w = 1, only the last batch counts. w must lie in (0, 1].

``kl_divergence`` (with ``--divergence-first-quantize-bits m``, default 11)
    TensorRT-style entropy calibration: it clips rare outliers so the common values keep fine steps.
    The magnitudes |x| of all batches are counted into a histogram of 2**m bins (2048 by default) from 0
    up to the largest magnitude seen. When a later batch goes past that, the histogram range doubles
    (adjacent bins merge), so every batch counts without being stored. Each candidate threshold t (a bin
    edge) is scored as follows: the values above t are clipped into the last bin (distribution P); the
    same bins are merged into as many levels as the integer type has on that side and spread back (Q);
    then the information lost is measured as the Kullback-Leibler divergence KL(P || Q). The t that loses
    least wins. A signed target, or data with negative values, has ``target_levels // 2 + 1`` levels per
    side (128 for int8). Non-negative data bound for an unsigned type (uint8 after a ReLU) gets all
    ``target_levels`` (255). The result is (-t, t) if the tensor had negative values and (0, t)
    otherwise, and it is never wider than the observed min/max. Exact zeros (half of a ReLU output) are
    left out of the histogram: every scheme represents 0 exactly, and their spike in the first bin would
    otherwise drag the threshold down.
    Limits: the smallest threshold tried spans ``levels`` bins. So if one outlier is 1000 times the
    typical value, t still comes out at least ``levels / 2**m`` of that outlier, which is well below it
    but far above the bulk of the values. If every value would be clipped (no value lies near zero), the
    search has nothing to compare, and the observed min/max is used instead.
"""

from __future__ import annotations

import abc
import math
import numbers

import numpy as np

from pegasus.errors import PegasusError

ALGORITHMS = ("normal", "kl_divergence", "moving_average")
MAX_FIRST_QUANTIZE_BITS = 16  # 65,536 bins; the threshold search grows with the square of the bin count
_MAX_CANDIDATES = 2048  # larger histograms try every k-th threshold so the search stays under a second
_SMOOTHING = 1e-4  # count given to empty bins so KL(P || Q) stays finite


class Observer(abc.ABC):
    """Watches one tensor's values over the calibration batches and proposes the range to quantize with."""

    @abc.abstractmethod
    def update(self, values: np.ndarray) -> None:
        """Take one batch of the tensor's values (any shape, float)."""

    @abc.abstractmethod
    def range(self) -> tuple[float, float]:
        """(min, max) to quantize with; (0.0, 0.0) if no value was ever seen."""


def _batch_range(values: np.ndarray) -> tuple[float, float] | None:
    """min and max of one batch, None if it is empty; NaN or infinity is the user's problem to hear about."""
    flat = np.asarray(values)
    if flat.size == 0:
        return None
    lo, hi = float(flat.min()), float(flat.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN propagates through min/max, so this sees every one
        raise PegasusError("calibration values contain NaN or infinity; check the model and the input "
                           "preprocessing (mean, scale) in the input meta file")
    return lo, hi


class MinMaxObserver(Observer):
    """``normal``: running min and max over all batches."""

    def __init__(self) -> None:
        self._range: tuple[float, float] | None = None

    def update(self, values: np.ndarray) -> None:
        batch = _batch_range(values)
        if batch is None:
            return
        if self._range is None:
            self._range = batch
        else:
            self._range = (min(self._range[0], batch[0]), max(self._range[1], batch[1]))

    def range(self) -> tuple[float, float]:
        return self._range if self._range is not None else (0.0, 0.0)


class MovingAverageObserver(Observer):
    """``moving_average``: min and max follow the batches with weight w for the newest one."""

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self._range: tuple[float, float] | None = None

    def update(self, values: np.ndarray) -> None:
        batch = _batch_range(values)
        if batch is None:
            return
        if self._range is None:
            self._range = batch
            return
        w = self.weight
        self._range = ((1.0 - w) * self._range[0] + w * batch[0], (1.0 - w) * self._range[1] + w * batch[1])

    def range(self) -> tuple[float, float]:
        return self._range if self._range is not None else (0.0, 0.0)


def _normalised(counts: np.ndarray) -> np.ndarray:
    """Counts as a distribution, with empty bins given a tiny count so logarithms stay finite."""
    smoothed = counts + _SMOOTHING * (counts == 0)
    return smoothed / smoothed.sum()


def kl_threshold_bins(hist: np.ndarray, levels: int, stride: int = 1) -> int:
    """How many histogram bins (from 0) to keep so that quantizing them into ``levels`` levels loses least.

    Candidates run from ``levels`` to ``len(hist)`` bins (every ``stride``-th, always including the last).
    For i bins: P = hist[:i] with everything beyond added to bin i-1; Q = hist[:i] merged into ``levels``
    groups of (nearly) equal width, each group's count spread evenly over the bins where P is non-zero.
    The winner has minimal KL(P || Q); among equal divergences the widest threshold wins.
    """
    hist = np.asarray(hist, dtype=np.float64)
    nbins = hist.size
    if nbins <= levels:
        return nbins
    beyond = hist.sum() - np.cumsum(hist)  # beyond[i - 1] = count in bins i and above
    positions = np.arange(nbins)
    candidates = list(range(levels, nbins + 1, stride))
    if candidates[-1] != nbins:
        candidates.append(nbins)
    best_bins, best_kl = nbins, math.inf
    for i in candidates:
        kept = hist[:i]
        p = kept.copy()
        p[-1] += beyond[i - 1]
        occupied = p > 0
        group = positions[:i] * levels // i  # group g holds bins with floor(k * levels / i) == g
        group_counts = np.bincount(group, weights=kept, minlength=levels)
        group_occupied = np.bincount(group, weights=occupied, minlength=levels)
        spread = group_counts / np.maximum(group_occupied, 1.0)
        q = np.where(occupied, spread[group], 0.0)
        p, q = _normalised(p), _normalised(q)
        kl = float(np.sum(p * np.log(p / q)))
        if kl <= best_kl:
            best_bins, best_kl = i, kl
    return best_bins


class KLDivergenceObserver(Observer):
    """``kl_divergence``: a histogram of |x| over all batches, then the TensorRT-style threshold search."""

    def __init__(self, *, nbins: int, signed: bool, target_levels: int) -> None:
        if nbins < 2 or nbins & (nbins - 1):
            raise ValueError(f"nbins must be a power of two >= 2, got {nbins}")
        self.nbins = nbins
        self.signed = signed
        self.target_levels = target_levels
        self._hist = np.zeros(nbins, dtype=np.int64)
        self._limit = 0.0  # the histogram covers [0, _limit]; 0 until a non-zero value arrives
        self._minmax = MinMaxObserver()
        self._cached: tuple[float, float] | None = None

    def update(self, values: np.ndarray) -> None:
        flat = np.asarray(values, dtype=np.float64).ravel()
        batch = _batch_range(flat)
        if batch is None:
            return
        self._cached = None
        self._minmax.update(flat)
        magnitudes = np.abs(flat)
        magnitudes = magnitudes[magnitudes > 0.0]  # exact zeros stay exact under any scheme; see the module doc
        if magnitudes.size == 0:
            return
        top = float(magnitudes.max())
        if top > self._limit:
            self._widen(top)
        index = (magnitudes * (self.nbins / self._limit)).astype(np.int64)
        np.minimum(index, self.nbins - 1, out=index)
        self._hist += np.bincount(index, minlength=self.nbins)

    def _widen(self, top: float) -> None:
        """Grow the histogram range to cover ``top``, doubling it and merging bin pairs as often as needed."""
        if self._limit == 0.0:
            self._limit = top  # nothing counted yet
            return
        half = self.nbins // 2
        while self._limit < top:
            merged = self._hist[0::2] + self._hist[1::2]
            self._hist[:half] = merged
            self._hist[half:] = 0
            self._limit *= 2.0

    def _levels(self, has_negatives: bool) -> int:
        if has_negatives or self.signed:
            return self.target_levels // 2 + 1
        return self.target_levels

    def range(self) -> tuple[float, float]:
        if self._cached is None:
            self._cached = self._search()
        return self._cached

    def _search(self) -> tuple[float, float]:
        lo, hi = self._minmax.range()  # (0.0, 0.0) if never updated
        occupied = np.flatnonzero(self._hist)
        if self._limit == 0.0 or occupied.size == 0:
            return (lo, hi)
        used = int(occupied[-1]) + 1  # bins past the largest magnitude cannot make a better threshold
        stride = max(1, self.nbins // _MAX_CANDIDATES)
        keep = kl_threshold_bins(self._hist[:used], self._levels(lo < 0.0), stride)
        if keep <= int(occupied[0]) + 1:  # every value clipped into one bin: the search says nothing
            return (lo, hi)
        t = keep * (self._limit / self.nbins)
        if lo < 0.0:
            return (max(-t, lo), min(t, hi))
        return (lo, min(t, hi))


def make_observer(algorithm: str, *, signed: bool, moving_average_weight: float = 0.01,
                  first_quantize_bits: int = 11, target_levels: int = 255) -> Observer:
    """A fresh observer for one tensor, as ``--algorithm`` and its companion flags ask.

    ``signed`` says whether the target integer type is signed; ``target_levels`` is the number of
    quantization levels of that type (255 for 8 bits).
    """
    if algorithm == "normal":
        return MinMaxObserver()
    if algorithm == "moving_average":
        w = moving_average_weight
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0.0 < w <= 1.0:
            raise PegasusError(f"--moving-average-weight must be a number in (0, 1], got {w!r}")
        return MovingAverageObserver(float(w))
    if algorithm == "kl_divergence":
        least = max(1, math.ceil(math.log2(max(target_levels, 2))))
        m = first_quantize_bits
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not least <= m <= MAX_FIRST_QUANTIZE_BITS:
            raise PegasusError(f"--divergence-first-quantize-bits must be an integer from {least} to "
                               f"{MAX_FIRST_QUANTIZE_BITS} (2**m histogram bins), got {m!r}")
        return KLDivergenceObserver(nbins=2 ** int(m), signed=signed, target_levels=target_levels)
    raise PegasusError(f"unknown --algorithm {algorithm!r}; valid algorithms: {', '.join(ALGORITHMS)}")
