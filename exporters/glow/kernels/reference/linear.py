"""Emitters for the matrix products (Gemm, MatMul).

They use the register-level toolkit of exporters/glow/llvm/ (shared with conv.py and pool.py): ``Simd``
(llvm/simd.py) tells how wide and how many the target's vector registers are, so a kernel can size its register
tile; ``Numeric`` (llvm/numeric.py) does one dtype's arithmetic on explicit LLVM vectors (float16 is loaded into
float32 and rounded back on store), including strided and masked loads; ``for_tiles``, ``cover`` and ``pieces``
(llvm/tiles.py) cut a static extent into tiles whose widths make good vectors. Kernels keep their accumulators
as explicit ``<lanes x T>`` vectors in entry-block allocas, which LLVM promotes to
registers: the inner loops are vectorised by construction rather than by hoping the loop vectoriser
fires, and scalar targets (Cortex-M) get them scalarised.

A product Y = A' @ B' picks one of two register tiles from where B' is contiguous:
- rows (B' contiguous along n, MatMul and Gemm transB=0): rows of Y as vectors, each step adding a
  broadcast element of A' times a row of B' (an outer product);
- dots (B' contiguous along k, Gemm transB=1 as in fully connected layers, or N = 1): several dot
  products at once over vector chunks of k, reduced across lanes at the end.
Gemm's C is the accumulators' initial value (times beta) when alpha is 1, otherwise added at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, INTEGERS, require_dtype
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.simd import Simd, simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef, batch_steps, strides_of
from pegasus.exporters.glow.llvm.tiles import cover, for_tiles, pieces
from pegasus.exporters.glow.llvm.types import Value
from pegasus.ops.common import broadcast_shape

# ----------------------------------------------------------------------------------------------------
# Target registers


# ----------------------------------------------------------------------------------------------------
# Arithmetic on explicit vectors


# ----------------------------------------------------------------------------------------------------
# Matrix products


@dataclass(frozen=True)
class Operand:
    """A matrix view of a tensor: element (i, j) at base + i*rows + j*cols."""

    ref: TensorRef
    rows: int
    cols: int


@dataclass(frozen=True)
class Product:
    """Y (m x n) = alpha * A (m x k) @ B (k x n) + beta * C, with C's broadcast strides."""

    a: Operand
    b: Operand
    y: Operand
    c: Operand | None
    m: int
    n: int
    k: int
    alpha: float = 1.0
    beta: float = 1.0

    @property
    def bias_first(self) -> bool:
        """C starts the accumulators (saves a pass) when no alpha scales the sum."""
        return self.c is not None and self.alpha == 1.0


@dataclass(frozen=True)
class Bases:
    """Flat offsets of the current batch's A, B and Y (MatMul batches)."""

    a: Value
    b: Value
    y: Value


def _bias_tile(num: Numeric, p: Product, row: Value, col: Value, lanes: int) -> Value:
    flat = affine(num.b, 0, (row, p.c.rows), (col, p.c.cols))
    tile = num.load(p.c.ref, flat, lanes, p.c.cols if lanes > 1 else 0)
    return tile if p.beta == 1.0 else num.mul(tile, num.constant(p.beta, lanes))


def _finish(num: Numeric, p: Product, base: Bases, row: Value, col: Value, value: Value) -> None:
    """Scale by alpha, add C unless it started the sum, store the tile of Y at (row, col)."""
    lanes = value.type.count
    if p.alpha != 1.0:
        value = num.mul(value, num.constant(p.alpha, lanes))
    if p.c is not None and not p.bias_first:
        value = num.add(value, _bias_tile(num, p, row, col, lanes))
    num.store(p.y.ref, affine(num.b, 0, (base.y, 1), (row, p.y.rows), (col, p.y.cols)), value)


def _start(num: Numeric, p: Product, row: Value, col: Value, lanes: int) -> Value:
    return _bias_tile(num, p, row, col, lanes) if p.bias_first else num.constant(0, lanes)


def _rows_tile(num: Numeric, p: Product, base: Bases, row0: Value, rows: int, col0: Value, width: int) -> None:
    """Y[row0:+rows, col0:+width] as ``rows`` vectors; each k adds A[r, k] (broadcast) * B[k, cols]."""
    b = num.b
    acc = Accumulators(num, rows, width)
    for r in range(rows):
        acc.set(r, _start(num, p, affine(b, r, (row0, 1)), col0, width))
    with for_range(b, p.k, name="k") as kk:
        b_row = num.load(p.b.ref, affine(b, 0, (base.b, 1), (kk, p.b.rows), (col0, p.b.cols)), width, p.b.cols)
        for r in range(rows):
            a_flat = affine(b, r * p.a.rows, (base.a, 1), (row0, p.a.rows), (kk, p.a.cols))
            acc.mul_add(r, num.load(p.a.ref, a_flat, width, 0), b_row)
    for r in range(rows):
        _finish(num, p, base, affine(b, r, (row0, 1)), col0, acc.get(r))


def _dots_tile(num: Numeric, p: Product, base: Bases, row0: Value, rows: int, col0: Value, cols: int,
               chunk: int) -> None:
    """rows x cols dot products over k in vector chunks, each reduced across its lanes at the end."""
    b = num.b
    pairs = [(affine(b, r, (row0, 1)), affine(b, c, (col0, 1))) for r in range(rows) for c in range(cols)]
    totals = Accumulators(num, len(pairs), 1)
    for i, (row, col) in enumerate(pairs):
        totals.set(i, _start(num, p, row, col, 1))
    full = p.k // chunk
    if full:
        _dot_chunks(num, p, base, (row0, rows), (col0, cols), totals, 0, full, chunk)
    for first, width in pieces(p.k - full * chunk, chunk):
        _dot_chunks(num, p, base, (row0, rows), (col0, cols), totals, full * chunk + first, 1, width)
    for i, (row, col) in enumerate(pairs):
        _finish(num, p, base, row, col, totals.get(i))


def _dot_chunks(num: Numeric, p: Product, base: Bases, row_tile: tuple[Value, int], col_tile: tuple[Value, int],
                totals: Accumulators, first: int, count: int, lanes: int) -> None:
    """Adds to ``totals`` the dot products over k in [first, first + count*lanes): vector partial sums
    (A's rows loaded once for all columns), reduced across lanes after the loop."""
    b = num.b
    (row0, rows), (col0, cols) = row_tile, col_tile
    acc = Accumulators(num, rows * cols, lanes)
    for i in range(rows * cols):
        acc.set(i, num.constant(0, lanes))
    with for_range(b, count, name="kc") as chunk:
        kk = affine(b, first, (chunk, lanes))
        a_rows = [num.load(p.a.ref, affine(b, r * p.a.rows, (base.a, 1), (row0, p.a.rows), (kk, p.a.cols)),
                           lanes, p.a.cols) for r in range(rows)]
        for c in range(cols):
            b_col = num.load(p.b.ref, affine(b, c * p.b.cols, (base.b, 1), (col0, p.b.cols), (kk, p.b.rows)),
                             lanes, p.b.rows)
            for r in range(rows):
                acc.mul_add(r * cols + c, a_rows[r], b_col)
    for i in range(rows * cols):
        totals.set(i, num.add(totals.get(i), num.sum(acc.get(i))))


def emit_product(num: Numeric, p: Product, base: Bases, simd: Simd) -> None:
    """Y = A' @ B' (+ C) in register tiles sized for ``simd``."""
    b = num.b
    lanes, budget = simd.lanes(num.compute), simd.accumulators
    if p.b.rows == 1 and (p.b.cols != 1 or p.n == 1):
        chunk = min(p.k, max(2 * lanes, 4))
        rows = min(p.m, 2)
        cols = max(1, min(p.n, budget // (rows * -(-chunk // lanes))))
        for_tiles(b, 0, p.m, rows, lambda row0, r: for_tiles(
            b, 0, p.n, cols, lambda col0, c: _dots_tile(num, p, base, row0, r, col0, c, chunk)))
        return
    rows = min(p.m, 4)
    width = min(p.n, lanes * max(1, min(-(-p.n // lanes), budget // rows)))
    for_tiles(b, 0, p.m, rows, lambda row0, r: cover(
        b, 0, p.n, width, lambda col0, w: _rows_tile(num, p, base, row0, r, col0, w)))


@emitter("MatMul")
def matmul(k: KernelContext) -> None:
    """numpy.matmul: a 1-D A is one row, a 1-D B one column; batch axes broadcast."""
    a, bm = k.inputs
    y = k.outputs[0]
    num = Numeric(k.builder, require_dtype(k, FLOATS + INTEGERS))
    a_shape = a.shape if len(a.shape) > 1 else (1,) + a.shape
    b_shape = bm.shape if len(bm.shape) > 1 else bm.shape + (1,)
    m, depth, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = broadcast_shape(a_shape[:-2], b_shape[:-2])
    product = Product(Operand(a, depth, 1), Operand(bm, n, 1), Operand(y, n, 1), None, m, n, depth)
    steps = (batch_steps(a_shape, batch, m * depth), batch_steps(b_shape, batch, depth * n),
             [s * m * n for s in strides_of(batch)])
    b = k.builder
    with loop_nest(b, batch) as index:
        bases = Bases(*(affine(b, 0, *zip(index, step)) for step in steps))
        emit_product(num, product, bases, simd_of(k.target))


def _broadcast_operand(c: TensorRef) -> Operand:
    """C (rank <= 2) as an m x n view with stride 0 along its broadcast axes."""
    rows, cols = ((1, 1) + tuple(c.shape))[-2:]
    return Operand(c, cols if rows > 1 else 0, 1 if cols > 1 else 0)


@emitter("Gemm")
def gemm(k: KernelContext) -> None:
    """alpha * A' @ B' + beta * C with A' = A.T if transA, B' = B.T if transB."""
    a, bm = k.inputs[:2]
    c = k.inputs[2] if len(k.inputs) > 2 else None
    at = k.attrs
    dtype = require_dtype(k, FLOATS + INTEGERS)
    if not dtype.is_float and (at.alpha != 1.0 or at.beta not in (0.0, 1.0)):
        raise PegasusError(f"integer Gemm with alpha={at.alpha}, beta={at.beta} is not supported by the Glow "
                           "exporter (only alpha 1 and beta 0 or 1)", where=f"layer '{k.node.name}'")
    m, depth = a.shape[::-1] if at.transA else a.shape
    n = bm.shape[0] if at.transB else bm.shape[1]
    a_view = Operand(a, 1, m) if at.transA else Operand(a, depth, 1)
    b_view = Operand(bm, 1, depth) if at.transB else Operand(bm, n, 1)
    c_view = _broadcast_operand(c) if c is not None and at.beta != 0.0 else None
    product = Product(a_view, b_view, Operand(k.outputs[0], n, 1), c_view, m, n, depth, at.alpha, at.beta)
    zero = const(0)
    emit_product(Numeric(k.builder, dtype), product, Bases(zero, zero, zero), simd_of(k.target))
