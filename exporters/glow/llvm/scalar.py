"""Scalar arithmetic for one element type (``Arith``: fadd or add, fcmp or signed/unsigned icmp, max/min that
propagate NaN like NumPy's maximum/minimum, the bundle's math library), so one formula serves float and integer
tensors; ``LaneArith`` applies the same formulas to vectors. Shared by every element-wise family."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.llvm.convert import UNSIGNED
from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.types import BIT, F32, I32, llvm_type
from pegasus.ir.dtypes import DType


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
        return self.b.fcmp_unordered("uno", x, x) if self.is_float else ir.Constant(BIT, 0)

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
