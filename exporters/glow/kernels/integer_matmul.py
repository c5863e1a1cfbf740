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
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.integer_dot import (
    SCRATCH_BYTES,
    Mac,
    Requant,
    acc_bound,
    accumulate,
    centered,
    dsp,
    finish,
    load_word,
    madd_fits,
    operand,
    zeroed,
)
from pegasus.exporters.glow.kernels.integer_madd import load_lanes, madd, madd_lanes
from pegasus.exporters.glow.kernels.registry import emitter, workspace
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef, batch_steps, strides_of
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import I16, I32
from pegasus.ops.common import broadcast_shape

Value = ir.Value


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


def _splat(b: ir.IRBuilder, scalar: Value, lanes: int) -> Value:
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


def matmul_plan(k: KernelContext) -> MatMulPlan:
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
    dual_cols = cols // per_word * per_word if dual and 2 * depth <= SCRATCH_BYTES else 0
    return MatMulPlan(rows, depth, cols, mac, row_tile, width, madd_lanes(k.target) if fits else 0, dual_cols)


@workspace("QMatMul")
def qmatmul_workspace(k: KernelContext) -> int:
    plan = matmul_plan(k)
    return piece(plan.pair_bytes) + piece(plan.row_bytes)


@dataclass
class _MatMul:
    """One QMatMul layer's products, tile by tile (``qmatmul``): its operands, plan and requantisation, and the
    scratch the paired paths fill (``pair_words``/``pair_sums``: A's rows as 16-bit pairs for PMADDWD;
    ``row_buffer``/``row_sum``: one centred row of A for the SMLAxy path)."""

    b: ir.IRBuilder
    a: TensorRef
    bm: TensorRef
    y: TensorRef
    bias: TensorRef | None
    plan: MatMulPlan
    rq: Requant
    pair_words: Value | None = None
    pair_sums: Value | None = None
    row_buffer: Value | None = None
    row_sum: Value | None = None

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
                accumulate(b, slots[r], b.mul(_splat(b, x, ncols), column))
                if sums is not None:
                    accumulate(b, sums[r], x)
        totals = [b.load(slot) for slot in slots]
        return [[b.extract_element(total, const(c)) for c in range(ncols)] for total in totals]

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
            both = b.bitcast(_splat(b, word, sub // 2), ir.VectorType(I16, sub))
            for h, chunk in enumerate(chunks):
                accumulate(b, slots[r][h], madd(b, both, chunk))

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

    def tile(self, base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int, products) -> None:
        b, mac, cols = self.b, self.plan.mac, self.plan.cols
        sums = [zeroed(b, mac.acc) for _ in range(nrows)] if mac.fold else None
        totals = products(base, row0, nrows, col0, ncols, sums)
        sum_xs = [b.load(sums[r]) if sums is not None else None for r in range(nrows)]
        cells = [(r, c) for r in range(nrows) for c in range(ncols)]
        values = finish(b, mac, [(totals[r][c], sum_xs[r], affine(b, c, (col0, 1))) for r, c in cells], self.bias,
                        self.rq)
        for (r, c), value in zip(cells, values):
            self.y.store(b, value, affine(b, r * cols + c, (base[2], 1), (row0, cols), (col0, 1)))

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

    def row_block(self, base: list[Value], row0: Value, nrows: int) -> None:
        b, plan = self.b, self.plan
        cols, width, madd_width, dual_cols = plan.cols, plan.width, plan.madd_width, plan.dual_cols
        if madd_width:
            self.paired_rows(base, row0, nrows)
        start = 0
        for ncols in (2 * madd_width, madd_width, 16, 8) if madd_width else ():
            whole = (cols - start) // ncols * ncols
            if ncols <= 2 * madd_width and whole:
                for_tiles(b, start, whole, ncols,
                          lambda col0, n: self.tile(base, row0, nrows, col0, n, self.madd_products))
                start += whole
        if start:
            if cols > start:
                for_tiles(b, start, cols - start, width,
                          lambda col0, ncols: self.tile(base, row0, nrows, col0, ncols, self.vector_products))
            return
        if dual_cols:
            self.centered_row(base, row0)
            for_tiles(b, 0, dual_cols, width,
                      lambda col0, ncols: self.tile(base, row0, nrows, col0, ncols, self.dual_products))
        if cols > dual_cols:
            for_tiles(b, dual_cols, cols - dual_cols, width,
                      lambda col0, ncols: self.tile(base, row0, nrows, col0, ncols, self.vector_products))


@emitter("QMatMul")
def qmatmul(k: KernelContext) -> None:
    """numpy.matmul semantics (1-D operands, broadcast batches); per-column requantisation and bias."""
    b = k.builder
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y = k.outputs[0]
    a_shape, b_shape = _matrix_shapes(k)
    plan = matmul_plan(k)
    rows, depth, cols, acc = plan.rows, plan.depth, plan.cols, plan.mac.acc
    mm = _MatMul(b, k.inputs[0], k.inputs[1], y, bias, plan, Requant(k.table, k.attrs, y, acc_bound(plan.mac, bias)))
    batch = broadcast_shape(a_shape[:-2], b_shape[:-2])
    steps = (batch_steps(a_shape, batch, rows * depth), batch_steps(b_shape, batch, depth * cols),
             [s * rows * cols for s in strides_of(batch)])
    if plan.madd_width:
        mm.pair_words = b.bitcast(k.scratch(ir.ArrayType(I32, plan.row_tile * plan.pairs), plan.pair_bytes),
                                  I32.as_pointer())
        mm.pair_sums = b.bitcast(entry_alloca(b, ir.ArrayType(acc, plan.row_tile)), acc.as_pointer())
    if plan.dual_cols:
        mm.row_buffer = b.bitcast(k.scratch(ir.ArrayType(I32, plan.pairs), plan.row_bytes), I16.as_pointer())
        mm.row_sum = entry_alloca(b, acc) if plan.mac.fold else None
    with loop_nest(b, batch) as index:
        base = [affine(b, 0, *zip(index, step)) for step in steps]
        for_tiles(b, 0, rows, plan.row_tile, lambda row0, nrows: mm.row_block(base, row0, nrows))
