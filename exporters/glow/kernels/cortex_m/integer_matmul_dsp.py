"""QMatMul on Cortex-M with the DSP extension: implementation ``qmatmul.smla`` of the select stage, where both
sides are 16-bit values (integer_dot.Mac.dual) and a centred row of A fits the workspace
(integer_matmul.matmul_plan's ``dual_cols``). A row of A is first centred into 16-bit pairs in the workspace
(``centered_row``); B's rows are read a word at a time and spread by SXTB16, and each pair of A meets them in
single 16 x 16 MACs (SMLABB/SMLATB/...), over the leading multiple of a weight word of B's columns;
integer_matmul.py's vectors take the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_dot import accumulate, centered, dsp, load_word, zeroed
from pegasus.exporters.glow.kernels.integer.integer_matmul import (
    MatMul,
    MatMulPlan,
    emit_qmatmul,
    matmul_plan,
    plan_workspace,
)
from pegasus.exporters.glow.kernels.registry import sizing_context, workspace
from pegasus.exporters.glow.kernels.strategy import Query, Verdict, implementation
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import I16, I32

Value = ir.Value
NAME = "qmatmul.smla"


def smla_plan(k: KernelContext) -> MatMulPlan:
    """The layer's plan with the SMLAxy columns."""
    return matmul_plan(k, smla=True)


def smla_applies(query: Query) -> Verdict:
    if not getattr(query.target, "is_cortex_m", False):
        return "not a Cortex-M"
    return True if smla_plan(sizing_context(query)).dual_cols else "no 16-bit products on a DSP CPU that fit"


@workspace(NAME)
def smla_workspace(k: KernelContext) -> int:
    return plan_workspace(smla_plan(k))


@implementation(NAME, "QMatMul", family="cortex_m", priority=10, when=smla_applies)
def qmatmul_smla(k: KernelContext) -> None:
    """QMatMul with SMLAxy over a centred row of A and B's words spread by SXTB16, then vectors of columns."""
    emit_qmatmul(k, smla_plan(k), SmlaPath())


def _halves(b: ir.IRBuilder, ref: TensorRef, flat: Value, count: int, signed: bool) -> list[Value]:
    """ref[flat : flat + count] (8- or 16-bit, count a whole number of words) as i32 values that LLVM can
    see are sign-extended halfwords: words loaded whole, bytes spread into halves by SXTB16/UXTB16."""
    values: list[Value] = []
    if ref.type.dtype.itemsize == 2:
        for g in range(count // 2):
            word = load_word(b, ref, affine(b, 2 * g, (flat, 1)))
            values += [_low(b, word), b.ashr(word, ir.Constant(I32, 16))]
        return values
    unpack = dsp(b.module, "sxtb16" if signed else "uxtb16", 1)
    for g in range(count // 4):
        word = load_word(b, ref, affine(b, 4 * g, (flat, 1)))
        even = b.call(unpack, [word])
        odd = b.call(unpack, [b.or_(b.lshr(word, ir.Constant(I32, 8)), b.shl(word, ir.Constant(I32, 24)))])
        values += [_low(b, even), _low(b, odd), b.ashr(even, ir.Constant(I32, 16)), b.ashr(odd, ir.Constant(I32, 16))]
    return values


def _low(b: ir.IRBuilder, word: Value) -> Value:
    return b.sext(b.trunc(word, I16), I32)


@dataclass
class SmlaPath:
    """The SMLAxy columns of a layer (integer_matmul.MatMulPath): ``row_buffer``/``row_sum``, one centred row
    of A and its sum."""

    # the layer's builder, operands and plan (``setup``: the MatMul's), which the products read
    b: ir.IRBuilder | None = None
    a: TensorRef | None = None
    bm: TensorRef | None = None
    plan: MatMulPlan | None = None
    row_buffer: Value | None = None
    row_sum: Value | None = None

    def setup(self, mm: MatMul, k: KernelContext) -> None:
        b, plan = mm.b, mm.plan
        self.b, self.a, self.bm, self.plan = mm.b, mm.a, mm.bm, mm.plan
        self.row_buffer = b.bitcast(k.scratch(ir.ArrayType(I32, plan.pairs), plan.row_bytes), I16.as_pointer())
        self.row_sum = entry_alloca(b, plan.mac.acc) if plan.mac.fold else None

    def columns(self, mm: MatMul, base: list[Value], row0: Value, nrows: int) -> int:
        """The centred row, then tiles of the leading ``dual_cols`` columns: the columns taken."""
        plan = mm.plan
        self.centered_row(base, row0)
        for_tiles(mm.b, 0, plan.dual_cols, plan.width,
                  lambda col0, ncols: mm.tile(base, row0, nrows, col0, ncols, self.dual_products))
        return plan.dual_cols

    def dual_products(self, base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int,
                      sums: list[Value] | None) -> list[list[Value]]:
        """One row of A, centred beforehand into 16-bit pairs (``centered_row``), times B's rows read a
        word at a time and spread into 16-bit halves by SXTB16: per two steps of k, one load of A's pair
        and single 16 x 16 MACs of its bottom and top halves (SMLABB, SMLATB, SMLABT, SMLATT)."""
        b, bm, plan = self.b, self.bm, self.plan
        depth, cols, mac, acc = plan.depth, plan.cols, plan.mac, plan.mac.acc
        slots = [zeroed(b, acc) for _ in range(ncols)]
        words = b.bitcast(self.row_buffer, I32.as_pointer())

        def step(kk: Value, pair: Value | None) -> None:
            flat = affine(b, 0, (base[1], 1), (kk, cols), (col0, 1))
            halves = [(_low(b, pair), flat), (b.ashr(pair, ir.Constant(I32, 16)), affine(b, cols, (flat, 1)))]
            for x, at in halves:
                for c, value in enumerate(_halves(b, bm, at, ncols, mac.w.signed)):
                    accumulate(b, slots[c], widen(b, b.mul(x, value), acc, True))

        if depth >= 2:
            with for_range(b, depth // 2, name="kp") as kp:
                step(b.mul(kp, const(2)), b.load(b.gep(words, [kp], inbounds=True)))
        if depth % 2:
            last = depth - 1
            x = widen(b, b.load(b.gep(self.row_buffer, [const(last)], inbounds=True)), I32, True)
            for c, value in enumerate(_halves(b, bm, affine(b, last * cols, (base[1], 1), (col0, 1)), ncols,
                                              mac.w.signed)):
                accumulate(b, slots[c], widen(b, b.mul(x, value), acc, True))
        if sums is not None:
            b.store(b.load(self.row_sum), sums[0])
        return [[b.load(slot) for slot in slots]]

    def centered_row(self, base: list[Value], row: Value) -> None:
        """row_buffer[k] = A[row, k] - a_zero_point (int16), row_sum = their sum."""
        b, plan, row_sum = self.b, self.plan, self.row_sum
        if row_sum is not None:
            b.store(ir.Constant(plan.mac.acc, 0), row_sum)
        with for_range(b, plan.depth, name="ka") as kk:
            x = centered(b, self.a, affine(b, 0, (base[0], 1), (row, plan.depth), (kk, 1)), plan.mac.x)
            b.store(b.trunc(x, I16), b.gep(self.row_buffer, [kk], inbounds=True))
            if row_sum is not None:
                accumulate(b, row_sum, widen(b, x, plan.mac.acc, True))

