"""Reductions over axes: Reduce*, ArgMax/ArgMin, TopK, CumSum, and Softmax/LogSoftmax (a normalisation along one
axis).

Every Reduce* op shares one base: the axes rule (empty = all axes unless ``noop_with_empty_axes``),
``keepdims`` and the shape rule are written once; each op states only its NumPy formula. ``axes`` is
an attribute (ONNX moved it to an input in opsets 13/18; converters read it at compile time).
Reductions over an empty set give the identity of the reduction (0, 1, -inf, +inf) as ONNX says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import normalize_axes, normalize_axis
from pegasus.ops.registry import OpDef, ShapeError, register

Axes = tuple[int, ...]


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """``shape`` reduced over ``axes``: kept as 1s with ``keepdims``, else dropped."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _extreme(dtype: np.dtype, lowest: bool):
    """The identity of max (lowest=True) or min over ``dtype``: -inf/+inf, the int limits, False/True."""
    if dtype.kind == "b":
        return not lowest
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


class _Reduce(OpDef):
    """Base of Reduce*: subclasses define ``fn(x, axes, keepdims)`` with NumPy."""

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axes: Axes = ()
        keepdims: bool = True
        noop_with_empty_axes: bool = False

    @staticmethod
    def fn(x: np.ndarray, axes: Axes, keepdims: bool) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def axes(attrs, rank: int) -> Axes | None:
        """Sorted axes to reduce, or None when the op is the identity (empty axes with the noop flag)."""
        if not attrs.axes:
            return None if attrs.noop_with_empty_axes else tuple(range(rank))
        return tuple(sorted(set(normalize_axes(attrs.axes, rank))))

    @classmethod
    def infer(cls, attrs, inputs):
        x = inputs[0]
        axes = cls.axes(attrs, len(x.shape))
        shape = x.shape if axes is None else reduced_shape(x.shape, axes, attrs.keepdims)
        return [TensorType(shape, x.dtype)]

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        axes = cls.axes(attrs, x.ndim)
        if axes is None:
            return [x.copy()]
        return [np.asarray(cls.fn(x, axes, attrs.keepdims)).astype(x.dtype)]


@register
class ReduceSum(_Reduce):
    """y = sum(x) over axes."""

    name = "ReduceSum"

    @staticmethod
    def fn(x, axes, keepdims):
        return np.sum(x, axis=axes, keepdims=keepdims)


@register
class ReduceMean(_Reduce):
    """y = mean(x) over axes."""

    name = "ReduceMean"

    @staticmethod
    def fn(x, axes, keepdims):
        return np.mean(x, axis=axes, keepdims=keepdims)


@register
class ReduceProd(_Reduce):
    """y = prod(x) over axes."""

    name = "ReduceProd"

    @staticmethod
    def fn(x, axes, keepdims):
        return np.prod(x, axis=axes, keepdims=keepdims)


@register
class ReduceMax(_Reduce):
    """y = max(x) over axes (-inf, or the type's lowest value, over an empty set)."""

    name = "ReduceMax"
    value_preserving = True

    @staticmethod
    def fn(x, axes, keepdims):
        return np.max(x, axis=axes, keepdims=keepdims, initial=_extreme(x.dtype, lowest=True))


@register
class ReduceMin(_Reduce):
    """y = min(x) over axes (+inf, or the type's highest value, over an empty set)."""

    name = "ReduceMin"
    value_preserving = True

    @staticmethod
    def fn(x, axes, keepdims):
        return np.min(x, axis=axes, keepdims=keepdims, initial=_extreme(x.dtype, lowest=False))


@register
class ReduceL1(_Reduce):
    """y = sum(|x|) over axes."""

    name = "ReduceL1"

    @staticmethod
    def fn(x, axes, keepdims):
        return np.sum(np.abs(x), axis=axes, keepdims=keepdims)


@register
class ReduceL2(_Reduce):
    """y = sqrt(sum(x^2)) over axes."""

    name = "ReduceL2"

    @staticmethod
    def fn(x, axes, keepdims):
        return np.sqrt(np.sum(np.square(x), axis=axes, keepdims=keepdims))


@register
class ReduceSumSquare(_Reduce):
    """y = sum(x^2) over axes."""

    name = "ReduceSumSquare"

    @staticmethod
    def fn(x, axes, keepdims):
        return np.sum(np.square(x), axis=axes, keepdims=keepdims)


@register
class ReduceLogSum(_Reduce):
    """y = log(sum(x)) over axes."""

    name = "ReduceLogSum"

    @staticmethod
    def fn(x, axes, keepdims):
        with np.errstate(divide="ignore"):
            return np.log(np.sum(x, axis=axes, keepdims=keepdims))


@register
class ReduceLogSumExp(_Reduce):
    """y = log(sum(exp(x))) over axes, computed as m + log(sum(exp(x - m))) with m = max(x)."""

    name = "ReduceLogSumExp"

    @staticmethod
    def fn(x, axes, keepdims):
        m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0)
        with np.errstate(divide="ignore"):
            y = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
        return y if keepdims else np.squeeze(y, axis=axes)


# ---- index of the extreme value -----------------------------------------------------------------
class _ArgReduce(OpDef):
    """Base of ArgMax/ArgMin: int64 index of the first (or last) extreme value along ``axis``."""

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axis: int = 0
        keepdims: bool = True
        select_last_index: bool = False

    @staticmethod
    def pick(x: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def infer(attrs, inputs):
        shape = inputs[0].shape
        axis = normalize_axis(attrs.axis, len(shape))
        return [TensorType(reduced_shape(shape, (axis,), attrs.keepdims), DType.INT64)]

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        if attrs.select_last_index:
            index = x.shape[axis] - 1 - cls.pick(np.flip(x, axis), axis)
        else:
            index = cls.pick(x, axis)
        index = np.expand_dims(index, axis) if attrs.keepdims else index
        return [np.asarray(index, dtype=np.int64)]


@register
class ArgMax(_ArgReduce):
    """y = index of max(x) along axis (ONNX ArgMax)."""

    name = "ArgMax"
    pick = staticmethod(np.argmax)


@register
class ArgMin(_ArgReduce):
    """y = index of min(x) along axis (ONNX ArgMin)."""

    name = "ArgMin"
    pick = staticmethod(np.argmin)


@register
class TopK(OpDef):
    """values and int64 indices of the ``k`` largest (smallest with ``largest`` False) elements along ``axis``,
    sorted, equal values by lower index first (ONNX TopK); NaN sorts after every number"""

    name = "TopK"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        k: int = 1
        axis: int = -1
        largest: bool = True
        sorted: bool = True

    @staticmethod
    def infer(attrs, inputs):
        x = inputs[0]
        axis = normalize_axis(attrs.axis, len(x.shape))
        if not 0 <= attrs.k <= x.shape[axis]:
            raise ShapeError(f"k = {attrs.k} is outside [0, {x.shape[axis]}] (axis {axis} of {list(x.shape)})")
        shape = tuple(attrs.k if i == axis else d for i, d in enumerate(x.shape))
        return [TensorType(shape, x.dtype), TensorType(shape, DType.INT64)]

    @staticmethod
    def reference(attrs, inputs):
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        key = x.astype(np.float64)
        order = np.argsort(-key if attrs.largest else key, axis=axis, kind="stable")
        index = np.take(order, np.arange(attrs.k), axis=axis)
        return [np.take_along_axis(x, index, axis=axis), index.astype(np.int64)]


@register
class CumSum(OpDef):
    """y = running sums of x along ``axis`` (ONNX CumSum): ``exclusive`` leaves each element out of its own sum,
    ``reverse`` sums from the end; summed in x's dtype one element after the other"""

    name = "CumSum"

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axis: int = 0
        exclusive: bool = False
        reverse: bool = False

    @staticmethod
    def infer(attrs, inputs):
        x = inputs[0]
        normalize_axis(attrs.axis, len(x.shape))
        return [TensorType(x.shape, x.dtype)]

    @staticmethod
    def reference(attrs, inputs):
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        y = np.flip(x, axis) if attrs.reverse else x
        sums = np.cumsum(y, axis=axis, dtype=x.dtype)
        if attrs.exclusive:
            shifted = np.zeros_like(sums)
            body = [slice(None)] * x.ndim
            body[axis] = slice(1, None)
            head = list(body)
            head[axis] = slice(0, -1)
            shifted[tuple(body)] = sums[tuple(head)]
            sums = shifted
        return [np.ascontiguousarray(np.flip(sums, axis) if attrs.reverse else sums)]


# ---- normalisation along one axis ---------------------------------------------------------------
class _SoftmaxBase(OpDef):
    """Base of Softmax/LogSoftmax along one axis (opset-13 semantics); ``fn`` gets z = x - max(x)."""

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axis: int = -1

    @staticmethod
    def fn(z: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def infer(attrs, inputs):
        x = inputs[0]
        normalize_axis(attrs.axis, len(x.shape))
        return [TensorType(x.shape, x.dtype)]

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        if x.size == 0:
            return [x.copy()]
        z = x - np.max(x, axis=axis, keepdims=True)
        return [np.asarray(cls.fn(z, axis)).astype(x.dtype)]


@register
class Softmax(_SoftmaxBase):
    """y = exp(x - max) / sum(exp(x - max)) along axis."""

    name = "Softmax"

    @staticmethod
    def fn(z, axis):
        e = np.exp(z)
        return e / np.sum(e, axis=axis, keepdims=True)


@register
class LogSoftmax(_SoftmaxBase):
    """y = (x - max) - log(sum(exp(x - max))) along axis."""

    name = "LogSoftmax"

    @staticmethod
    def fn(z, axis):
        return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
