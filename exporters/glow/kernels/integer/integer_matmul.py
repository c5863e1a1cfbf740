"""The QMatMul emitter (pegasus/ops/integer.py): numpy.matmul semantics with per-column requantisation;
operands, accumulators and requantisation as integer_dot.py describes.

QMatMul keeps a tile of rows times a vector of columns in registers: each step over the reduction adds
a centred, broadcast element of A times a row of B (contiguous along its columns). With the DSP
extension a row of A is first centred into 16-bit pairs in the workspace; B's rows are read a word at a
time and spread by SXTB16, and each pair of A meets them in single 16 x 16 MACs (SMLABB/SMLATB/...):
pairing B along the reduction for SMLAD would cost as many instructions as it saves, since B cannot be
laid out anew at export time.

On x86-64, when the accumulator is i32 and both sides are 16-bit values, PMADDWD (integer_madd.py)
pairs B's rows k, k + 1 by interleaving them per 128-bit lane and meets them with a broadcast pair of A,
formed once per row into the workspace, in tiles of 64 (AVX-512), 32, 16 or 8 columns.

The select stage decides the path: ``QMatMul`` here is the portable one (vectors of columns); the paired paths
are implementations of their own, ``qmatmul.madd`` (x86, integer_matmul_madd.py) and ``qmatmul.smla`` (Cortex-M,
integer_matmul_dsp.py), which compute their ``matmul_plan`` with the facts of their ISA and hand ``emit_qmatmul``
a ``MatMulPath`` taking a leading range of each row block's columns; the vectors take the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.integer.integer_dot import (
    SCRATCH_BYTES,
    Mac,
    Requant,
    acc_bound,
    accumulate,
    centered,
    finish,
    madd_fits,
    operand,
    zeroed,
)
from pegasus.exporters.glow.kernels.registry import emitter, workspace
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef, batch_steps, strides_of
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import I32
from pegasus.ops.common import broadcast_shape

Value = ir.Value


def splat(b: ir.IRBuilder, scalar: Value, lanes: int) -> Value:
    vector = ir.VectorType(scalar.type, lanes)
    one = b.insert_element(ir.Constant(vector, None), scalar, const(0))
    return b.shuffle_vector(one, ir.Constant(vector, None), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


@dataclass(frozen=True)
class MatMulPlan:
    """QMatMul's tiling: ``row_tile`` rows x ``width`` columns of accumulators; ``madd_width`` > 0 when x86
    PMADDWD meets pairs of A formed once per row tile (``pair_bytes`` of workspace), ``dual_cols`` columns
    (the leading multiple of a weight word) taken with SMLAxy from a centred row of A (``row_bytes``)."""

    rows: int
    depth: int
    cols: int
    mac: Mac
    row_tile: int
    width: int
    madd_width: int
    dual_cols: int

    @property
    def pairs(self) -> int:
        """Words of 16-bit pairs a row of A takes (an odd last element pairs with 0)."""
        return (self.depth + 1) // 2

    @property
    def pair_bytes(self) -> int:
        return self.row_tile * self.pairs * 4 if self.madd_width else 0

    @property
    def row_bytes(self) -> int:
        return self.pairs * 4 if self.dual_cols else 0


def _matrix_shapes(k: KernelContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    a, bm = k.inputs[0], k.inputs[1]
    return (a.shape if len(a.shape) > 1 else (1,) + a.shape), (bm.shape if len(bm.shape) > 1 else bm.shape + (1,))


def matmul_plan(k: KernelContext, madd_lanes: int = 0, smla: bool = False) -> MatMulPlan:
    """The layer's tiling; ``madd_lanes``: the target's PMADDWD lanes (integer_matmul_madd.py; 0: no PMADDWD
    path), ``smla``: the SMLAxy path (integer_matmul_dsp.py) takes the columns it can."""
    a, bm = k.inputs[0], k.inputs[1]
    a_shape, b_shape = _matrix_shapes(k)
    rows, depth, cols = a_shape[-2], a_shape[-1], b_shape[-1]
    mac = Mac(operand(k, a, k.attrs.a_zero_point, "A"), operand(k, bm, k.attrs.b_zero_point, "B"), depth)
    dual = mac.dual(k.target)
    lanes = max(1, simd_of(k.target).width // (mac.acc.width // 8))
    if dual:
        row_tile, width = 1, 4
    elif k.target.is_cortex_m:
        row_tile, width = min(rows, 2), min(cols, 4)
    else:
        row_tile, width = min(rows, 4), min(cols, 2 * lanes)
    fits = not dual and madd_fits(mac) and row_tile * ((depth + 1) // 2) * 4 <= SCRATCH_BYTES and cols >= 8
    per_word = 4 // bm.type.dtype.itemsize
    dual_cols = cols // per_word * per_word if smla and dual and 2 * depth <= SCRATCH_BYTES else 0
    return MatMulPlan(rows, depth, cols, mac, row_tile, width, madd_lanes if fits else 0, dual_cols)


@workspace("QMatMul")
def qmatmul_workspace(k: KernelContext) -> int:
    """The portable path's scratch (none; ``plan_workspace`` of the paired paths' plans)."""
    return plan_workspace(matmul_plan(k))


def plan_workspace(plan: MatMulPlan) -> int:
    """Scratch bytes of a plan: A's pairs (PMADDWD) and a centred row of A (SMLAxy)."""
    return piece(plan.pair_bytes) + piece(plan.row_bytes)


class MatMulPath(Protocol):
    """An ISA's products over a leading range of B's columns (``emit_qmatmul``): ``setup`` takes its scratch
    before the loops, ``columns`` emits a row block's tiles of that range and returns how many columns it took."""

    def setup(self, mm: MatMul, k: KernelContext) -> None: ...

    def columns(self, mm: MatMul, base: list[Value], row0: Value, nrows: int) -> int: ...


#: a tile's products: (base, row0, nrows, col0, ncols, row sums or None) -> values per row and column
Products = Callable[[list[Value], Value, int, Value, int, list[Value] | None], list[list[Value]]]


@dataclass
class MatMul:
    """One QMatMul layer's products, tile by tile (``qmatmul``): its operands, plan and requantisation, and the
    ISA path taking a leading range of the columns (``MatMulPath``), if any."""

    b: ir.IRBuilder
    a: TensorRef
    bm: TensorRef
    y: TensorRef
    bias: TensorRef | None
    plan: MatMulPlan
    rq: Requant
    path: MatMulPath | None = None

    def vector_products(self, base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int,
                        sums: list[Value] | None) -> list[list[Value]]:
        """Rows of A (broadcast elements) times a vector of B's row: <ncols x acc> per row of the tile."""
        b, a, bm, plan = self.b, self.a, self.bm, self.plan
        depth, cols, mac, acc = plan.depth, plan.cols, plan.mac, plan.mac.acc
        vector = ir.VectorType(acc, ncols)
        slots = [zeroed(b, vector) for _ in range(nrows)]
        with for_range(b, depth, name="k") as kk:
            pointer = b.bitcast(bm.address(b, affine(b, 0, (base[1], 1), (kk, cols), (col0, 1))),
                                ir.VectorType(bm.element, ncols).as_pointer())
            loaded = b.load(pointer, align=bm.type.dtype.itemsize)
            column = b.sext(loaded, vector) if mac.w.signed else b.zext(loaded, vector)
            for r in range(nrows):
                x = widen(b, centered(b, a, affine(b, r * depth, (base[0], 1), (row0, depth), (kk, 1)), mac.x),
                          acc, True)
                accumulate(b, slots[r], b.mul(splat(b, x, ncols), column))
                if sums is not None:
                    accumulate(b, sums[r], x)
        totals = [b.load(slot) for slot in slots]
        return [[b.extract_element(total, const(c)) for c in range(ncols)] for total in totals]

    def tile(self, base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int, products: Products) -> None:
        b, mac, cols = self.b, self.plan.mac, self.plan.cols
        sums = [zeroed(b, mac.acc) for _ in range(nrows)] if mac.fold else None
        totals = products(base, row0, nrows, col0, ncols, sums)
        sum_xs = [b.load(sums[r]) if sums is not None else None for r in range(nrows)]
        cells = [(r, c) for r in range(nrows) for c in range(ncols)]
        values = finish(b, mac, [(totals[r][c], sum_xs[r], affine(b, c, (col0, 1))) for r, c in cells], self.bias,
                        self.rq)
        for (r, c), value in zip(cells, values):
            self.y.store(b, value, affine(b, r * cols + c, (base[2], 1), (row0, cols), (col0, 1)))

    def row_block(self, base: list[Value], row0: Value, nrows: int) -> None:
        """A block of rows: the path's columns, then vectors of ``width`` columns."""
        b, plan = self.b, self.plan
        start = self.path.columns(self, base, row0, nrows) if self.path is not None else 0
        if plan.cols > start:
            for_tiles(b, start, plan.cols - start, plan.width,
                      lambda col0, ncols: self.tile(base, row0, nrows, col0, ncols, self.vector_products))


@emitter("QMatMul")
def qmatmul(k: KernelContext) -> None:
    """numpy.matmul semantics (1-D operands, broadcast batches); per-column requantisation and bias."""
    emit_qmatmul(k, matmul_plan(k), None)


def emit_qmatmul(k: KernelContext, plan: MatMulPlan, path: MatMulPath | None) -> None:
    """The layer's loops over batches and row blocks, ``path`` (if any) taking a leading range of columns."""
    b = k.builder
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y = k.outputs[0]
    a_shape, b_shape = _matrix_shapes(k)
    rows, depth, cols = plan.rows, plan.depth, plan.cols
    mm = MatMul(b, k.inputs[0], k.inputs[1], y, bias, plan, Requant(k.table, k.attrs, y, acc_bound(plan.mac, bias)),
                path)
    batch = broadcast_shape(a_shape[:-2], b_shape[:-2])
    steps = (batch_steps(a_shape, batch, rows * depth), batch_steps(b_shape, batch, depth * cols),
             [s * rows * cols for s in strides_of(batch)])
    if path is not None:
        path.setup(mm, k)
    with loop_nest(b, batch) as index:
        base = [affine(b, 0, *zip(index, step)) for step in steps]
        for_tiles(b, 0, rows, plan.row_tile, lambda row0, nrows: mm.row_block(base, row0, nrows))
