"""Emitters for the unary element-wise ops (pegasus/ops/elementwise.py). The scalar toolkit every element-wise
family shares lives in exporters/glow/llvm/ (scalar.py, convert.py):

- ``Arith``: scalar arithmetic for one element type (fadd or add, fcmp or signed/unsigned icmp, max/min
  that propagate NaN like NumPy's maximum/minimum), so one formula serves float and integer tensors;
  it also carries the bundle's math library.
- ``convert``: NumPy ``astype`` between any two dtypes: the Cast op, and how float16 tensors are read
  and written (they are computed in float32, as NumPy does, with integer-only conversions so no target
  needs a half-float library routine).
- ``UNARY``: op name → scalar formula ``(ar, attrs, x) -> value``; one loop emitter runs them all, and
  ``apply_unary`` applies one to a value or a vector of values (the epilogue of a fused convolution).

Float → int casts truncate toward zero. NaN and floats outside the target's range are undefined in C,
and NumPy's result for them depends on the CPU; here they are defined and target-independent: the
value saturates to int32 (int64 for uint32/int64/uint64 targets; NaN gives 0, as ARM's VCVT does) and
then wraps to the target width. That equals NumPy on x86 for every |x| < 2**31 (-1.0 → uint8 is 255,
300.0 → uint8 is 44). int → float16 and float64 → float16 round through float32, which may differ
from NumPy's direct rounding by one float16 step (only for |x| > 2**24 or exact float32 ties).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import convert, load_as, store_as
from pegasus.exporters.glow.llvm.lanes import float_lanes, lane_loop, load_lanes, store_lanes
from pegasus.exporters.glow.llvm.loops import for_range
from pegasus.exporters.glow.llvm.scalar import Arith, LaneArith, compute_dtype
from pegasus.exporters.glow.llvm.types import BIT
from pegasus.ir.dtypes import DType

# ---- conversions (NumPy astype) -------------------------------------------------------------------


# ---- the unary formulas ---------------------------------------------------------------------------

Formula = Callable[..., ir.Value]   # (ar: Arith, attrs, *operands) -> value


@dataclass(frozen=True)
class Scalar:
    """A scalar formula and the dtypes it accepts (integer tensors use integer instructions)."""

    fn: Formula
    ints: bool = False


def _clip(ar: Arith, attrs, x: ir.Value) -> ir.Value:
    if attrs.min is not None:
        x = ar.max(x, attrs.min)
    if attrs.max is not None:
        x = ar.min(x, attrs.max)
    return x


def _gelu(ar: Arith, attrs, x: ir.Value) -> ir.Value:
    if attrs.approximate == "tanh":
        inner = ar.mul(math.sqrt(2 / math.pi), ar.add(x, ar.mul(0.044715, ar.mul(x, ar.mul(x, x)))))
        return ar.mul(ar.mul(0.5, x), ar.add(1, ar.fn("tanh", inner)))
    return ar.mul(ar.mul(0.5, x), ar.add(1, ar.fn("erf", ar.div(x, math.sqrt(2)))))


def _is_inf(ar: Arith, attrs, x: ir.Value) -> ir.Value:
    found = ir.Constant(BIT, 0)
    for wanted, infinity in ((attrs.detect_positive, math.inf), (attrs.detect_negative, -math.inf)):
        if wanted:
            found = ar.b.or_(found, ar.cmp("==", x, infinity))
    return found


UNARY: dict[str, Scalar] = {
    "Relu": Scalar(lambda ar, a, x: ar.max(x, 0), ints=True),
    "LeakyRelu": Scalar(lambda ar, a, x: ar.select(ar.cmp(">=", x, 0), x, ar.mul(a.alpha, x))),
    "Clip": Scalar(_clip, ints=True),
    "Sigmoid": Scalar(lambda ar, a, x: ar.fn("sigmoid", x)),
    "HardSigmoid": Scalar(lambda ar, a, x: ar.min(ar.max(ar.add(ar.mul(a.alpha, x), a.beta), 0), 1)),
    "HardSwish": Scalar(lambda ar, a, x: ar.mul(x, ar.min(ar.max(ar.add(ar.div(x, 6), 0.5), 0), 1))),
    "Elu": Scalar(lambda ar, a, x: ar.select(ar.cmp(">=", x, 0), x, ar.mul(a.alpha, ar.fn("expm1", ar.min(x, 0))))),
    "Selu": Scalar(lambda ar, a, x: ar.mul(a.gamma, ar.select(ar.cmp(">", x, 0), x,
                                                               ar.mul(a.alpha, ar.fn("expm1", ar.min(x, 0)))))),
    "Celu": Scalar(lambda ar, a, x: ar.add(ar.max(x, 0), ar.min(0, ar.mul(a.alpha, ar.fn(
        "expm1", ar.div(ar.min(x, 0), a.alpha)))))),
    "ThresholdedRelu": Scalar(lambda ar, a, x: ar.select(ar.cmp(">", x, a.alpha), x, 0)),
    "Shrink": Scalar(lambda ar, a, x: ar.select(ar.cmp("<", x, -a.lambd), ar.add(x, a.bias), ar.select(
        ar.cmp(">", x, a.lambd), ar.sub(x, a.bias), 0))),
    "Softplus": Scalar(lambda ar, a, x: ar.fn("softplus", x)),
    "Softsign": Scalar(lambda ar, a, x: ar.div(x, ar.add(1, ar.abs(x)))),
    "Mish": Scalar(lambda ar, a, x: ar.mul(x, ar.fn("tanh", ar.fn("softplus", x)))),
    "Swish": Scalar(lambda ar, a, x: ar.mul(x, ar.fn("sigmoid", ar.mul(a.alpha, x)))),
    "Gelu": Scalar(_gelu),
    "Erf": Scalar(lambda ar, a, x: ar.fn("erf", x)),
    "Reciprocal": Scalar(lambda ar, a, x: ar.div(1, x)),
    "Tanh": Scalar(lambda ar, a, x: ar.fn("tanh", x)),
    "Exp": Scalar(lambda ar, a, x: ar.fn("exp", x)),
    "Log": Scalar(lambda ar, a, x: ar.fn("log", x)),
    "Sqrt": Scalar(lambda ar, a, x: ar.fn("sqrt", x)),
    "Sin": Scalar(lambda ar, a, x: ar.fn("sin", x)),
    "Cos": Scalar(lambda ar, a, x: ar.fn("cos", x)),
    "Tan": Scalar(lambda ar, a, x: ar.fn("tan", x)),
    "Atan": Scalar(lambda ar, a, x: ar.fn("atan", x)),
    "Floor": Scalar(lambda ar, a, x: ar.fn("floor", x)),
    "Ceil": Scalar(lambda ar, a, x: ar.fn("ceil", x)),
    "Round": Scalar(lambda ar, a, x: ar.fn("round_half_even", x)),
    "Abs": Scalar(lambda ar, a, x: ar.abs(x), ints=True),
    "Neg": Scalar(lambda ar, a, x: ar.neg(x), ints=True),
    "Sign": Scalar(lambda ar, a, x: ar.sign(x), ints=True),
    "Not": Scalar(lambda ar, a, x: ar.cmp("==", x, 0), ints=True),
    "IsNaN": Scalar(lambda ar, a, x: ar.is_nan(x)),
    "IsInf": Scalar(_is_inf),
}


def arith_for(k: KernelContext, spec: Scalar, dtype: DType) -> Arith:
    """The Arith to run ``spec`` in for tensors of ``dtype``, or a clear error for unsupported ones."""
    compute = compute_dtype(dtype)
    if not compute.is_float and not spec.ints:
        raise PegasusError(f"layer '{k.node.name}': {k.node.op} on {dtype.value} tensors is not supported "
                           "by the glow exporter (float only)")
    return Arith(k.builder, compute, k.math)


def map_elements(k: KernelContext, fn: Callable[[ir.Value], ir.Value], compute: DType,
                 result: DType | None = None) -> None:
    """y[i] = fn(x[i]), x read as ``compute`` and the result (of dtype ``result``, default compute)
    converted to y's dtype; each element is read before it is written, so y may be x."""
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    with for_range(b, y.type.size) as i:
        store_as(b, y, i, fn(load_as(b, x, i, compute)), result or compute)


def apply_unary(b: ir.IRBuilder, math: Any, op: str, attrs: Any, value: ir.Value, dtype: DType) -> ir.Value:
    """``op``'s formula (``UNARY``) on ``value``: one element, or a vector of elements, of ``dtype``'s
    compute type. The one definition of the op's meaning, shared by its loop emitter and by the
    epilogue of a convolution it is fused into."""
    compute = compute_dtype(dtype)
    ar = LaneArith(b, compute, math, value.type.count) if isinstance(value.type, ir.VectorType) \
        else Arith(b, compute, math)
    return UNARY[op].fn(ar, attrs, value)


@emitter(*UNARY)
def unary(k: KernelContext) -> None:
    """y = op(x); float32/float64 tensors in explicit vectors on hosted targets (binary.py ``lane_loop``)."""

    spec = UNARY[k.node.op]
    x, y, b = k.inputs[0], k.outputs[0], k.builder
    ar = arith_for(k, spec, x.type.dtype)
    lanes = float_lanes(k.target, ar.dtype, [x, y])
    if lanes == 1:
        map_elements(k, lambda value: spec.fn(ar, k.attrs, value), ar.dtype)
        return

    def body(flats: list[ir.Value], width: int) -> None:
        out, at = flats
        store_lanes(b, y, out, apply_unary(b, k.math, k.node.op, k.attrs, load_lanes(b, x, at, width, 1), x.type.dtype))

    lane_loop(b, (y.type.size,), [(1,), (1,)], lanes, body)


@emitter("Cast")
def cast(k: KernelContext) -> None:
    src, dst = k.inputs[0].type.dtype, k.outputs[0].type.dtype
    map_elements(k, lambda x: convert(k.builder, x, src, dst), src, dst)
