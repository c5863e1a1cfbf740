"""QMatMul on x86-64 with PMADDWD (integer_madd.py): implementation ``qmatmul.madd`` of the select stage, where
the accumulator is i32, both sides are 16-bit values and a tile of rows' pairs fits the workspace
(integer_matmul.matmul_plan's ``madd_width``). B's rows k, k + 1 are interleaved per 128-bit lane and meet a
broadcast pair of A, formed once per row block into the workspace (``paired_rows``), in tiles of 64
(AVX-512), 32, 16 or 8 columns; integer_matmul.py's vectors take the remaining columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_dot import accumulate, centered, zeroed
from pegasus.exporters.glow.kernels.integer.integer_matmul import (
    MatMul,
    MatMulPlan,
    emit_qmatmul,
    matmul_plan,
    plan_workspace,
    splat,
)
from pegasus.exporters.glow.kernels.registry import sizing_context, workspace
from pegasus.exporters.glow.kernels.strategy import Query, Verdict, implementation
from pegasus.exporters.glow.kernels.x86.integer_madd import load_lanes, madd, madd_lanes
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import I16, I32

Value = ir.Value
NAME = "qmatmul.madd"


def madd_plan(k: KernelContext) -> MatMulPlan:
    """The layer's plan with the target's PMADDWD lanes."""
    return matmul_plan(k, madd_lanes(k.target))


def madd_applies(query: Query) -> Verdict:
    if getattr(query.target, "arch", None) != "x86_64":
        return "not x86-64"
    return True if madd_plan(sizing_context(query)).madd_width else "no i32 sums of 16-bit values that fit"


@workspace(NAME)
def madd_workspace(k: KernelContext) -> int:
    return plan_workspace(madd_plan(k))


@implementation(NAME, "QMatMul", family="x86", priority=10, when=madd_applies)
def qmatmul_madd(k: KernelContext) -> None:
    """QMatMul with PMADDWD over pairs of B's rows, then vectors of columns."""
    emit_qmatmul(k, madd_plan(k), MaddPath())


@dataclass
class MaddPath:
    """The PMADDWD columns of a layer (integer_matmul.MatMulPath): ``pair_words``/``pair_sums``, A's rows of a
    row block as 16-bit pairs and their sums."""

    # the layer's builder, operands and plan (``setup``: the MatMul's), which the products read
    b: ir.IRBuilder | None = None
    a: TensorRef | None = None
    bm: TensorRef | None = None
    plan: MatMulPlan | None = None
    pair_words: Value | None = None
    pair_sums: Value | None = None

    def setup(self, mm: MatMul, k: KernelContext) -> None:
        b, plan = mm.b, mm.plan
        self.b, self.a, self.bm, self.plan = mm.b, mm.a, mm.bm, mm.plan
        self.pair_words = b.bitcast(k.scratch(ir.ArrayType(I32, plan.row_tile * plan.pairs), plan.pair_bytes),
                                    I32.as_pointer())
        self.pair_sums = b.bitcast(entry_alloca(b, ir.ArrayType(plan.mac.acc, plan.row_tile)),
                                   plan.mac.acc.as_pointer())

    def columns(self, mm: MatMul, base: list[Value], row0: Value, nrows: int) -> int:
        """A's pairs, then tiles of 2 x, 1 x the PMADDWD width, 16 and 8 columns: the columns taken."""
        b, plan = mm.b, mm.plan
        cols, madd_width = plan.cols, plan.madd_width
        self.paired_rows(base, row0, nrows)
        start = 0
        for ncols in (2 * madd_width, madd_width, 16, 8):
            whole = (cols - start) // ncols * ncols
            if ncols <= 2 * madd_width and whole:
                for_tiles(b, start, whole, ncols,
                          lambda col0, n: mm.tile(base, row0, nrows, col0, n, self.madd_products))
                start += whole
        return start

    def madd_products(self, base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int,
                      sums: list[Value] | None) -> list[list[Value]]:
        """x86 PMADDWD over pairs of B's rows: rows k and k + 1 of ``ncols`` (8, 16 or 32) columns are
        interleaved per 128-bit lane (low and high four columns of every eight) and meet the broadcast
        pair (A[r, k], A[r, k + 1]) - zero point; an odd last k pairs with zeros."""
        b, depth = self.b, self.plan.depth
        sub = min(ncols, self.plan.madd_width)                # columns per PMADDWD
        blocks = ncols // sub
        accumulator = ir.VectorType(I32, sub // 2)
        slots = [[zeroed(b, accumulator) for _ in range(2 * blocks)] for _ in range(nrows)]
        lows = [c for lane in range(sub // 8) for j in range(4) for c in (8 * lane + j, sub + 8 * lane + j)]
        highs = [c + 4 for c in lows]
        columns = [[s * sub + 8 * lane + 4 * h + j for lane in range(sub // 8) for j in range(4)]
                   for s in range(blocks) for h in range(2)]
        if depth >= 2:
            with for_range(b, depth // 2, name="kp") as kp:
                self._madd_step(base, nrows, col0, slots, sub, (lows, highs), b.mul(kp, const(2)), True)
        if depth % 2:
            self._madd_step(base, nrows, col0, slots, sub, (lows, highs), const(depth - 1), False)
        if sums is not None:
            for r in range(nrows):
                b.store(b.load(b.gep(self.pair_sums, [const(r)], inbounds=True)), sums[r])
        out = []
        for r in range(nrows):
            values = [b.load(slot) for slot in slots[r]]
            row = [None] * ncols
            for h, value in enumerate(values):
                for lane, col in enumerate(columns[h]):
                    row[col] = b.extract_element(value, const(lane))
            out.append(row)
        return out

    def _madd_step(self, base: list[Value], nrows: int, col0: Value, slots: list[list[Value]], sub: int,
                   masks: tuple[list[int], list[int]], kk: Value, pair: bool) -> None:
        """Rows kk (and kk + 1 when ``pair``) of B's column tile, interleaved by ``masks``, into ``slots``."""
        b, bm, plan = self.b, self.bm, self.plan
        chunks = []
        for s in range(len(slots[0]) // 2):
            rows_b = [load_lanes(b, bm.address(b, affine(b, s * sub, (base[1], 1), (kk, plan.cols), (col0, 1),
                                                          (d, plan.cols))), sub, plan.mac.w.signed, sub)
                      for d in range(2 if pair else 1)]
            other = rows_b[1] if pair else ir.Constant(rows_b[0].type, None)
            chunks += [b.shuffle_vector(rows_b[0], other, ir.Constant(ir.VectorType(I32, sub), m)) for m in masks]
        for r in range(nrows):
            word = b.load(b.gep(self.pair_words, [affine(b, r * plan.pairs, (b.lshr(kk, const(1)), 1))],
                                inbounds=True))
            both = b.bitcast(splat(b, word, sub // 2), ir.VectorType(I16, sub))
            for h, chunk in enumerate(chunks):
                accumulate(b, slots[r][h], madd(b, both, chunk))

    def paired_rows(self, base: list[Value], row0: Value, nrows: int) -> None:
        """pair_words[r][k / 2] = (A[row0 + r, k], A[row0 + r, k + 1]) - zero point as 16-bit halves (an
        odd last k with 0), pair_sums[r] = their sum: A's side of every column tile, formed once."""
        b, depth = self.b, self.plan.depth
        for r in range(nrows):
            running = b.gep(self.pair_sums, [const(r)], inbounds=True)
            b.store(ir.Constant(self.plan.mac.acc, 0), running)
            with for_range(b, depth // 2, name="kw") as kw:
                accumulate(b, running, self._pair(base, row0, r, kw, False))
            if depth % 2:
                accumulate(b, running, self._pair(base, row0, r, const(depth // 2), True))

    def _pair(self, base: list[Value], row0: Value, r: int, kw: Value, odd: bool) -> Value:
        """Stores pair ``kw`` of row ``r`` (``odd``: the last k, with 0) and returns its sum."""
        b, plan = self.b, self.plan
        kk = b.mul(kw, const(2))
        xs = [centered(b, self.a, affine(b, r * plan.depth + d, (base[0], 1), (row0, plan.depth), (kk, 1)), plan.mac.x)
              for d in range(1 if odd else 2)] + ([const(0)] if odd else [])
        b.store(b.or_(b.and_(xs[0], const(0xFFFF)), b.shl(xs[1], const(16))),
                b.gep(self.pair_words, [affine(b, r * plan.pairs, (kw, 1))], inbounds=True))
        return b.add(xs[0], xs[1])

