"""Resize: nearest / linear / cubic resampling of any axes (ONNX Resize; Upsample maps onto it).

The output sizes and the scales used to map coordinates are attributes, fixed at compile time;
``resize_plan`` turns ONNX's scales-or-sizes (+ axes, keep_aspect_ratio_policy) into them, once,
for every importer. Resampling is separable, so the kernel resizes one axis at a time: each output
position gets a list of input indices (taps) and weights, and the axis is gathered with those index
arrays and summed — no per-pixel loops. The same taps/weights are what a code generator would bake
into tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from pegasus.ir.tensor import TensorType
from pegasus.ops.common import normalize_axes
from pegasus.ops.registry import OpDef, ShapeError, register

Floats = tuple[float, ...]

# x_original as a function of (y = output indices, scale, input length, fractional output length
# = scale * input length, roi (start, end)) — the ONNX coordinate_transformation_mode formulas, where
# "length_resized" is the integer output length y.size (as the spec and onnxruntime have it).
_COORDINATES: dict[str, Callable[..., np.ndarray]] = {
    "half_pixel": lambda y, s, n, w, roi: (y + 0.5) / s - 0.5,
    "half_pixel_symmetric": lambda y, s, n, w, roi: (n / 2) * (1 - y.size / w) + (y + 0.5) / s - 0.5,
    "pytorch_half_pixel": lambda y, s, n, w, roi: (y + 0.5) / s - 0.5 if y.size > 1 else np.zeros(y.shape),
    "align_corners": lambda y, s, n, w, roi: y * (n - 1) / (y.size - 1) if y.size > 1 else np.zeros(y.shape),
    "asymmetric": lambda y, s, n, w, roi: y / s,
    "tf_half_pixel_for_nn": lambda y, s, n, w, roi: (y + 0.5) / s,
    "tf_crop_and_resize": lambda y, s, n, w, roi: (
        roi[0] * (n - 1) + y * (roi[1] - roi[0]) * (n - 1) / (y.size - 1) if y.size > 1
        else np.full(y.shape, (roi[0] + roi[1]) * (n - 1) / 2)),
    # TF's and TFLite's resize kernels (align_corners / half_pixel_centers): asymmetric, align_corners and
    # half_pixel with their arithmetic, a float32 step in/out (or (in-1)/(out-1)) multiplied rather than
    # ONNX's division by out/in; where y * in / out is a whole number the two can floor differently
    "tf_asymmetric": lambda y, s, n, w, roi: y * _tf_step(n, y.size),
    "tf_align_corners": lambda y, s, n, w, roi: (
        y * _tf_step(n - 1, y.size - 1) if y.size > 1 else np.zeros(y.shape, np.float32)),
    "tf_half_pixel": lambda y, s, n, w, roi: (y + np.float32(0.5)) * _tf_step(n, y.size) - np.float32(0.5),
}


def _tf_step(n_in: int, n_out: int) -> np.float32:
    return np.float32(n_in) / np.float32(n_out)

# index of the nearest input sample for each ONNX nearest_mode
_NEAREST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient a."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


# mode -> (kernel radius, kernel(distance, cubic_coeff_a))
_FILTERS: dict[str, tuple[int, Callable[[np.ndarray, float], np.ndarray]]] = {
    "linear": (1, lambda d, a: np.clip(1 - np.abs(d), 0, 1)),
    "cubic": (2, _cubic),
}


def _scaled_size(length: int, scale: float) -> int:
    """floor(length * scale), computed in float32 as onnxruntime does (10 * 0.7f gives 7, not 6)."""
    return int(np.floor(np.float32(length) * np.float32(scale)))


def resize_plan(in_shape: Sequence[int], *, scales: Sequence[float] | None = None,
                sizes: Sequence[int] | None = None, axes: Sequence[int] = (), roi: Sequence[float] = (),
                keep_aspect_ratio_policy: str = "stretch") -> tuple[tuple[int, ...], Floats, Floats]:
    """Full-rank (output sizes, scales, roi) from ONNX Resize parameters given on ``axes`` (all if empty)."""
    rank = len(in_shape)
    axes = normalize_axes(axes, rank) if len(axes) else tuple(range(rank))
    full_scales, full_sizes = [1.0] * rank, list(in_shape)
    full_roi = [0.0] * rank + [1.0] * rank
    if len(roi):
        if len(roi) != 2 * len(axes):
            raise ShapeError(f"roi has {len(roi)} values, expected {2 * len(axes)}")
        for i, a in enumerate(axes):
            full_roi[a], full_roi[rank + a] = float(roi[i]), float(roi[len(axes) + i])
    if (scales is None) == (sizes is None):
        raise ShapeError("Resize needs exactly one of scales and sizes")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ShapeError(f"Resize got {len(given)} scales/sizes for {len(axes)} axes")
    if scales is not None:
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ShapeError(f"Resize scale {s} must be positive")
            full_scales[a], full_sizes[a] = float(s), _scaled_size(in_shape[a], s)
    elif keep_aspect_ratio_policy == "stretch":
        for a, n in zip(axes, sizes):
            full_scales[a], full_sizes[a] = int(n) / in_shape[a], int(n)
    else:
        ratios = [int(n) / in_shape[a] for a, n in zip(axes, sizes)]
        pick = {"not_larger": min, "not_smaller": max}.get(keep_aspect_ratio_policy)
        if pick is None:
            raise ShapeError(f"unknown keep_aspect_ratio_policy '{keep_aspect_ratio_policy}'")
        for a in axes:
            full_scales[a], full_sizes[a] = pick(ratios), int(pick(ratios) * in_shape[a] + 0.5)
    return tuple(full_sizes), tuple(full_scales), tuple(full_roi)


def _taps(attrs, x: np.ndarray, n_in: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (n_out, n_taps), of the filter samples for source coordinates x."""
    if attrs.mode == "nearest":
        index = _NEAREST[attrs.nearest_mode](x).astype(np.int64)
        return np.clip(index, 0, n_in - 1)[:, None], np.ones((len(x), 1))
    radius, kernel = _FILTERS[attrs.mode]
    stretch = min(scale, 1.0) if attrs.antialias else 1.0
    first = math.floor(-radius / stretch) + 1
    # taps left of x are preferred: base = ceil(x) - 1 puts x in (base, base + 1]
    taps = (np.ceil(x).astype(np.int64) - 1 + first)[:, None] + np.arange(2 - 2 * first)
    weights = kernel((taps - x[:, None]) * stretch, attrs.cubic_coeff_a)
    if attrs.exclude_outside:
        weights = np.where((taps < 0) | (taps >= n_in), 0.0, weights)
    if attrs.exclude_outside or attrs.antialias:
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, n_in - 1), weights


@dataclasses.dataclass(frozen=True)
class AxisSampling:
    """How one resized axis reads its input: for each output position, ``taps`` source indices and
    weights, and whether its source coordinate lies outside the input (tf_crop_and_resize only)."""

    axis: int
    index: np.ndarray     # (n_out, taps) source index along the axis
    weights: np.ndarray   # (n_out, taps)
    outside: np.ndarray   # (n_out,) bool

    @property
    def taps(self) -> int:
        return self.index.shape[1]


def _sample_axis(attrs, axis: int, n_in: int, n_out: int, scale: float, roi: Floats) -> AxisSampling:
    # coordinates in float32 like onnxruntime, so ties of floor/ceil/round fall the same way
    scale, roi = np.float32(scale), tuple(np.float32(r) for r in roi)
    x = _COORDINATES[attrs.coordinate_transformation_mode](np.arange(n_out, dtype=np.float32), scale,
                                                           n_in, scale * n_in, roi)
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    index, weights = _taps(attrs, x, n_in, scale)
    crop = attrs.coordinate_transformation_mode == "tf_crop_and_resize"
    outside = ((x < 0) | (x > n_in - 1)) if crop else np.zeros(n_out, dtype=bool)
    return AxisSampling(axis, np.asarray(index), np.asarray(weights), outside)


def _resize_axis(attrs, data: np.ndarray, plan: AxisSampling) -> np.ndarray:
    axis = plan.axis
    gathered = np.take(data, plan.index, axis=axis)  # (..., n_out, n_taps, ...)
    if attrs.mode == "nearest":
        out = np.squeeze(gathered, axis=axis + 1)
    else:
        weights = plan.weights
        out = (gathered * weights.reshape(weights.shape + (1,) * (data.ndim - axis - 1))).sum(axis=axis + 1)
    if plan.outside.any():
        outside = plan.outside.reshape((len(plan.outside),) + (1,) * (data.ndim - axis - 1))
        out = np.where(outside, attrs.extrapolation_value, out)
    return out


@register
class Resize(OpDef):
    """y = x resampled to ``sizes`` with ONNX Resize semantics (coordinates mapped with ``scales``)."""

    name = "Resize"
    keeps_input_grid = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        sizes: tuple[int, ...] = ()  # empty: floor(input shape * scales)
        scales: Floats = ()  # empty: sizes / input shape
        mode: str = "nearest"
        coordinate_transformation_mode: str = "half_pixel"
        nearest_mode: str = "round_prefer_floor"
        cubic_coeff_a: float = -0.75
        exclude_outside: bool = False
        extrapolation_value: float = 0.0
        antialias: bool = False
        roi: Floats = ()  # [start_0.., end_0..], used by tf_crop_and_resize; empty: whole input

    @staticmethod
    def geometry(attrs, shape: Sequence[int]) -> tuple[tuple[int, ...], Floats]:
        """(output sizes, scales) with the empty one derived from the other."""
        rank = len(shape)
        if len(attrs.sizes) not in (0, rank) or len(attrs.scales) not in (0, rank):
            raise ShapeError(f"sizes {list(attrs.sizes)} and scales {list(attrs.scales)} need {rank} values")
        sizes = attrs.sizes or tuple(_scaled_size(d, s) for d, s in zip(shape, attrs.scales or (1.0,) * rank))
        scales = attrs.scales or tuple(n / d if d else 1.0 for n, d in zip(sizes, shape))
        return tuple(sizes), tuple(scales)

    @classmethod
    def sampling(cls, attrs, shape: Sequence[int]) -> list[AxisSampling]:
        """The axes that change, in order, and how each reads its input (the reference and the code
        generator both resample from this plan)."""
        rank = len(shape)
        sizes, scales = cls.geometry(attrs, shape)
        roi = attrs.roi or (0.0,) * rank + (1.0,) * rank
        crop = attrs.coordinate_transformation_mode == "tf_crop_and_resize"
        plans = []
        for axis in range(rank):
            axis_roi = (roi[axis], roi[rank + axis])
            if sizes[axis] == shape[axis] and math.isclose(scales[axis], 1.0) and (not crop or axis_roi == (0.0, 1.0)):
                continue  # identity along this axis
            plans.append(_sample_axis(attrs, axis, shape[axis], sizes[axis], scales[axis], axis_roi))
        return plans

    @classmethod
    def infer(cls, attrs, inputs):
        x = inputs[0]
        rank = len(x.shape)
        sizes = cls.geometry(attrs, x.shape)[0]
        checks = [
            (len(attrs.roi) in (0, 2 * rank), f"roi must have {2 * rank} values"),
            (attrs.mode in ("nearest", *_FILTERS), f"unknown mode '{attrs.mode}'"),
            (attrs.coordinate_transformation_mode in _COORDINATES,
             f"unknown coordinate_transformation_mode '{attrs.coordinate_transformation_mode}'"),
            (attrs.nearest_mode in _NEAREST, f"unknown nearest_mode '{attrs.nearest_mode}'"),
            (all(n >= 0 for n in sizes), f"sizes {list(sizes)} must be non-negative"),
            (all(d > 0 for d, n in zip(x.shape, sizes) if n), "cannot resize an empty axis"),
        ]
        for ok, message in checks:
            if not ok:
                raise ShapeError(message)
        return [TensorType(sizes, x.dtype)]

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        out = x if attrs.mode == "nearest" else x.astype(np.float64)
        for plan in cls.sampling(attrs, x.shape):
            out = _resize_axis(attrs, out, plan)
        if x.dtype.kind in "iu" and out.dtype != x.dtype:
            info = np.iinfo(x.dtype)
            out = np.clip(np.rint(out), info.min, info.max)
        return [out.astype(x.dtype, order="C")]
