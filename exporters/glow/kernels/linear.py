"""Emitters for the matrix products (Gemm, MatMul), and the register-level toolkit the other dense
kernels (conv.py, pool.py) share with them.

The toolkit: ``Simd`` tells how wide and how many the target's vector registers are, so a kernel can
size its register tile; ``Numeric`` does one dtype's arithmetic on explicit LLVM vectors (float16 is
loaded into float32 and rounded back on store), including strided and masked loads; ``for_tiles``,
``cover`` and ``pieces`` cut a static extent into tiles whose widths make good vectors. Kernels keep
their accumulators as explicit ``<lanes x T>`` vectors in entry-block allocas, which LLVM promotes to
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

import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.types import I32, llvm_type
from pegasus.ir.dtypes import DType
from pegasus.ops.common import broadcast_shape

#: Fast-math flags of accumulations: fused multiply-add allowed, results otherwise IEEE.
FMF = ("contract",)
BIT = ir.IntType(1)
SIGNED = (DType.INT8, DType.INT16, DType.INT32, DType.INT64)
Value = ir.Value


# ----------------------------------------------------------------------------------------------------
# Target registers


@dataclass(frozen=True)
class Simd:
    """Vector registers of the target: ``width`` bytes each (4 = a scalar FPU), ``registers`` of them."""

    width: int
    registers: int

    def lanes(self, element: ir.Type) -> int:
        return max(1, self.width // _bytes(element))

    @property
    def accumulators(self) -> int:
        """Registers a kernel may keep accumulators in, leaving room for operands."""
        return self.registers - 4 if self.registers <= 16 else self.registers // 2


def _bytes(element: ir.Type) -> int:
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}.get(type(element), 0) or element.width // 8


def _x86_simd(cpu: str, features: str, registers: int) -> Simd:
    if cpu in ("i686", "i386"):
        return Simd(4, 8)      # x87: no vector registers
    if cpu == llvm.get_host_cpu_name():
        host = llvm.get_host_cpu_features()
        flags = {name for name, on in host.items() if on}
    else:
        flags = {f[1:] for f in features.split(",") if f.startswith("+")}
        flags |= {"x86-64-v3": {"avx"}, "x86-64-v4": {"avx", "avx512f"}}.get(cpu, set())
    if "avx512f" in flags:
        return Simd(64, min(registers * 2, 32))
    return Simd(32, registers) if "avx" in flags else Simd(16, registers)


def simd_of(target) -> Simd:
    """Register file a kernel should tile for (exporters.glow.target.Target)."""
    if target.arch in ("x86_64", "i386"):
        return _x86_simd(target.cpu, target.features, 16 if target.arch == "x86_64" else 8)
    if target.arch == "aarch64":
        return Simd(16, 32)
    if target.cpu == "cortex-m55" and target.float_abi == "hard":
        return Simd(16, 8)       # Helium (MVE): 8 Q registers
    return Simd(4, 32) if target.float_abi == "hard" else Simd(4, 8)


# ----------------------------------------------------------------------------------------------------
# Arithmetic on explicit vectors


def affine(b: ir.IRBuilder, offset: int, *terms: tuple[Value | int, int]) -> Value:
    """offset + sum(value * coefficient) as i32, folding constant parts."""
    total, fixed = None, offset
    for value, coef in terms:
        if coef == 0:
            continue
        if isinstance(value, int):
            fixed += value * coef
            continue
        term = value if coef == 1 else b.mul(value, const(coef), flags=("nsw",))
        total = term if total is None else b.add(total, term, flags=("nsw",))
    if total is None:
        return const(fixed)
    return total if fixed == 0 else b.add(total, const(fixed), flags=("nsw",))


def vconst(values: list[int], typ: ir.Type = I32) -> ir.Constant:
    return ir.Constant(ir.VectorType(typ, len(values)), [ir.Constant(typ, v) for v in values])


def _mangle(typ: ir.Type) -> str:
    if isinstance(typ, ir.VectorType):
        return f"v{typ.count}{_mangle(typ.element)}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}.get(type(typ)) or f"i{typ.width}"


def masked_intrinsic(module: ir.Module, kind: str, vector: ir.VectorType) -> ir.Function:
    """``llvm.masked.load``/``llvm.masked.store`` on ``vector`` (declared once per module). With a
    constant mask they become plain loads/stores of the enabled lanes, or one masked instruction."""
    name = f"llvm.masked.{kind}.{_mangle(vector)}.p0"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    mask, pointer = ir.VectorType(BIT, vector.count), vector.as_pointer()
    signature = ir.FunctionType(vector, [pointer, I32, mask, vector]) if kind == "load" else \
        ir.FunctionType(ir.VoidType(), [vector, pointer, I32, mask])
    return ir.Function(module, signature, name)


#: bytes of a cache line (x86-64): the step of ``prefetch_span``
CACHE_LINE = 64


def prefetch_span(b: ir.IRBuilder, ref: TensorRef, flat: Value, first: int, last: int) -> None:
    """Asks for the cache lines of elements flat+first .. flat+last of ``ref`` in L1 (``llvm.prefetch``:
    a hint, which never faults, so the span may reach outside the tensor)."""
    i8p = ir.IntType(8).as_pointer()
    function = b.module.globals.get("llvm.prefetch.p0i8") or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), [i8p, I32, I32, I32]), "llvm.prefetch.p0i8")
    step = max(1, CACHE_LINE // ref.type.dtype.itemsize)
    for offset in sorted({*range(first, last, step), last}):
        pointer = b.bitcast(b.gep(ref.ptr, [affine(b, offset, (flat, 1))]), i8p)
        b.call(function, [pointer, const(0), const(3), const(1)])       # read, keep in all levels, data


class Numeric:
    """One dtype's arithmetic on ``<lanes x T>`` vectors: float16 computes in float32, every other type
    in itself (integers wrap as NumPy's do)."""

    def __init__(self, builder: ir.IRBuilder, dtype: DType):
        self.b = builder
        self.dtype = dtype
        self.storage = llvm_type(dtype)
        self.compute = ir.FloatType() if dtype is DType.FLOAT16 else self.storage
        self.is_float = dtype.is_float
        self.signed = dtype in SIGNED

    def vector(self, lanes: int) -> ir.VectorType:
        return ir.VectorType(self.compute, lanes)

    def constant(self, value: float | int, lanes: int) -> ir.Constant:
        scalar = ir.Constant(self.compute, float(value) if self.is_float else int(value))
        return ir.Constant(self.vector(lanes), [scalar] * lanes)

    def lowest(self, lanes: int) -> ir.Constant:
        """The value every element beats in a max: -inf, or the integer type's minimum."""
        if self.is_float:
            return self.constant(-math.inf, lanes)
        bits = self.compute.width
        return self.constant(-(1 << (bits - 1)) if self.signed else 0, lanes)

    def splat(self, scalar: Value, lanes: int) -> Value:
        b = self.b
        one = b.insert_element(ir.Constant(ir.VectorType(scalar.type, 1), None), scalar, const(0))
        return one if lanes == 1 else b.shuffle_vector(one, one, vconst([0] * lanes))

    # -- memory -------------------------------------------------------------------------------------

    def _widen(self, value: Value) -> Value:
        return self.b.fpext(value, ir.VectorType(self.compute, value.type.count)) \
            if self.storage != self.compute else value

    def load(self, ref: TensorRef, flat: Value, lanes: int, stride: int = 1) -> Value:
        """Elements flat, flat+stride, ... (lanes of them) of ``ref``; stride 0 broadcasts one.
        Small strides load a few whole vectors covering exactly the lanes' span and shuffle the lanes
        out of them (no load reaches past the last element used); larger ones gather lane by lane."""
        b = self.b
        if stride == 0 or lanes == 1:
            return self.splat(self._widen_scalar(ref.load(b, flat)), lanes)
        if stride == 1:
            return self._widen(self._load_vector(ref, flat, lanes))
        if stride > 4:
            return self._gather(ref, flat, stride, (True,) * lanes)
        span = (lanes - 1) * stride + 1
        result = None
        for start in (min(start, span - lanes) for start in range(0, span, lanes)):
            piece = self._load_vector(ref, affine(b, start, (flat, 1)), lanes)
            wanted = {lane: lane * stride - start for lane in range(lanes) if 0 <= lane * stride - start < lanes}
            if result is None:
                result = b.shuffle_vector(piece, piece, vconst([wanted.get(lane, 0) for lane in range(lanes)]))
            else:
                mask = [lanes + wanted[lane] if lane in wanted else lane for lane in range(lanes)]
                result = b.shuffle_vector(result, piece, vconst(mask))
        return self._widen(result)

    def _load_vector(self, ref: TensorRef, flat: Value, lanes: int) -> Value:
        pointer = self.b.bitcast(ref.address(self.b, flat), ir.VectorType(self.storage, lanes).as_pointer())
        return self.b.load(pointer, align=_bytes(self.storage))

    def _gather(self, ref: TensorRef, flat: Value, stride: int, mask: tuple[bool, ...]) -> Value:
        """Lanes flat + lane*stride where ``mask`` is set, zero elsewhere, one load each."""
        b = self.b
        value = ir.Constant(ir.VectorType(self.storage, len(mask)), None)
        for lane in (lane for lane, on in enumerate(mask) if on):
            value = b.insert_element(value, ref.load(b, affine(b, lane * stride, (flat, 1))), const(lane))
        return self._widen(value)

    def load_lanes(self, ref: TensorRef, flat: Value, lanes: int, stride: int, mask: tuple[bool, ...]) -> Value:
        """Like ``load``, but only the lanes in ``mask`` are read and the others are zero: lane 0 may
        lie before the tensor's start (a tile crossing the padding)."""
        if all(mask):
            return self.load(ref, flat, lanes, stride)
        if stride != 1:
            return self._gather(ref, flat, stride, mask)
        b = self.b
        vector = ir.VectorType(self.storage, lanes)
        pointer = b.bitcast(b.gep(ref.ptr, [flat]), vector.as_pointer())    # not inbounds: may start before
        masked = masked_intrinsic(b.module, "load", vector)
        value = b.call(masked, [pointer, const(_bytes(self.storage)), vconst(mask, BIT), ir.Constant(vector, None)])
        return self._widen(value)

    def _widen_scalar(self, value: Value) -> Value:
        return self.b.fpext(value, self.compute) if self.storage != self.compute else value

    def store(self, ref: TensorRef, flat: Value, value: Value, count: int | None = None, stride: int = 1) -> None:
        """Store the lanes at flat, flat+stride, ... (only the first ``count`` lanes, if given)."""
        b = self.b
        lanes = value.type.count
        if self.storage != self.compute:
            value = b.fptrunc(value, ir.VectorType(self.storage, lanes))
        if lanes == 1 or stride != 1:
            for lane in range(lanes if count is None else count):
                ref.store(b, b.extract_element(value, const(lane)), affine(b, lane * stride, (flat, 1)))
            return
        pointer = b.bitcast(ref.address(b, flat), value.type.as_pointer())
        if count is None or count == lanes:
            b.store(value, pointer, align=_bytes(self.storage))
            return
        mask = vconst([lane < count for lane in range(lanes)], BIT)
        b.call(masked_intrinsic(b.module, "store", value.type), [value, pointer, const(_bytes(self.storage)), mask])

    # -- arithmetic ---------------------------------------------------------------------------------

    def add(self, x: Value, y: Value) -> Value:
        return self.b.fadd(x, y, flags=FMF) if self.is_float else self.b.add(x, y)

    def mul(self, x: Value, y: Value) -> Value:
        return self.b.fmul(x, y, flags=FMF) if self.is_float else self.b.mul(x, y)

    def mul_add(self, acc: Value, x: Value, y: Value) -> Value:
        return self.add(acc, self.mul(x, y))

    def div(self, x: Value, y: Value) -> Value:
        return self.b.fdiv(x, y)

    def wins(self, x: Value, best: Value) -> Value:
        """Whether x replaces best in a running max that keeps the first maximum and, like
        numpy's argmax, the first NaN."""
        b = self.b
        if not self.is_float:
            return b.icmp_signed(">", x, best) if self.signed else b.icmp_unsigned(">", x, best)
        greater = b.fcmp_ordered(">", x, best)
        first_nan = b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", best, best))
        return b.or_(greater, first_nan)

    def maximum(self, x: Value, best: Value) -> Value:
        """max(x, best), NaN once either is NaN (for floats: x wins when greater or NaN)."""
        b = self.b
        if not self.is_float:
            return b.select(self.wins(x, best), x, best)
        larger = b.select(b.fcmp_ordered(">", x, best), x, best)
        return b.select(b.fcmp_unordered("uno", x, x), x, larger)

    def from_int(self, value: Value, lanes: int) -> Value:
        """An i32 count as a vector of the compute type."""
        return self.splat(self.b.sitofp(value, self.compute), lanes)

    def reduce(self, value: Value, combine: Callable[[Value, Value], Value], identity: ir.Constant) -> Value:
        """Combine the lanes of ``value`` pairwise down to one lane (a <1 x T> vector)."""
        b = self.b
        lanes = value.type.count
        padded = 1 << (lanes - 1).bit_length()
        if padded != lanes:
            fill = ir.Constant(value.type, [identity] * lanes)
            value = b.shuffle_vector(value, fill, vconst(list(range(lanes)) + [lanes] * (padded - lanes)))
        while padded > 1:
            padded //= 2
            low = b.shuffle_vector(value, value, vconst(list(range(padded))))
            high = b.shuffle_vector(value, value, vconst(list(range(padded, 2 * padded))))
            value = combine(low, high)
        return value

    def sum(self, value: Value) -> Value:
        return self.reduce(value, self.add, ir.Constant(self.compute, 0.0 if self.is_float else 0))


class Accumulators:
    """Register accumulators as entry-block allocas (SROA turns them into phis of the loops)."""

    def __init__(self, num: Numeric, count: int, lanes: int):
        self.num = num
        self.slots = [entry_alloca(num.b, num.vector(lanes)) for _ in range(count)]

    def set(self, index: int, value: Value) -> None:
        self.num.b.store(value, self.slots[index])

    def get(self, index: int) -> Value:
        return self.num.b.load(self.slots[index])

    def mul_add(self, index: int, x: Value, y: Value) -> None:
        self.set(index, self.num.mul_add(self.get(index), x, y))


def for_tiles(b: ir.IRBuilder, start: int, total: int, size: int, body: Callable[[Value, int], None]) -> None:
    """body(first, count) over [start, start+total) in tiles of ``size`` (a loop) and one smaller tail."""
    full, rest = divmod(total, size)
    if full == 1:
        body(const(start), size)
    elif full:
        with for_range(b, full, name="tile") as tile:
            body(affine(b, start, (tile, size)), size)
    if rest:
        body(const(start + full * size), rest)


def power_of_two_below(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def cover(b: ir.IRBuilder, start: int, total: int, size: int, body: Callable[[Value, int], None]) -> None:
    """body(first, size) over [start, start+total) in tiles of one width: ``size``, or the largest power
    of two that fits when total is smaller. A tail tile overlaps its neighbour (it recomputes a few
    outputs) rather than having an odd width, which vector code handles badly. Only for outputs that
    are written, never accumulated, and do not alias the inputs."""
    if total < size:
        size = power_of_two_below(total)
    full, rest = divmod(total, size)
    for_tiles(b, start, full * size, size, body)
    if rest:
        body(const(start + total - size), size)


def pieces(total: int, size: int) -> list[tuple[int, int]]:
    """[(first, width)] covering [0, total): whole ``size`` chunks, then power-of-two pieces."""
    out, first = [], 0
    while first < total:
        width = size if total - first >= size else power_of_two_below(total - first)
        out.append((first, width))
        first += width
    return out


@contextmanager
def range_nest(b: ir.IRBuilder, ranges: list[tuple[Value, Value]]):
    """Nested loops over [lo, hi) ranges (values), outermost first; yields the indices."""
    if not ranges:
        yield []
        return
    lo, hi = ranges[0]
    with for_range(b, hi, start=lo, name="tap") as index:
        with range_nest(b, ranges[1:]) as inner:
            yield [index, *inner]


def require_dtype(k: KernelContext, allowed: tuple[DType, ...]) -> DType:
    dtype = k.inputs[0].type.dtype
    if dtype not in allowed:
        raise PegasusError(f"{k.node.op} on {dtype.value} is not supported by the Glow exporter "
                           f"(supported: {', '.join(d.value for d in allowed)})", where=f"layer '{k.node.name}'")
    return dtype


FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64)
INTEGERS = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32, DType.UINT32, DType.INT64,
            DType.UINT64)


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


def _batch_steps(shape: tuple[int, ...], batch: tuple[int, ...], matrix: int) -> list[int]:
    """Flat step of each output batch axis in an operand whose batch axes broadcast to ``batch``."""
    own = (1,) * (len(batch) - len(shape) + 2) + tuple(shape[:-2])
    strides = strides_of(own)
    return [stride * matrix if size > 1 else 0 for size, stride in zip(own, strides)]


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
    steps = (_batch_steps(a_shape, batch, m * depth), _batch_steps(b_shape, batch, depth * n),
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
