"""Emitters for the unary element-wise ops (pegasus/ops/elementwise.py), and the scalar toolkit every
element-wise family shares.

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

import numpy as np
from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.loops import for_range
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.ir.dtypes import DType

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
UNSIGNED = (DType.BOOL, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)


def compute_dtype(dtype: DType) -> DType:
    """The dtype a kernel computes in: float16 is widened to float32 (like NumPy's float16 loops)."""
    return DType.FLOAT32 if dtype is DType.FLOAT16 else dtype


def _int_const(dtype: DType, value: Any) -> ir.Constant:
    """An integer constant of ``dtype`` holding NumPy's ``astype`` of value."""
    return ir.Constant(llvm_type(dtype), int(np.asarray(value).astype(dtype.numpy)))


@dataclass
class Arith:
    """Scalar arithmetic on values of one (compute) dtype, plus the math library."""

    b: ir.IRBuilder
    dtype: DType
    math: Any = None

    @property
    def type(self) -> ir.Type:
        return llvm_type(self.dtype)

    @property
    def intrinsic_suffix(self) -> str:
        return self.type.intrinsic_name

    @property
    def is_float(self) -> bool:
        return self.dtype.is_float

    @property
    def signed(self) -> bool:
        return self.dtype not in UNSIGNED

    def const(self, value: Any) -> ir.Constant:
        if self.is_float:
            return ir.Constant(self.type, float(np.asarray(value).astype(self.dtype.numpy)))
        return _int_const(self.dtype, value)

    def _operand(self, value: Any) -> ir.Value:
        return value if isinstance(value, ir.Value) else self.const(value)

    def add(self, x, y) -> ir.Value:
        x, y = self._operand(x), self._operand(y)
        return self.b.fadd(x, y) if self.is_float else self.b.add(x, y)

    def sub(self, x, y) -> ir.Value:
        x, y = self._operand(x), self._operand(y)
        return self.b.fsub(x, y) if self.is_float else self.b.sub(x, y)

    def mul(self, x, y) -> ir.Value:
        x, y = self._operand(x), self._operand(y)
        return self.b.fmul(x, y) if self.is_float else self.b.mul(x, y)

    def div(self, x, y) -> ir.Value:
        """x / y; integers truncate toward zero, division by zero gives 0, MIN / -1 wraps to MIN."""
        x, y = self._operand(x), self._operand(y)
        return self.b.fdiv(x, y) if self.is_float else self._int_divide(x, y)[0]

    def rem(self, x, y) -> ir.Value:
        """C remainder (sign of x): fmod for floats, srem/urem for integers (by zero: 0; floats: NaN)."""
        x, y = self._operand(x), self._operand(y)
        return self._float_fmod(x, y) if self.is_float else self._int_divide(x, y)[1]

    def _int_divide(self, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
        b, zero, one = self.b, self.const(0), self.const(1)
        by_zero = b.icmp_unsigned("==", y, zero)
        if not self.signed:
            safe = b.select(by_zero, one, y)
            return b.select(by_zero, zero, b.udiv(x, safe)), b.select(by_zero, zero, b.urem(x, safe))
        by_minus_one = b.icmp_signed("==", y, self.const(-1))
        safe = b.select(b.or_(by_zero, by_minus_one), one, y)
        quotient = b.select(by_minus_one, b.sub(zero, x), b.sdiv(x, safe))
        return b.select(by_zero, zero, quotient), b.select(by_zero, zero, b.srem(x, safe))

    def _float_fmod(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """x - trunc(x / y) * y, the quotient corrected by one where x / y rounded across an integer; the
        product's rounding leaves an error of about an ulp of x (C's fmod is exact). NaN when y is 0
        or x infinite, as C."""
        b = self.b
        r = self.sub(x, self.mul(self.trunc(self.div(x, y)), y))
        step = self.copysign(y, x)
        r = b.select(b.and_(self.cmp("!=", r, 0), b.xor(self.cmp("<", r, 0), self.cmp("<", x, 0))),
                     self.add(r, step), r)
        return b.select(self.cmp(">=", self.abs(r), self.abs(y)), self.sub(r, step), r)

    def cmp(self, op: str, x, y) -> ir.Value:
        """i1 comparison; float comparisons are ordered (false with NaN) except '!=' (true with NaN)."""
        x, y = self._operand(x), self._operand(y)
        if self.is_float:
            return (self.b.fcmp_unordered if op == "!=" else self.b.fcmp_ordered)(op, x, y)
        return (self.b.icmp_signed if self.signed else self.b.icmp_unsigned)(op, x, y)

    def select(self, cond: ir.Value, x, y) -> ir.Value:
        return self.b.select(cond, self._operand(x), self._operand(y))

    def is_nan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x) if self.is_float else ir.Constant(I1, 0)

    def _extremum(self, op: str, x, y) -> ir.Value:
        x, y = self._operand(x), self._operand(y)
        if not self.is_float:
            return self.select(self.cmp(op, x, y), x, y)
        picked = self.b.select(self.b.fcmp_unordered(op, x, y), x, y)  # x when x is NaN
        return self.b.select(self.is_nan(y), y, picked)                  # y when y is NaN

    def max(self, x, y) -> ir.Value:
        return self._extremum(">", x, y)

    def min(self, x, y) -> ir.Value:
        return self._extremum("<", x, y)

    def neg(self, x: ir.Value) -> ir.Value:
        return self.b.fneg(x) if self.is_float else self.b.sub(self.const(0), x)

    def abs(self, x: ir.Value) -> ir.Value:
        if self.is_float:
            name = f"llvm.fabs.{self.intrinsic_suffix}"
            return self.b.call(intrinsic(self.b.module, name, self.type, [self.type]), [x])
        return self.select(self.cmp("<", x, 0), self.neg(x), x) if self.signed else x

    def copysign(self, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
        name = f"llvm.copysign.{self.intrinsic_suffix}"
        return self.b.call(intrinsic(self.b.module, name, self.type, [self.type, self.type]), [magnitude, sign])

    def sign(self, x: ir.Value) -> ir.Value:
        """-1, 0 or 1 (NaN stays NaN)."""
        value = self.select(self.cmp(">", x, 0), 1, self.select(self.cmp("<", x, 0), -1, 0))
        return self.select(self.is_nan(x), x, value) if self.is_float else value

    def trunc(self, x: ir.Value) -> ir.Value:
        return self.fn("trunc", x)

    def fn(self, name: str, *args: ir.Value) -> ir.Value:
        """A math-library function (exp, log, tanh, ...). The library is float32: float64 arguments are
        narrowed and the result widened (float32 accuracy, well inside the exporter's tolerance)."""
        function = getattr(self.math, name, None)
        if function is None:
            raise PegasusError(f"the bundle math library has no '{name}'")
        if self.type == F32:
            return function(self.b, *args)
        narrow = [self.b.fptrunc(arg, F32) for arg in args]
        return self.b.fpext(function(self.b, *narrow), self.type)


# ---- conversions (NumPy astype) -------------------------------------------------------------------


def _is_signed(dtype: DType) -> bool:
    return dtype not in UNSIGNED


def half_to_float(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """float16 → float32, exact, with integer operations only (subnormals via an int → float multiply)."""
    h = b.zext(b.bitcast(value, I16), I32)
    magnitude = b.and_(h, ir.Constant(I32, 0x7FFF))
    exponent = b.and_(h, ir.Constant(I32, 0x7C00))
    shifted = b.shl(magnitude, ir.Constant(I32, 13))
    normal = b.add(shifted, ir.Constant(I32, 112 << 23))                  # re-bias 15 → 127
    special = b.or_(shifted, ir.Constant(I32, 0x7F800000))               # inf / NaN keep their payload
    tiny = b.bitcast(b.fmul(b.uitofp(magnitude, F32), ir.Constant(F32, 2.0 ** -24)), I32)  # zero, subnormal
    bits = b.select(b.icmp_unsigned("==", exponent, ir.Constant(I32, 0x7C00)), special,
                    b.select(b.icmp_unsigned("==", exponent, ir.Constant(I32, 0)), tiny, normal))
    sign = b.shl(b.and_(h, ir.Constant(I32, 0x8000)), ir.Constant(I32, 16))
    return b.bitcast(b.or_(bits, sign), F32)


def float_to_half(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """float32 → float16 rounding to nearest even, with integer operations (after F. Giesen's
    float_to_half_fast3_rtne): overflow gives inf, NaN a quiet NaN."""
    def c(v: int) -> ir.Constant:
        return ir.Constant(I32, v)

    bits = b.bitcast(value, I32)
    sign = b.lshr(b.and_(bits, c(0x80000000)), c(16))
    mag = b.and_(bits, c(0x7FFFFFFF))
    special = b.select(b.icmp_unsigned(">", mag, c(0x7F800000)), c(0x7E00), c(0x7C00))
    magic = c(126 << 23)  # 0.5: adding it shifts a subnormal half's bits into place, rounding as the FPU does
    subnormal = b.sub(b.bitcast(b.fadd(b.bitcast(mag, F32), b.bitcast(magic, F32)), I32), magic)
    odd = b.and_(b.lshr(mag, c(13)), c(1))
    normal = b.lshr(b.add(b.add(mag, c(((15 - 127) << 23) + 0xFFF)), odd), c(13))
    half = b.select(b.icmp_unsigned(">=", mag, c(143 << 23)), special,
                    b.select(b.icmp_unsigned("<", mag, c(113 << 23)), subnormal, normal))
    return b.bitcast(b.trunc(b.or_(half, sign), I16), ir.HalfType())


def _float_to_int(b: ir.IRBuilder, value: ir.Value, dst: DType) -> ir.Value:
    """Truncation toward zero; out-of-range and NaN are defined (see the module docstring)."""
    def saturating(kind: str, wide: ir.IntType) -> ir.Value:
        name = f"llvm.{kind}.sat.{wide.intrinsic_name}.{value.type.intrinsic_name}"
        return b.call(intrinsic(b.module, name, wide, [value.type]), [value])

    target = llvm_type(dst)
    if dst.itemsize < 4 or dst is DType.INT32:
        narrow = saturating("fptosi", I32)
        return b.trunc(narrow, target) if target.width < 32 else narrow
    signed = saturating("fptosi", I64)
    if dst is not DType.UINT64:
        return b.trunc(signed, target) if target.width < 64 else signed
    negative = b.fcmp_ordered("<", value, ir.Constant(value.type, 0.0))
    return b.select(negative, signed, saturating("fptoui", I64))


def _nonzero(b: ir.IRBuilder, value: ir.Value, src: DType) -> ir.Value:
    if src.is_float:
        return b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))  # NaN is truthy
    return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))


def _resize_int(b: ir.IRBuilder, value: ir.Value, src: DType, dst: DType) -> ir.Value:
    source, target = llvm_type(src), llvm_type(dst)
    if target.width < source.width:
        return b.trunc(value, target)
    if target.width > source.width:
        return (b.sext if _is_signed(src) else b.zext)(value, target)
    return value


def convert(b: ir.IRBuilder, value: ir.Value, src: DType, dst: DType) -> ir.Value:
    """``value`` (of dtype src) as dtype dst, following NumPy's astype."""
    if src is dst:
        return value
    if src is DType.FLOAT16:
        return convert(b, half_to_float(b, value), DType.FLOAT32, dst)
    if dst is DType.BOOL:
        return b.zext(_nonzero(b, value, src), I8)
    if dst is DType.FLOAT16:
        return float_to_half(b, convert(b, value, src, DType.FLOAT32))
    target = llvm_type(dst)
    if src.is_float and dst.is_float:
        return b.fpext(value, target) if dst.itemsize > src.itemsize else b.fptrunc(value, target)
    if src.is_float:
        return _float_to_int(b, value, dst)
    if dst.is_float:
        return (b.sitofp if _is_signed(src) else b.uitofp)(value, target)
    return _resize_int(b, value, src, dst)


def load_as(b: ir.IRBuilder, ref: TensorRef, flat: ir.Value, dtype: DType) -> ir.Value:
    return convert(b, ref.load(b, flat), ref.type.dtype, dtype)


def store_as(b: ir.IRBuilder, ref: TensorRef, flat: ir.Value, value: ir.Value, dtype: DType) -> None:
    """Store a value computed in ``dtype`` (an i1 result counts as bool) into ``ref``'s dtype."""
    if value.type == I1:
        value, dtype = b.zext(value, I8), DType.BOOL
    ref.store(b, convert(b, value, dtype, ref.type.dtype), flat)


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
    found = ir.Constant(I1, 0)
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


@dataclass
class LaneArith(Arith):
    """Arith on ``<lanes x T>`` vectors: constants are splats, math-library functions run lane by lane."""

    lanes: int = 1

    @property
    def scalar(self) -> Arith:
        return Arith(self.b, self.dtype, self.math)

    @property
    def type(self) -> ir.Type:
        return ir.VectorType(llvm_type(self.dtype), self.lanes)

    @property
    def intrinsic_suffix(self) -> str:
        return f"v{self.lanes}{llvm_type(self.dtype).intrinsic_name}"

    def const(self, value: Any) -> ir.Constant:
        return ir.Constant(self.type, [self.scalar.const(value)] * self.lanes)

    def fn(self, name: str, *args: ir.Value) -> ir.Value:
        result = ir.Constant(self.type, None)
        for lane in range(self.lanes):
            index = ir.Constant(I32, lane)
            value = self.scalar.fn(name, *(self.b.extract_element(arg, index) for arg in args))
            result = self.b.insert_element(result, value, index)
        return result


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
    from pegasus.exporters.glow.kernels.binary import float_lanes, lane_loop, load_lanes, store_lanes

    spec = UNARY[k.node.op]
    x, y, b = k.inputs[0], k.outputs[0], k.builder
    ar = arith_for(k, spec, x.type.dtype)
    lanes = float_lanes(k, ar.dtype, [x, y])
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
