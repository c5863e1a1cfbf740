"""Unary element-wise ops: activations, math functions and Cast.

Every op here is y[i] = f(x[i]); the ``Unary`` base supplies the shape/dtype rule and the
``elementwise``/``inplace`` facts, so each class only states its formula. Ops that are exactly one NumPy
ufunc name it (``_Ufunc``); the few whose output dtype differs (Cast, IsNaN, IsInf) say so.
Formulas follow the newest ONNX opset; attribute defaults are ONNX's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import Unary
from pegasus.ops.registry import ShapeError, register

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise (exact to float64; NumPy has no erf)."""
    return _erf(np.asarray(x, dtype=np.float64)).astype(x.dtype, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow for large |x|."""
    return np.exp(-np.logaddexp(0, -x))


class _Ufunc(Unary):
    """A unary op that is exactly one NumPy ufunc."""

    ufunc: ClassVar[np.ufunc]

    @classmethod
    def fn(cls, attrs, x: np.ndarray) -> np.ndarray:
        return cls.ufunc(x)


# ---- activations ---------------------------------------------------------------------------------


@register
class Relu(Unary):
    """y = max(x, 0)"""

    name = "Relu"
    clamp = True

    @staticmethod
    def activation_bounds(attrs):
        return 0.0, None

    @staticmethod
    def fn(attrs, x):
        return np.maximum(x, 0)


@register
class LeakyRelu(Unary):
    """y = x if x >= 0 else alpha * x"""

    name = "LeakyRelu"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 0.01

    @staticmethod
    def fn(attrs, x):
        return np.where(x >= 0, x, attrs.alpha * x)


@register
class Clip(Unary):
    """y = min(max(x, min), max); a bound of None is absent. (ONNX Clip-11+ passes the bounds as inputs.)"""

    name = "Clip"
    clamp = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        min: float | None = None
        max: float | None = None

    @staticmethod
    def activation_bounds(attrs):
        return attrs.min, attrs.max

    @staticmethod
    def fn(attrs, x):
        if attrs.min is not None:
            x = np.maximum(x, np.asarray(attrs.min).astype(x.dtype))
        if attrs.max is not None:
            x = np.minimum(x, np.asarray(attrs.max).astype(x.dtype))
        return x


@register
class Sigmoid(Unary):
    """y = 1 / (1 + exp(-x))"""

    name = "Sigmoid"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return sigmoid(x)


@register
class HardSigmoid(Unary):
    """y = max(0, min(1, alpha * x + beta))"""

    name = "HardSigmoid"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 0.2
        beta: float = 0.5

    @staticmethod
    def fn(attrs, x):
        return np.clip(attrs.alpha * x + attrs.beta, 0, 1)


@register
class HardSwish(Unary):
    """y = x * max(0, min(1, x / 6 + 1 / 2))"""

    name = "HardSwish"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return x * np.clip(x / 6 + 0.5, 0, 1)


@register
class Elu(Unary):
    """y = x if x >= 0 else alpha * (exp(x) - 1)"""

    name = "Elu"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 1.0

    @staticmethod
    def fn(attrs, x):
        return np.where(x >= 0, x, attrs.alpha * np.expm1(np.minimum(x, 0)))


@register
class Selu(Unary):
    """y = gamma * (x if x > 0 else alpha * (exp(x) - 1))"""

    name = "Selu"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 1.67326319217681884765625
        gamma: float = 1.05070102214813232421875

    @staticmethod
    def fn(attrs, x):
        return attrs.gamma * np.where(x > 0, x, attrs.alpha * np.expm1(np.minimum(x, 0)))


@register
class Celu(Unary):
    """y = max(0, x) + min(0, alpha * (exp(x / alpha) - 1))"""

    name = "Celu"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 1.0

    @staticmethod
    def fn(attrs, x):
        return np.maximum(x, 0) + np.minimum(0, attrs.alpha * np.expm1(np.minimum(x, 0) / attrs.alpha))


@register
class ThresholdedRelu(Unary):
    """y = x if x > alpha else 0"""

    name = "ThresholdedRelu"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 1.0

    @staticmethod
    def fn(attrs, x):
        return np.where(x > attrs.alpha, x, 0)


@register
class Shrink(Unary):
    """y = x + bias if x < -lambd; x - bias if x > lambd; else 0"""

    name = "Shrink"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        bias: float = 0.0
        lambd: float = 0.5

    @staticmethod
    def fn(attrs, x):
        return np.where(x < -attrs.lambd, x + attrs.bias, np.where(x > attrs.lambd, x - attrs.bias, 0))


@register
class Softplus(Unary):
    """y = ln(1 + exp(x))"""

    name = "Softplus"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return np.logaddexp(0, x)


@register
class Softsign(Unary):
    """y = x / (1 + |x|)"""

    name = "Softsign"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return x / (1 + np.abs(x))


@register
class Mish(Unary):
    """y = x * tanh(ln(1 + exp(x)))"""

    name = "Mish"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return x * np.tanh(np.logaddexp(0, x))


@register
class Swish(Unary):
    """y = x * sigmoid(alpha * x)  (ONNX Swish-24; SiLU when alpha = 1)"""

    name = "Swish"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        alpha: float = 1.0

    @staticmethod
    def fn(attrs, x):
        return x * sigmoid(attrs.alpha * x)


@register
class Gelu(Unary):
    """y = x/2 * (1 + erf(x/√2)); approximate='tanh': x/2 * (1 + tanh(√(2/π) (x + 0.044715 x³)))"""

    name = "Gelu"
    tabulable = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        approximate: str = "none"

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        if attrs.approximate not in ("none", "tanh"):
            raise ShapeError(f"Gelu approximate must be 'none' or 'tanh', not '{attrs.approximate}'")
        return Unary.infer(attrs, inputs)

    @staticmethod
    def fn(attrs, x):
        if attrs.approximate == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))


# ---- math functions --------------------------------------------------------------------------


@register
class Erf(Unary):
    """y = erf(x)"""

    name = "Erf"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return erf(x)


@register
class Reciprocal(Unary):
    """y = 1 / x"""

    name = "Reciprocal"
    tabulable = True

    @staticmethod
    def fn(attrs, x):
        return 1 / x


@register
class Tanh(_Ufunc):
    """y = tanh(x)"""

    name = "Tanh"
    tabulable = True
    ufunc = np.tanh


@register
class Exp(_Ufunc):
    """y = exp(x)"""

    name = "Exp"
    tabulable = True
    ufunc = np.exp


@register
class Log(_Ufunc):
    """y = ln(x)"""

    name = "Log"
    tabulable = True
    ufunc = np.log


@register
class Sqrt(_Ufunc):
    """y = √x"""

    name = "Sqrt"
    tabulable = True
    ufunc = np.sqrt


@register
class Abs(_Ufunc):
    """y = |x|"""

    name = "Abs"
    tabulable = True
    ufunc = np.abs


@register
class Neg(_Ufunc):
    """y = -x (integers wrap)"""

    name = "Neg"
    tabulable = True
    ufunc = np.negative


@register
class Floor(_Ufunc):
    """y = ⌊x⌋"""

    name = "Floor"
    tabulable = True
    ufunc = np.floor


@register
class Ceil(_Ufunc):
    """y = ⌈x⌉"""

    name = "Ceil"
    tabulable = True
    ufunc = np.ceil


@register
class Round(_Ufunc):
    """y = x rounded to the nearest integer, halves to even"""

    name = "Round"
    tabulable = True
    ufunc = np.rint


@register
class Sign(_Ufunc):
    """y = -1, 0 or 1 by the sign of x"""

    name = "Sign"
    tabulable = True
    ufunc = np.sign


@register
class Not(_Ufunc):
    """y = not x (bool)"""

    name = "Not"
    ufunc = np.logical_not


@register
class Sin(_Ufunc):
    """y = sin(x)"""

    name = "Sin"
    tabulable = True
    ufunc = np.sin


@register
class Cos(_Ufunc):
    """y = cos(x)"""

    name = "Cos"
    tabulable = True
    ufunc = np.cos


@register
class Tan(_Ufunc):
    """y = tan(x)"""

    name = "Tan"
    tabulable = True
    ufunc = np.tan


@register
class Atan(_Ufunc):
    """y = arctan(x)"""

    name = "Atan"
    tabulable = True
    ufunc = np.arctan


# ---- ops whose output dtype differs from the input's ---------------------------------------------


class _Predicate(Unary):
    """A bool-valued test of each element."""

    inplace = False

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        return [TensorType(inputs[0].shape, DType.BOOL)]

    @classmethod
    def reference(cls, attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        return [np.asarray(cls.fn(attrs, inputs[0]), dtype=bool)]


@register
class IsNaN(_Predicate):
    """y = x is NaN"""

    name = "IsNaN"

    @staticmethod
    def fn(attrs, x):
        return np.isnan(x)


@register
class IsInf(_Predicate):
    """y = x is +inf (if detect_positive) or -inf (if detect_negative)"""

    name = "IsInf"

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        detect_negative: int = 1
        detect_positive: int = 1

    @staticmethod
    def fn(attrs, x):
        return (np.isposinf(x) & bool(attrs.detect_positive)) | (np.isneginf(x) & bool(attrs.detect_negative))


@register
class Cast(Unary):
    """y = x converted to dtype ``to`` (a DType name); float to int truncates, to bool is x != 0"""

    name = "Cast"
    inplace = False  # the element size changes

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        to: str = "float32"

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        return [TensorType(inputs[0].shape, DType(attrs.to))]

    @staticmethod
    def reference(attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        with np.errstate(invalid="ignore", over="ignore"):
            return [np.asarray(inputs[0]).astype(DType(attrs.to).numpy)]
