"""Emitters for the reductions (pegasus/ops/reduce.py): Reduce*, ArgMax/ArgMin, TopK, CumSum, Softmax/LogSoftmax.

Reduce*: the kept axes form the outer loop nest (one output element each) and the reduced axes the
inner one, with an accumulator that LLVM keeps in a register; both nests merge the dimensions they
walk contiguously, so a global average over H×W is one flat inner loop. Each op is a ``Reduction``:
identity, step, finish. Float sums carry the ``reassoc``/``contract`` flags, which lets LLVM
vectorise them (the summation order changes by rounding only, as NumPy's pairwise sum does).

Integer tensors use integer instructions with wrap-around, which gives NumPy's result after its final
``astype`` (NumPy sums in int64, but the wrapped low bits are the same). Two exceptions accumulate in
int64: ReduceMean (its division needs the whole sum; truncated toward zero as ``astype`` does) and bool
tensors (a count of True values, then nonzero). ReduceL2, ReduceLogSum and ReduceLogSumExp are float
only. Float16 is computed in float32, which is more accurate than NumPy's float16 loops; so is float64
in the ops that need exp/log/sqrt (the bundle's math library is float32).

ArgMax/ArgMin keep the first extreme value (the last with ``select_last_index``); a NaN counts as the
extreme, as in NumPy. Softmax/LogSoftmax are numerically stable: max, then exp(x - max) and its sum,
then a multiply by the reciprocal (Softmax) or a subtraction of the log-sum (LogSoftmax).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import load_as, store_as
from pegasus.exporters.glow.llvm.copies import copy_all
from pegasus.exporters.glow.llvm.lanes import strided_loop
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.scalar import Arith, compute_dtype
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.ir.dtypes import DType
from pegasus.ops.common import normalize_axis
from pegasus.ops.registry import get_op

I32, I64 = ir.IntType(32), ir.IntType(64)
SUM_FLAGS = ("reassoc", "contract")

# ---- accumulators ----------------------------------------------------------------------------------


class Accumulator:
    """A scalar variable for a loop-carried value: a stack slot in the function's entry block, which
    LLVM turns into a register (phi) — so loops need no hand-wired phi nodes."""

    def __init__(self, b: ir.IRBuilder, initial: ir.Value) -> None:
        self.b = b
        here = b.block
        b.position_at_start(b.function.entry_basic_block)
        self.slot = b.alloca(initial.type)
        b.position_at_end(here)
        self.set(initial)

    def get(self) -> ir.Value:
        return self.b.load(self.slot)

    def set(self, value: ir.Value) -> None:
        self.b.store(value, self.slot)


def sum_add(ar: Arith, x: ir.Value, y: ir.Value) -> ir.Value:
    """x + y for a running sum: floats may be re-associated (vectorised)."""
    return ar.b.fadd(x, y, flags=SUM_FLAGS) if ar.is_float else ar.add(x, y)


# ---- Reduce* -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reduction:
    """acc = identity; acc = step(acc, x) over the reduced elements; y = finish(acc, count)."""

    identity: Callable[[Arith], ir.Value]
    step: Callable[[Arith, ir.Value, ir.Value], ir.Value]
    finish: Callable[[Arith, ir.Value, int], ir.Value] = lambda ar, acc, count: acc
    float_only: bool = False
    wide: bool = False   # integers accumulate in int64 (the finish needs the whole value)


def _extreme(ar: Arith, lowest: bool) -> ir.Value:
    """The identity of max (lowest) or min: ∓inf, or the integer type's limit."""
    if ar.is_float:
        return ar.const(-math.inf if lowest else math.inf)
    width = ar.type.width
    if ar.signed:
        return ir.Constant(ar.type, -(1 << (width - 1)) if lowest else (1 << (width - 1)) - 1)
    return ir.Constant(ar.type, 0 if lowest else (1 << width) - 1)


def _square_add(ar: Arith, acc: ir.Value, x: ir.Value) -> ir.Value:
    return sum_add(ar, acc, ar.mul(x, x))


REDUCTIONS: dict[str, Reduction] = {
    "ReduceSum": Reduction(lambda ar: ar.const(0), sum_add),
    "ReduceMean": Reduction(lambda ar: ar.const(0), sum_add, lambda ar, acc, n: ar.div(acc, n), wide=True),
    "ReduceProd": Reduction(lambda ar: ar.const(1), lambda ar, acc, x: ar.mul(acc, x)),
    "ReduceMax": Reduction(lambda ar: _extreme(ar, lowest=True), lambda ar, acc, x: ar.max(acc, x)),
    "ReduceMin": Reduction(lambda ar: _extreme(ar, lowest=False), lambda ar, acc, x: ar.min(acc, x)),
    "ReduceL1": Reduction(lambda ar: ar.const(0), lambda ar, acc, x: sum_add(ar, acc, ar.abs(x))),
    "ReduceL2": Reduction(lambda ar: ar.const(0), _square_add, lambda ar, acc, n: ar.fn("sqrt", acc),
                          float_only=True),
    "ReduceSumSquare": Reduction(lambda ar: ar.const(0), _square_add),
    "ReduceLogSum": Reduction(lambda ar: ar.const(0), sum_add, lambda ar, acc, n: ar.fn("log", acc),
                              float_only=True),
}


def _refuse(k: KernelContext) -> PegasusError:
    return PegasusError(f"layer '{k.node.name}': {k.node.op} on {k.inputs[0].type.dtype.value} tensors is not "
                        "supported by the glow exporter (float only)")


def _accumulate_dtype(k: KernelContext, spec: Reduction | None) -> DType:
    dtype = k.inputs[0].type.dtype
    if dtype.is_float:
        return DType.FLOAT32 if spec is None or spec.float_only else compute_dtype(dtype)
    if spec is None or spec.float_only:
        raise _refuse(k)
    if dtype is DType.BOOL and k.node.op in ("ReduceMax", "ReduceMin"):
        return DType.UINT8
    return DType.INT64 if spec.wide or dtype is DType.BOOL else dtype


def reduce_loops(k: KernelContext, body: Callable[[Arith, ir.Value], ir.Value], dtype: DType) -> None:
    """For every output element: y = body(ar, first input offset), where body walks the reduced axes
    with ``over_reduced``; the ``axes`` rule is the op's own."""
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    axes = get_op(k.node.op).axes(k.attrs, len(x.shape))
    kept = [a for a in range(len(x.shape)) if a not in axes]
    kept_shape = tuple(x.shape[a] for a in kept)
    ar = Arith(b, dtype, k.math)
    with strided_loop(b, kept_shape, [strides_of(kept_shape), [x.strides[a] for a in kept]]) as (out, base):
        store_as(b, y, out, body(ar, base), dtype)


def over_reduced(k: KernelContext, base: ir.Value, visit: Callable[[ir.Value], None]) -> None:
    """visit(offset of x) for every element of the reduced axes from ``base``."""
    x = k.inputs[0]
    axes = get_op(k.node.op).axes(k.attrs, len(x.shape))
    with strided_loop(k.builder, [x.shape[a] for a in axes], [[x.strides[a] for a in axes]], [base]) as (flat,):
        visit(flat)


def fold(k: KernelContext, ar: Arith, base: ir.Value, initial: ir.Value,
         step: Callable[[ir.Value, ir.Value], ir.Value]) -> ir.Value:
    """acc = step(acc, x) over the reduced elements from ``base``, starting at ``initial``."""
    acc = Accumulator(ar.b, initial)
    over_reduced(k, base, lambda flat: acc.set(step(acc.get(), load_as(ar.b, k.inputs[0], flat, ar.dtype))))
    return acc.get()


def _reduced_count(k: KernelContext) -> int:
    x = k.inputs[0]
    return math.prod(x.shape[a] for a in get_op(k.node.op).axes(k.attrs, len(x.shape)))


def _copied_as_noop(k: KernelContext) -> bool:
    """Empty axes with noop_with_empty_axes: the op is the identity (copied here)."""
    if get_op(k.node.op).axes(k.attrs, len(k.inputs[0].shape)) is not None:
        return False
    copy_all(k.builder, k.outputs[0], k.inputs[0])
    return True


@emitter(*REDUCTIONS)
def reduce(k: KernelContext) -> None:
    if _copied_as_noop(k):
        return
    spec = REDUCTIONS[k.node.op]
    count = _reduced_count(k)

    def body(ar: Arith, base: ir.Value) -> ir.Value:
        acc = fold(k, ar, base, spec.identity(ar), lambda acc, x: spec.step(ar, acc, x))
        return spec.finish(ar, acc, count)

    reduce_loops(k, body, _accumulate_dtype(k, spec))


@emitter("ReduceLogSumExp")
def reduce_log_sum_exp(k: KernelContext) -> None:
    """m = max (0 when not finite); y = log(sum(exp(x - m))) + m."""
    if _copied_as_noop(k):
        return

    def body(ar: Arith, base: ir.Value) -> ir.Value:
        m = fold(k, ar, base, _extreme(ar, lowest=True), ar.max)
        m = ar.select(ar.cmp("<", ar.abs(m), math.inf), m, 0)
        total = fold(k, ar, base, ar.const(0), lambda acc, x: sum_add(ar, acc, ar.fn("exp", ar.sub(x, m))))
        return ar.add(ar.fn("log", total), m)

    reduce_loops(k, body, _accumulate_dtype(k, None))


# ---- one axis: ArgMax/ArgMin, Softmax/LogSoftmax ---------------------------------------------------


def axis_loops(b: ir.IRBuilder, shape: tuple[int, ...], axis: int):
    """(outer, n, inner) of ``shape`` around ``axis``, and a loop nest over (outer, inner)."""
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    return outer, n, inner, loop_nest(b, (outer, inner))


def _arg_better(ar: Arith, op: str, last: bool, x: ir.Value, best: ir.Value) -> ir.Value:
    """Whether x replaces the best so far: strictly better (or equal, for the last index); a NaN is
    the extreme (the first NaN wins, or the last one with ``last``)."""
    b = ar.b
    if last:
        return b.or_(ar.cmp(op + "=", x, best), ar.is_nan(x))
    return b.or_(ar.cmp(op, x, best), b.and_(ar.is_nan(x), b.not_(ar.is_nan(best))))


@emitter("ArgMax", "ArgMin")
def arg_extreme(k: KernelContext) -> None:
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    axis = normalize_axis(k.attrs.axis, len(x.shape))
    outer, n, inner, nest = axis_loops(b, x.shape, axis)
    if n == 0:
        return
    ar = Arith(b, compute_dtype(x.type.dtype), k.math)
    op = ">" if k.node.op == "ArgMax" else "<"
    with nest as (o, i):
        base = b.add(b.mul(o, const(n * inner)), i)
        best, best_index = Accumulator(b, load_as(b, x, base, ar.dtype)), Accumulator(b, const(0))
        with for_range(b, n, start=1, name="j") as j:
            value = load_as(b, x, b.add(base, b.mul(j, const(inner))), ar.dtype)
            better = _arg_better(ar, op, k.attrs.select_last_index, value, best.get())
            best.set(b.select(better, value, best.get()))
            best_index.set(b.select(better, j, best_index.get()))
        y.store(b, b.sext(best_index.get(), I64), b.add(b.mul(o, const(inner)), i))


def _precedes(ar: Arith, largest: bool, a: ir.Value, ia: ir.Value, x: ir.Value, ix: ir.Value) -> ir.Value:
    """Whether (a, index ia) comes before (x, ix) in TopK's order: larger (smaller) values first, NaN after every
    number, equal values (or two NaNs) by lower index."""
    b = ar.b
    nan_a, nan_x = ar.is_nan(a), ar.is_nan(x)
    strict = b.or_(ar.cmp(">" if largest else "<", a, x), b.and_(b.not_(nan_a), nan_x))
    tie = b.or_(ar.cmp("==", a, x), b.and_(nan_a, nan_x))
    return b.or_(strict, b.and_(tie, b.icmp_signed("<", ia, ix)))


@emitter("TopK")
def top_k(k: KernelContext) -> None:
    """Output r of each slice is the element that comes first in the order among those after output r - 1: k
    scans of the axis, no scratch memory (k is small: a classifier's top-5, a detector's candidates)."""
    b, x = k.builder, k.inputs[0]
    values, indices = k.outputs
    axis = normalize_axis(k.attrs.axis, len(x.shape))
    outer, n, inner, nest = axis_loops(b, x.shape, axis)
    if n == 0 or k.attrs.k == 0:
        return
    ar = Arith(b, compute_dtype(x.type.dtype), k.math)
    with nest as (o, i):
        base = b.add(b.mul(o, const(n * inner)), i)
        out_base = b.add(b.mul(o, const(k.attrs.k * inner)), i)
        first = load_as(b, x, base, ar.dtype)
        previous, previous_index = Accumulator(b, first), Accumulator(b, const(-1))
        with for_range(b, k.attrs.k, name="r") as r:
            best, best_index = Accumulator(b, first), Accumulator(b, const(-1))
            with for_range(b, n, name="j") as j:
                value = load_as(b, x, b.add(base, b.mul(j, const(inner))), ar.dtype)
                after = b.or_(b.icmp_signed("==", r, const(0)),
                              _precedes(ar, k.attrs.largest, previous.get(), previous_index.get(), value, j))
                empty = b.icmp_signed("<", best_index.get(), const(0))
                better = b.and_(after, b.or_(empty, _precedes(ar, k.attrs.largest, value, j, best.get(),
                                                              best_index.get())))
                best.set(b.select(better, value, best.get()))
                best_index.set(b.select(better, j, best_index.get()))
            flat = b.add(out_base, b.mul(r, const(inner)))
            store_as(b, values, flat, best.get(), ar.dtype)
            indices.store(b, b.sext(best_index.get(), I64), flat)
            previous.set(best.get())
            previous_index.set(best_index.get())


@emitter("CumSum")
def cum_sum(k: KernelContext) -> None:
    """One running sum per slice, in x's dtype, element after element (the reference's order, bit for bit)."""
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    axis = normalize_axis(k.attrs.axis, len(x.shape))
    outer, n, inner, nest = axis_loops(b, x.shape, axis)
    if x.type.size == 0:
        return
    ar = Arith(b, x.type.dtype, k.math)
    with nest as (o, i):
        base = b.add(b.mul(o, const(n * inner)), i)
        total = Accumulator(b, ar.const(0))
        with for_range(b, n, name="j") as j:
            step = b.sub(const(n - 1), j) if k.attrs.reverse else j
            flat = b.add(base, b.mul(step, const(inner)))
            value = x.load(b, flat)
            if k.attrs.exclusive:
                y.store(b, total.get(), flat)
            total.set(ar.add(total.get(), value))
            if not k.attrs.exclusive:
                y.store(b, total.get(), flat)


def _softmax_axis(k: KernelContext, log: bool) -> None:
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    axis = normalize_axis(k.attrs.axis, len(x.shape))
    outer, n, inner, nest = axis_loops(b, x.shape, axis)
    if x.type.size == 0:
        return
    if not x.type.dtype.is_float:
        raise _refuse(k)
    ar = Arith(b, DType.FLOAT32, k.math)
    with nest as (o, i):
        base = b.add(b.mul(o, const(n * inner)), i)

        def along(visit: Callable[[ir.Value], None]) -> None:
            with for_range(b, n, name="j") as j:
                visit(b.add(base, b.mul(j, const(inner))))

        m, total = Accumulator(b, ar.const(-math.inf)), Accumulator(b, ar.const(0))
        along(lambda flat: m.set(ar.max(m.get(), load_as(b, x, flat, ar.dtype))))
        peak = m.get()

        def exp_and_sum(flat: ir.Value) -> None:
            e = ar.fn("exp", ar.sub(load_as(b, x, flat, ar.dtype), peak))
            if not log:
                store_as(b, y, flat, e, ar.dtype)
            total.set(sum_add(ar, total.get(), e))

        along(exp_and_sum)
        if log:
            log_sum = ar.fn("log", total.get())
            along(lambda flat: store_as(b, y, flat, ar.sub(ar.sub(load_as(b, x, flat, ar.dtype), peak), log_sum),
                                        ar.dtype))
        else:
            scale = ar.div(1, total.get())
            along(lambda flat: store_as(b, y, flat, ar.mul(load_as(b, y, flat, ar.dtype), scale), ar.dtype))


@emitter("Softmax")
def softmax(k: KernelContext) -> None:
    _softmax_axis(k, log=False)


@emitter("LogSoftmax")
def log_softmax(k: KernelContext) -> None:
    _softmax_axis(k, log=True)

