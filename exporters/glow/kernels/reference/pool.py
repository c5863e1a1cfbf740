"""Emitters for pooling (MaxPool with its optional Indices, AveragePool, GlobalMaxPool,
GlobalAveragePool).

Windowed pooling reuses Conv's sweep (conv.py): each plane's output row is cut into vector tiles of
interior positions (every tap inside the input, so the window is a fixed unrolled loop of vector loads,
strided when the pooling stride is) and border positions whose tap ranges exclude the padding. The
geometry is ``MaxPool.geometry``/``AveragePool.geometry``. Global pooling reduces each contiguous plane
in vector chunks and then across lanes.

Semantics follow the reference kernels: a max keeps the first maximum and, like numpy, propagates the
first NaN; Indices are flat positions in X (row-major, or column-major with storage_order=1) counting
the (n, c) plane; the average divides by the taps inside the input, or inside the explicit pads with
count_include_pad, never counting ceil_mode's overrun.

Channels-last layers (``channels_last``), and channels-last convolutions fused with their pooling, go
to pool_channels_last.py, except MaxPool with Indices (which runs channels first, between transposes).

A convolution fused with its pooling (exporters/glow/fuse.py) is conv_pool.py's: it calls the pooling
emitters here on its staged output, or reduces the pooled tiles from registers.
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, INTEGERS, require_dtype
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.pooling import (
    output_flat,
    pool_tile_width,
    tap_coordinates,
    window_count,
    window_taps,
)
from pegasus.exporters.glow.llvm.simd import simd_of, vconst
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.tiles import pieces, range_nest
from pegasus.exporters.glow.llvm.types import Value
from pegasus.exporters.glow.llvm.windows import Axis, Tile, axes_of, sweep
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Node
from pegasus.ops.pool import AveragePool, MaxPool
from pegasus.ops.spatial import prod

I64 = ir.IntType(64)


def _window_pool(k: KernelContext, geometry, visit) -> None:
    """Sweep every (n, c) plane of X; visit(num, axes, plane, tile) computes one tile."""
    x = k.inputs[0]
    num = Numeric(k.builder, x.type.dtype)
    axes = axes_of(geometry(k.attrs, x.shape), x.shape[2:])
    b = k.builder
    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        sweep(b, axes, pool_tile_width(k.target, num), lambda tile: visit(num, axes, plane, tile))


# ----------------------------------------------------------------------------------------------------
# MaxPool


class _Argmax:
    """The Indices output of MaxPool: flat positions in X of the running maxima (i64 vectors)."""

    def __init__(self, b: ir.IRBuilder, ref: TensorRef, x: TensorRef, column_major: bool, stride: int, lanes: int):
        sizes = x.shape[2:]
        self.b, self.ref, self.plane_size = b, ref, prod(sizes)
        self.weights = [prod(sizes[:i]) for i in range(len(sizes))] if column_major else list(strides_of(sizes))
        self.lanes = vconst([lane * stride * self.weights[-1] for lane in range(lanes)], I64)
        self.slot = entry_alloca(b, ir.VectorType(I64, lanes))

    def position(self, plane: Value, coordinates: list[Value]) -> Value:
        b = self.b
        flat = affine(b, 0, (plane, self.plane_size), *zip(coordinates, self.weights))
        wide = Numeric(b, DType.INT64).splat(b.sext(flat, I64), self.lanes.type.count)
        return b.add(wide, self.lanes)

    def set(self, value: Value) -> None:
        self.b.store(value, self.slot)

    def update(self, wins: Value, position: Value) -> None:
        self.set(self.b.select(wins, position, self.b.load(self.slot)))

    def store(self, flat: Value) -> None:
        Numeric(self.b, DType.INT64).store(self.ref, flat, self.b.load(self.slot))


def _max_tile(k: KernelContext, num: Numeric, axes: list[Axis], plane: Value, tile: Tile) -> None:
    b = num.b
    x, y = k.inputs[0], k.outputs[0]
    indices = k.outputs[1] if len(k.outputs) > 1 else None
    best = Accumulators(num, 1, tile.width)
    best.set(0, num.lowest(tile.width))
    argmax = None
    if indices is not None:   # ties and all-padding windows keep tap 0, as numpy's argmax does
        argmax = _Argmax(b, indices, x, k.attrs.storage_order == 1, axes[-1].stride, tile.width)
        argmax.set(argmax.position(plane, tap_coordinates(b, axes, tile, [0] * len(axes))))
    x_strides = strides_of(x.shape[2:])
    with range_nest(b, window_taps(b, axes, tile)) as taps:
        coordinates = tap_coordinates(b, axes, tile, taps)
        flat = affine(b, 0, (plane, prod(x.shape[2:])), *zip(coordinates, x_strides))
        value = num.load(x, flat, tile.width, axes[-1].stride)
        current = best.get(0)
        if argmax is None:
            best.set(0, num.maximum(value, current))
        else:
            wins = num.wins(value, current)
            best.set(0, b.select(wins, value, current))
            argmax.update(wins, argmax.position(plane, coordinates))
    out = output_flat(b, y, plane, tile)
    num.store(y, out, best.get(0))
    if argmax is not None:
        argmax.store(out)


def _no_indices(node: Node, graph) -> bool:
    """MaxPool runs channels last natively unless it has Indices (flat channels-first positions)."""
    return len(node.outputs) < 2 or not node.outputs[1]


@emitter("MaxPool", channels_last=_no_indices)
def max_pool(k: KernelContext) -> None:
    if k.attrs.channels_last:
        pool_channels_last.max_pool(k)
        return
    require_dtype(k, FLOATS + INTEGERS)
    if pool_plane.emit(k, MaxPool.geometry, simd_of(k.target), False) or \
            pool_plane.emit_strided_max(k, MaxPool.geometry, simd_of(k.target)):
        return
    _window_pool(k, MaxPool.geometry, lambda num, axes, plane, tile: _max_tile(k, num, axes, plane, tile))


# ----------------------------------------------------------------------------------------------------
# AveragePool


def _divisor(num: Numeric, axes: list[Axis], tile: Tile, pads_end: tuple[int, ...], include_pads: bool) -> Value:
    """Taps counted by the average of the tile's positions (``window_count``); at least 1."""
    b = num.b
    count = window_count(b, axes, tile, pads_end, include_pads)
    count = b.select(b.icmp_signed("<", count, const(1)), const(1), count)
    return num.from_int(count, tile.width)


def _average_tile(k: KernelContext, num: Numeric, axes: list[Axis], plane: Value, tile: Tile,
                  pads_end: tuple[int, ...]) -> None:
    b = num.b
    x, y = k.inputs[0], k.outputs[0]
    total = Accumulators(num, 1, tile.width)
    total.set(0, num.constant(0, tile.width))
    x_strides = strides_of(x.shape[2:])
    with range_nest(b, window_taps(b, axes, tile)) as taps:
        flat = affine(b, 0, (plane, prod(x.shape[2:])), *zip(tap_coordinates(b, axes, tile, taps), x_strides))
        total.set(0, num.add(total.get(0), num.load(x, flat, tile.width, axes[-1].stride)))
    divisor = _divisor(num, axes, tile, pads_end, bool(k.attrs.count_include_pad))
    num.store(y, output_flat(b, y, plane, tile), num.div(total.get(0), divisor))


@emitter("AveragePool", channels_last=True)
def average_pool(k: KernelContext) -> None:
    if k.attrs.channels_last:
        pool_channels_last.average_pool(k)
        return
    require_dtype(k, FLOATS)
    if pool_plane.emit(k, AveragePool.geometry, simd_of(k.target), True, bool(k.attrs.count_include_pad)):
        return
    pads_end = AveragePool.geometry(k.attrs, k.inputs[0].shape).pads_end
    _window_pool(k, AveragePool.geometry,
                 lambda num, axes, plane, tile: _average_tile(k, num, axes, plane, tile, pads_end))


# ----------------------------------------------------------------------------------------------------
# Global pooling


def _reduce_plane(num: Numeric, x: TensorRef, base: Value, size: int, chunk: int, combine, identity) -> Value:
    """combine() over x[base:base+size] as vector partial results, then across lanes (<1 x T>)."""
    b = num.b
    full = size // chunk
    parts = []
    if full:
        acc = Accumulators(num, 1, chunk)
        acc.set(0, num.load(x, base, chunk))
        with for_range(b, full, start=1, name="chunk") as i:
            acc.set(0, combine(acc.get(0), num.load(x, affine(b, 0, (base, 1), (i, chunk)), chunk)))
        parts.append(num.reduce(acc.get(0), combine, identity))
    for first, width in pieces(size - full * chunk, chunk):
        parts.append(num.reduce(num.load(x, affine(b, full * chunk + first, (base, 1)), width), combine, identity))
    result = parts[0]
    for part in parts[1:]:
        result = combine(result, part)
    return result


def _global_pool(k: KernelContext, allowed, reducer, scalar_chunk: int) -> None:
    """One reduction per (n, c) plane, in chunks of four vectors (``scalar_chunk`` elements on a
    scalar FPU, where vector selects would be expanded lane by lane)."""
    x, y = k.inputs[0], k.outputs[0]
    num = Numeric(k.builder, require_dtype(k, allowed))
    b = k.builder
    size = prod(x.shape[2:])
    lanes = simd_of(k.target).lanes(num.compute)
    chunk = min(size, 4 * lanes if lanes > 1 else scalar_chunk)
    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        num.store(y, plane, reducer(num, affine(b, 0, (plane, size)), size, chunk))


@emitter("GlobalMaxPool", channels_last=True)
def global_max_pool(k: KernelContext) -> None:
    if k.attrs.channels_last:
        pool_channels_last.global_max_pool(k)
        return
    x = k.inputs[0]

    def reducer(num: Numeric, base: Value, size: int, chunk: int) -> Value:
        identity = num.lowest(1).constant[0]
        return _reduce_plane(num, x, base, size, chunk, lambda acc, v: num.maximum(v, acc), identity)

    _global_pool(k, FLOATS + INTEGERS, reducer, 1)


@emitter("GlobalAveragePool", channels_last=True)
def global_average_pool(k: KernelContext) -> None:
    if k.attrs.channels_last:
        pool_channels_last.global_average_pool(k)
        return
    x = k.inputs[0]

    def reducer(num: Numeric, base: Value, size: int, chunk: int) -> Value:
        total = _reduce_plane(num, x, base, size, chunk, num.add, ir.Constant(num.compute, 0.0))
        return num.div(total, num.constant(size, 1))

    _global_pool(k, FLOATS, reducer, 4)


# the channels-last kernels build on this file (imported last: they import it)
from pegasus.exporters.glow.kernels.reference import pool_channels_last, pool_plane  # noqa: E402
