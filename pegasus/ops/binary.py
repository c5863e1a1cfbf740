"""Element-wise ops of two or more inputs with NumPy/ONNX broadcasting: arithmetic, comparisons,
logic, the variadic Max/Min/Sum/Mean, and Where.

Two-input ops sit on ``Binary`` (shape rule, dtype rule, facts); each class states its formula. The
dtype rules are ONNX's: arithmetic keeps the first input's dtype (Pow: the base's), comparisons and
logic give bool, integer Div truncates toward zero like C.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import Binary, broadcast_shape
from pegasus.ops.registry import OpDef, ShapeError, register


class _Ufunc2(Binary):
    """A binary op that is exactly one NumPy ufunc."""

    ufunc: ClassVar[np.ufunc]

    @classmethod
    def fn(cls, attrs, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cls.ufunc(a, b)


class _Compare(_Ufunc2):
    """A comparison or logical op: bool result; the output buffer differs in size from the inputs'."""

    result_dtype = DType.BOOL
    inplace = False


def trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer a / b rounded toward zero (C semantics), exact for int64; division by zero gives 0."""
    with np.errstate(divide="ignore"):
        q = np.floor_divide(a, b)
        inexact = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + inexact


# ---- arithmetic ----------------------------------------------------------------------------------


@register
class Add(_Ufunc2):
    """y = a + b"""

    name = "Add"
    residual_sum = True
    vector_safe = True
    channel_affine = ((0, 1), "shift")
    ufunc = np.add


@register
class Sub(_Ufunc2):
    """y = a - b"""

    name = "Sub"
    vector_safe = True
    channel_affine = ((0,), "negative shift")
    ufunc = np.subtract


@register
class Mul(_Ufunc2):
    """y = a * b"""

    name = "Mul"
    vector_safe = True
    channel_affine = ((0, 1), "scale")
    ufunc = np.multiply


@register
class Div(Binary):
    """y = a / b; integers truncate toward zero"""

    name = "Div"
    vector_safe = True

    @staticmethod
    def fn(attrs, a, b):
        if a.dtype.kind in "iu" and b.dtype.kind in "iu":
            return trunc_divide(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):  # IEEE: x / 0 = ±inf, 0 / 0 = NaN, as ONNX and C
            return a / b


@register
class Pow(Binary):
    """y = a ** b, in the base's dtype (the exponent may have another dtype)"""

    name = "Pow"

    @staticmethod
    def fn(attrs, a, b):
        if a.dtype.kind in "iu" and b.dtype.kind in "iu" and np.any(b < 0):
            return np.power(a.astype(np.float64), b)
        return np.power(a, b)


@register
class Mod(Binary):
    """y = a mod b with the divisor's sign (fmod=0, integers) or the dividend's (fmod=1, C fmod)"""

    name = "Mod"

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        fmod: int = 0

    @staticmethod
    def fn(attrs, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.fmod(a, b) if attrs.fmod else np.mod(a, b)


@register
class BitShift(Binary):
    """y = a << b (direction LEFT) or a >> b (RIGHT), unsigned integers"""

    name = "BitShift"

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        direction: str = "LEFT"

    @classmethod
    def infer(cls, attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        if attrs.direction not in ("LEFT", "RIGHT"):
            raise ShapeError(f"BitShift direction must be LEFT or RIGHT, not '{attrs.direction}'")
        return super().infer(attrs, inputs)

    @staticmethod
    def fn(attrs, a, b):
        b = b.astype(a.dtype)
        return np.left_shift(a, b) if attrs.direction == "LEFT" else np.right_shift(a, b)


@register
class PRelu(Binary):
    """y = x if x >= 0 else slope * x; slope broadcasts to x's shape (one way)"""

    name = "PRelu"
    vector_safe = True

    @classmethod
    def infer(cls, attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        (out,) = super().infer(attrs, inputs)
        if out.shape != inputs[0].shape:
            raise ShapeError(f"slope {list(inputs[1].shape)} does not broadcast to x {list(inputs[0].shape)}")
        return [out]

    @staticmethod
    def fn(attrs, x, slope):
        return np.where(x >= 0, x, slope * x)


# ---- comparisons and logic -----------------------------------------------------------------------


@register
class Equal(_Compare):
    """y = a == b"""

    name = "Equal"
    ufunc = np.equal


@register
class Less(_Compare):
    """y = a < b"""

    name = "Less"
    ufunc = np.less


@register
class Greater(_Compare):
    """y = a > b"""

    name = "Greater"
    ufunc = np.greater


@register
class LessOrEqual(_Compare):
    """y = a <= b"""

    name = "LessOrEqual"
    ufunc = np.less_equal


@register
class GreaterOrEqual(_Compare):
    """y = a >= b"""

    name = "GreaterOrEqual"
    ufunc = np.greater_equal


@register
class And(_Compare):
    """y = a and b (bool)"""

    name = "And"
    ufunc = np.logical_and


@register
class Or(_Compare):
    """y = a or b (bool)"""

    name = "Or"
    ufunc = np.logical_or


@register
class Xor(_Compare):
    """y = a xor b (bool)"""

    name = "Xor"
    ufunc = np.logical_xor


# ---- more than two inputs ------------------------------------------------------------------------


class _Variadic(OpDef):
    """y = fold of ``ufunc`` over 1..n inputs, all broadcast together; the first input's dtype."""

    num_inputs = (1, None)
    elementwise = True
    inplace = True
    ufunc: ClassVar[np.ufunc]

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        return [TensorType(broadcast_shape(*[t.shape for t in inputs]), inputs[0].dtype)]

    @classmethod
    def reduce(cls, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return functools.reduce(cls.ufunc, inputs[1:], inputs[0])

    @classmethod
    def reference(cls, attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        shape = broadcast_shape(*[x.shape for x in inputs])
        return [np.broadcast_to(cls.reduce(inputs), shape).astype(inputs[0].dtype)]


@register
class Max(_Variadic):
    """y = max(x0, x1, ...)"""

    name = "Max"
    vector_safe = True
    ufunc = np.maximum


@register
class Min(_Variadic):
    """y = min(x0, x1, ...)"""

    name = "Min"
    vector_safe = True
    ufunc = np.minimum


@register
class Sum(_Variadic):
    """y = x0 + x1 + ..."""

    name = "Sum"
    residual_sum = True
    vector_safe = True
    ufunc = np.add


@register
class Mean(_Variadic):
    """y = (x0 + x1 + ...) / n"""

    name = "Mean"
    vector_safe = True
    ufunc = np.add

    @classmethod
    def reduce(cls, inputs: Sequence[np.ndarray]) -> np.ndarray:
        return super().reduce(inputs) / len(inputs)


@register
class Where(OpDef):
    """y = x where condition else y, the three inputs broadcast together"""

    name = "Where"
    num_inputs = (3, 3)
    elementwise = True

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        cond, x, y = inputs
        if cond.dtype is not DType.BOOL:
            raise ShapeError(f"Where condition must be bool, not {cond.dtype.value}")
        return [TensorType(broadcast_shape(cond.shape, x.shape, y.shape), x.dtype)]

    @staticmethod
    def reference(attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        cond, x, y = inputs
        return [np.where(cond, x, y).astype(x.dtype, copy=False)]
