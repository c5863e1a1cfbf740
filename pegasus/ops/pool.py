"""Op family: pooling (MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool) over NCHW tensors
(or channels-last ones, ``channels_last``: pegasus/ops/layout.py).

Windowed pooling reads its geometry from ``spatial.window`` (the same rules as Conv, plus
ceil_mode) and reduces the strided ``spatial.window_view`` of the input in one NumPy call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.layout import LayoutAttrs, channels_last_op
from pegasus.ops.registry import OpDef, register
from pegasus.ops.spatial import (
    Window,
    WindowAttrs,
    flat_positions,
    prod,
    spatial_sizes,
    tap_counts,
    window,
    window_view,
)


def _lowest(dtype: np.dtype) -> float | int:
    """The value padding never wins a max against."""
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


class _WindowPool(OpDef):
    """Shared shape rule of MaxPool and AveragePool: Y is (N, C, *window.out)."""

    @staticmethod
    def geometry(attrs: Any, x_shape: Sequence[int]) -> Window:
        return window(attrs, spatial_sizes(x_shape, "X"), ceil_mode=bool(attrs.ceil_mode))

    @classmethod
    def infer(cls, attrs: Any, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x = inputs[0]
        shape = tuple(x.shape[:2]) + cls.geometry(attrs, x.shape).out
        return [TensorType(shape, x.dtype)]


@register
@channels_last_op
class MaxPool(_WindowPool):
    """Y = max over each window of X, padding excluded; Indices = flat index of the max in X (MaxPool-22)."""

    name = "MaxPool"
    keeps_input_grid = True
    fusable_pool = True

    @dataclass(frozen=True)
    class Attrs(WindowAttrs):
        ceil_mode: int = 0
        storage_order: int = 0

    @classmethod
    def infer(cls, attrs: Attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        y = super().infer(attrs, inputs)[0]
        return [y, TensorType(y.shape, DType.INT64)]

    @classmethod
    def reference(cls, attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        win = cls.geometry(attrs, x.shape)
        n = len(win.kernel)
        taps = window_view(x, win, _lowest(x.dtype))
        taps = taps.reshape(taps.shape[:2 + n] + (prod(win.kernel),))
        best = taps.argmax(axis=-1)
        y = np.take_along_axis(taps, best[..., None], axis=-1)[..., 0]
        flat = flat_positions(win, x.shape[2:], best, column_major=attrs.storage_order == 1)
        plane = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * n) * prod(x.shape[2:])
        return [y, flat + plane]


@register
@channels_last_op
class AveragePool(_WindowPool):
    """Y = mean over each window of X; the divisor counts the explicit pads when count_include_pad,
    never the overrun of ceil_mode (AveragePool-22)."""

    name = "AveragePool"
    fusable_pool = True

    @dataclass(frozen=True)
    class Attrs(WindowAttrs):
        ceil_mode: int = 0
        count_include_pad: int = 0

    @classmethod
    def reference(cls, attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        win = cls.geometry(attrs, x.shape)
        n = len(win.kernel)
        acc = np.float64 if x.dtype == np.float64 else np.float32
        sums = window_view(x.astype(acc, copy=False), win, 0).sum(axis=tuple(range(-n, 0)))
        counts = tap_counts(win, x.shape[2:], bool(attrs.count_include_pad))
        return [(sums / np.maximum(counts, 1)).astype(x.dtype)]


class _GlobalPool(OpDef):
    """Y[n, c, 1, ...] = reduce(X[n, c, ...]) over every spatial axis."""

    Attrs = LayoutAttrs
    reduce: ClassVar[str]

    @staticmethod
    def infer(attrs: LayoutAttrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x = inputs[0]
        spatial_sizes(x.shape, "X")
        return [TensorType(tuple(x.shape[:2]) + (1,) * (x.rank - 2), x.dtype)]

    @classmethod
    def reference(cls, attrs: LayoutAttrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        y = getattr(np, cls.reduce)(x, axis=tuple(range(2, x.ndim)), keepdims=True)
        return [y.astype(x.dtype, copy=False)]


@register
@channels_last_op
class GlobalMaxPool(_GlobalPool):
    """Y = max of X over the spatial axes, kept as size-1 axes (GlobalMaxPool-22)."""

    name = "GlobalMaxPool"
    keeps_input_grid = True
    reduce = "max"


@register
@channels_last_op
class GlobalAveragePool(_GlobalPool):
    """Y = mean of X over the spatial axes, kept as size-1 axes (GlobalAveragePool-22)."""

    name = "GlobalAveragePool"
    reduce = "mean"
