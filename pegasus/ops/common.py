"""Building blocks shared by op definitions: base classes for element-wise ops and shape helpers.

An element-wise op only states its NumPy formula; the shape rule, the ``elementwise``/``inplace``
facts and the dtype rule come from the base class here, written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import OpDef, ShapeError


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy/ONNX multidirectional broadcasting; ShapeError when the shapes do not broadcast."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError("cannot broadcast shapes " + " with ".join(str(list(s)) for s in shapes)) from None


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(normalize_axis(a, rank) for a in axes)


class Unary(OpDef):
    """y = f(x) element by element; same shape and dtype. Subclasses define ``fn(attrs, x)``."""

    elementwise = True
    inplace = True

    @staticmethod
    def fn(attrs: Any, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def infer(attrs: Any, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        return [TensorType(inputs[0].shape, inputs[0].dtype)]

    @classmethod
    def reference(cls, attrs: Any, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.asarray(cls.fn(attrs, x)).astype(x.dtype, copy=False)]


class Binary(OpDef):
    """y = f(a, b) with broadcasting. ``result_dtype`` None keeps a's dtype (BOOL for comparisons)."""

    num_inputs = (2, 2)
    elementwise = True
    inplace = True
    result_dtype: ClassVar[DType | None] = None

    @staticmethod
    def fn(attrs: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def infer(cls, attrs: Any, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        a, b = inputs
        return [TensorType(broadcast_shape(a.shape, b.shape), cls.result_dtype or a.dtype)]

    @classmethod
    def reference(cls, attrs: Any, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        a, b = inputs
        dtype = cls.result_dtype.numpy if cls.result_dtype else a.dtype
        return [np.asarray(cls.fn(attrs, a, b)).astype(dtype, copy=False)]
