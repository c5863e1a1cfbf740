"""Loops over broadcast operands and explicit vector lanes, shared by the element-wise, normalization and copy
kernels: every operand gets its NumPy broadcast strides over the output (``broadcast_strides``), dimensions that
every operand walks contiguously are merged (``coalesce``), and ``strided_loop``/``lane_loop`` run the resulting
nest with constant trip counts, the innermost dimension in vectors of ``vector_lanes`` elements where it is
contiguous."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.ir.dtypes import DType


def broadcast_strides(out_shape: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a tensor of ``shape`` read at every index of ``out_shape`` (NumPy rules)."""
    pad = len(out_shape) - len(shape)
    own = strides_of(tuple(shape))
    return tuple(0 if i < pad or shape[i - pad] == 1 else own[i - pad] for i in range(len(out_shape)))


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions and merge a dimension into the next one when every operand steps over
    the inner one contiguously (outer stride == inner stride * inner size)."""
    dims: list[tuple[int, list[int]]] = []
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        steps = [s[axis] for s in strides]
        if dims and all(outer == inner * size for outer, inner in zip(dims[-1][1], steps)):
            dims[-1] = (dims[-1][0] * size, steps)
        else:
            dims.append((size, steps))
    return [size for size, _ in dims], [[steps[k] for _, steps in dims] for k in range(len(strides))]


def offset(b: ir.IRBuilder, base: ir.Value, indices: Sequence[ir.Value], strides: Sequence[int]) -> ir.Value:
    """base + Σ index·stride (zero strides skipped, so broadcast dimensions cost nothing)."""
    total = base
    for index, stride in zip(indices, strides):
        if stride:
            term = index if stride == 1 else b.mul(index, const(stride), flags=("nsw",))
            total = term if isinstance(total, ir.Constant) and total.constant == 0 else b.add(
                total, term, flags=("nsw",))
    return total


@contextmanager
def strided_loop(b: ir.IRBuilder, shape: Sequence[int], strides: Sequence[Sequence[int]],
                 bases: Sequence[ir.Value] | None = None) -> Iterator[list[ir.Value]]:
    """A loop nest over ``shape`` yielding, per operand, base + Σ index·stride (a flat element index)."""
    sizes, merged = coalesce(shape, strides)
    bases = list(bases) if bases is not None else [const(0)] * len(strides)
    with loop_nest(b, sizes) as indices:
        yield [offset(b, base, indices, steps) for base, steps in zip(bases, merged)]


@contextmanager
def broadcast_loop(b: ir.IRBuilder, out: TensorRef, operands: Sequence[TensorRef]) -> Iterator[list[ir.Value]]:
    """Loop over ``out``; yields its flat index followed by each operand's broadcast flat index."""
    strides = [out.strides] + [broadcast_strides(out.shape, ref.shape) for ref in operands]
    with strided_loop(b, out.shape, strides) as flats:
        yield flats


def lane_loop(b: ir.IRBuilder, shape: Sequence[int], strides: Sequence[Sequence[int]], lanes: int,
              body: Callable[[list[ir.Value], int], None], bases: Sequence[ir.Value] | None = None) -> None:
    """``strided_loop`` with the innermost dimension in chunks of ``lanes`` elements: body(flats, lanes) for
    each whole chunk, then body(flats, 1) for each element left, when the first operand (the output) walks
    that dimension contiguously and every other one contiguously or not at all (stride 0: one element for
    the chunk). Otherwise (or lanes 1) body(flats, 1) for every element. Explicit vectors leave LLVM's loop
    vectoriser nothing to do: no run-time overlap checks, no scalar copies of the loop, smaller functions; the
    vector loop is kept rolled (memory-bound: unrolled 8 times it only made DenseNet-121's code bigger)."""
    sizes, merged = coalesce(shape, strides)
    bases = list(bases) if bases is not None else [const(0)] * len(strides)
    if lanes == 1 or not sizes or sizes[-1] < lanes or merged[0][-1] != 1 or any(s[-1] > 1 for s in merged):
        with loop_nest(b, sizes) as indices:
            body([offset(b, base, indices, steps) for base, steps in zip(bases, merged)], 1)
        return
    *outer, inner = sizes
    chunks, rest = divmod(inner, lanes)
    with loop_nest(b, outer) as indices:
        rows = [offset(b, base, indices, steps[:-1]) for base, steps in zip(bases, merged)]
        for count, width, start in ((chunks, lanes, 0), (rest, 1, chunks * lanes)):
            if count == 0:
                continue
            with for_range(b, count, name="lane" if width > 1 else "rest", unroll=width == 1) as i:
                position = b.add(b.mul(i, const(width), flags=("nsw",)), const(start), flags=("nsw",)) \
                    if (width, start) != (1, 0) else i
                body([offset(b, row, [position], steps[-1:]) for row, steps in zip(rows, merged)], width)


def splat(b: ir.IRBuilder, scalar: ir.Value, lanes: int) -> ir.Value:
    """``scalar`` in every one of ``lanes`` lanes."""
    one = b.insert_element(ir.Constant(ir.VectorType(scalar.type, 1), None), scalar, const(0))
    return b.shuffle_vector(one, one, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def load_lanes(b: ir.IRBuilder, ref: TensorRef, flat: ir.Value, lanes: int, stride: int) -> ir.Value:
    """``lanes`` elements of ``ref`` from ``flat`` (stride 1), or one element repeated (stride 0); lanes 1: the
    element itself (not a vector)."""
    if lanes == 1:
        return ref.load(b, flat)
    if stride == 0:
        return splat(b, ref.load(b, flat), lanes)
    return b.load(b.bitcast(ref.address(b, flat), ir.VectorType(ref.element, lanes).as_pointer()),
                  align=ref.type.dtype.itemsize)


def store_lanes(b: ir.IRBuilder, ref: TensorRef, flat: ir.Value, value: ir.Value) -> None:
    """Store ``value`` (an element, or a vector of contiguous elements) at ``flat``."""
    if not isinstance(value.type, ir.VectorType):
        ref.store(b, value, flat)
        return
    b.store(value, b.bitcast(ref.address(b, flat), value.type.as_pointer()), align=ref.type.dtype.itemsize)


def vector_lanes(target, element: ir.Type) -> int:
    """Lanes of ``element`` the explicit-vector loops use on ``target``: its vector registers' on hosted CPUs;
    1 on Cortex-M, whose loops stay as they are (LLVM picks their vectors, or none)."""
    return 1 if target.is_cortex_m else simd_of(target).lanes(element)


def float_lanes(target, compute: DType, refs: Sequence[TensorRef]) -> int:
    """``vector_lanes`` for an element-wise layer whose tensors are all stored as float ``compute`` (float32 or
    float64: float16 goes through conversions element by element), else 1."""
    if compute not in (DType.FLOAT32, DType.FLOAT64) or any(ref.type.dtype is not compute for ref in refs):
        return 1
    return vector_lanes(target, llvm_type(compute))
