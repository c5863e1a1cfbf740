"""Emitters for the broadcasting element-wise ops (pegasus/ops/binary.py): arithmetic, comparisons,
logic, the variadic Max/Min/Sum/Mean, PRelu and Where.

One loop emitter serves them all: every operand gets its NumPy broadcast strides over the output
(0 along a broadcast dimension), neighbouring dimensions that every operand walks contiguously are
merged, and the resulting loop nest has constant trip counts. So equal shapes become one flat loop,
a scalar operand is loaded once, and a per-channel vector (1, C, 1, 1) gives an (N, C, H*W) nest whose
innermost loop reads it as a loop invariant; LLVM vectorises the inner loop in every case.

Each op is a scalar formula ``(ar, attrs, *operands) -> value`` (see ``elementwise.Arith``); integer
tensors use integer instructions, with NumPy's results where C would be undefined: division or
remainder by zero gives 0, INT_MIN / -1 wraps, shifts by the bit width or more (or by a
negative count) shift every bit out.
Pow on integers squares and multiplies with wrap-around (as NumPy); a negative exponent gives what NumPy's
float path truncates to (1 for base 1, ±1 for base -1, else 0; base 0 is undefined there). Float Mod
is x - trunc(x / y)·y corrected to the right quotient (about an ulp of x from C's exact fmod).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import convert, load_as, store_as
from pegasus.exporters.glow.llvm.lanes import (
    broadcast_strides,
    coalesce,
    float_lanes,
    lane_loop,
    load_lanes,
    store_lanes,
)
from pegasus.exporters.glow.llvm.scalar import Arith, LaneArith, compute_dtype
from pegasus.ir.dtypes import DType
from pegasus.ops.facts import has_fact

# ---- broadcasting loops ---------------------------------------------------------------------------


# ---- the formulas ---------------------------------------------------------------------------------

Formula = Callable[..., ir.Value]   # (ar: Arith, attrs, *operands) -> value


@dataclass(frozen=True)
class Broadcast:
    """A formula over broadcast operands; ``dtypes`` maps the inputs' dtypes to (compute dtype, the
    dtype each operand is read as), by default the first input's for all."""

    fn: Formula
    dtypes: Callable[[list[DType]], tuple[DType, list[DType]]] | None = None


def _same_as_first(dtypes: list[DType]) -> tuple[DType, list[DType]]:
    compute = compute_dtype(dtypes[0])
    return compute, [compute] * len(dtypes)


def _pow_dtypes(dtypes: list[DType]) -> tuple[DType, list[DType]]:
    """Float bases compute in their float type. Integer bases keep integer math: in the wider of the two
    integer types (the result wraps to the base's on store, as NumPy's promoted result does), and with a
    float exponent read as float32 (see ``_pow``)."""
    base, exponent = compute_dtype(dtypes[0]), dtypes[1]
    if base.is_float:
        return base, [base, base]
    if exponent.is_float:
        return base, [base, DType.FLOAT32]
    wider = exponent if exponent.itemsize > base.itemsize else base
    return wider, [wider, wider]


def _where_dtypes(dtypes: list[DType]) -> tuple[DType, list[DType]]:
    compute = compute_dtype(dtypes[1])
    return compute, [DType.BOOL, compute, compute]


def _floor_mod(ar: Arith, attrs, x: ir.Value, y: ir.Value) -> ir.Value:
    """NumPy mod (fmod=0): the remainder takes the divisor's sign; fmod=1 is C's fmod/% (dividend's)."""
    r = ar.rem(x, y)
    if attrs.fmod or not ar.signed:
        return r
    b = ar.b
    differ = b.and_(ar.cmp("!=", r, 0), b.xor(ar.cmp("<", r, 0), ar.cmp("<", y, 0)))
    return ar.select(differ, ar.add(r, y), r)


def _int_pow(ar: Arith, x: ir.Value, y: ir.Value) -> ir.Value:
    """x ** y by square-and-multiply over every bit of y, unrolled (straight-line, vectorisable)."""
    b, result, base, exponent = ar.b, ar.const(1), x, y
    for _ in range(ar.type.width):
        odd = b.trunc(exponent, ir.IntType(1))
        result = b.select(odd, ar.mul(result, base), result)
        base = ar.mul(base, base)
        exponent = b.lshr(exponent, ar.const(1))
    if not ar.signed:
        return result
    negative_power = ar.select(b.trunc(y, ir.IntType(1)), x, 1)    # (-1) ** y and 1 ** y for y < 0
    unit = b.or_(ar.cmp("==", x, 1), ar.cmp("==", x, -1))
    return ar.select(ar.cmp("<", y, 0), ar.select(unit, negative_power, 0), result)


def _pow(ar: Arith, attrs, x: ir.Value, y: ir.Value) -> ir.Value:
    """Float x ** y from the math library; integer x to an integer power exactly. An integer base with
    a float exponent (NumPy computes it in float64, then truncates) is exact for integral exponents
    and a float32 power truncated otherwise."""
    if ar.is_float:
        return ar.fn("pow", x, y)
    if isinstance(y.type, ir.IntType):
        return _int_pow(ar, x, y)
    real = Arith(ar.b, DType.FLOAT32, ar.math)
    integral = real.cmp("==", real.trunc(y), y)
    exact = _int_pow(ar, x, convert(ar.b, y, DType.FLOAT32, ar.dtype))
    approximate = real.fn("pow", convert(ar.b, x, ar.dtype, DType.FLOAT32), y)
    return ar.select(integral, exact, convert(ar.b, approximate, DType.FLOAT32, ar.dtype))


def _bit_shift(ar: Arith, attrs, x: ir.Value, y: ir.Value) -> ir.Value:
    """NumPy's shifts: a count of the bit width or more (or negative, read unsigned) shifts everything
    out: 0, or the sign for a signed right shift."""
    b, width = ar.b, ar.type.width
    too_far = b.icmp_unsigned(">=", y, ar.const(width))
    if attrs.direction == "LEFT":
        return ar.select(too_far, 0, b.shl(x, y))
    if ar.signed:
        return b.ashr(x, ar.select(too_far, width - 1, y))
    return ar.select(too_far, 0, b.lshr(x, y))


def _logic(name: str) -> Formula:
    """And/Or/Xor of bools stored as 0/1 bytes: the bitwise instruction is the logical one."""
    return lambda ar, attrs, x, y: getattr(ar.b, name)(x, y)


def _fold(step: Formula) -> Formula:
    """A variadic op as a left fold of a two-operand formula (Max, Min, Sum)."""
    return lambda ar, attrs, *xs: functools.reduce(lambda acc, x: step(ar, attrs, acc, x), xs[1:], xs[0])


def _compare(op: str) -> Formula:
    return lambda ar, attrs, x, y: ar.cmp(op, x, y)


def _arithmetic(name: str) -> Formula:
    """The Arith method ``name`` (add, sub, mul, div, max, min) as a two-operand formula."""
    return lambda ar, attrs, x, y: getattr(ar, name)(x, y)


def _mean(ar: Arith, attrs, *xs: ir.Value) -> ir.Value:
    return ar.div(_fold(_arithmetic("add"))(ar, attrs, *xs), len(xs))


BROADCAST: dict[str, Broadcast] = {
    "Add": Broadcast(_arithmetic("add")),
    "Sub": Broadcast(_arithmetic("sub")),
    "Mul": Broadcast(_arithmetic("mul")),
    "Div": Broadcast(_arithmetic("div")),
    "Pow": Broadcast(_pow, dtypes=_pow_dtypes),
    "Mod": Broadcast(_floor_mod),
    "BitShift": Broadcast(_bit_shift),
    "PRelu": Broadcast(lambda ar, a, x, slope: ar.select(ar.cmp(">=", x, 0), x, ar.mul(slope, x))),
    "Equal": Broadcast(_compare("==")),
    "Less": Broadcast(_compare("<")),
    "Greater": Broadcast(_compare(">")),
    "LessOrEqual": Broadcast(_compare("<=")),
    "GreaterOrEqual": Broadcast(_compare(">=")),
    "And": Broadcast(_logic("and_")),
    "Or": Broadcast(_logic("or_")),
    "Xor": Broadcast(_logic("xor")),
    "Max": Broadcast(_fold(_arithmetic("max"))),
    "Min": Broadcast(_fold(_arithmetic("min"))),
    "Sum": Broadcast(_fold(_arithmetic("add"))),
    "Mean": Broadcast(_mean),
    "Where": Broadcast(lambda ar, a, cond, x, y: ar.select(ar.b.icmp_unsigned("!=", cond, cond.type(0)), x, y),
                       dtypes=_where_dtypes),
}



@emitter(*BROADCAST)
def broadcast(k: KernelContext) -> None:
    spec = BROADCAST[k.node.op]
    operands = [ref for ref in k.inputs if ref is not None]
    compute, reads = (spec.dtypes or _same_as_first)([ref.type.dtype for ref in operands])
    b, y = k.builder, k.outputs[0]
    lanes = float_lanes(k.target, compute, [y, *operands]) if has_fact(k.node.op, "vector_safe") else 1
    strides = [y.strides] + [broadcast_strides(y.shape, ref.shape) for ref in operands]
    sizes, merged = coalesce(y.shape, strides)
    inner = [steps[-1] if steps else 1 for steps in merged]

    def body(flats: list[ir.Value], width: int) -> None:
        out, *at = flats
        if width == 1:
            ar = Arith(b, compute, k.math)
            values = [load_as(b, ref, flat, dtype) for ref, flat, dtype in zip(operands, at, reads)]
            store_as(b, y, out, spec.fn(ar, k.attrs, *values), compute)
            return
        ar = LaneArith(b, compute, k.math, width)
        values = [load_lanes(b, ref, flat, width, step) for ref, flat, step in zip(operands, at, inner[1:])]
        store_lanes(b, y, out, spec.fn(ar, k.attrs, *values))

    lane_loop(b, y.shape, strides, lanes, body)
