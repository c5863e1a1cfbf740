"""Emitters for MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool on channels-last activations
(``channels_last``: X is (N, D1..Dn, C), Y is (N, O1..On, C) — pegasus/ops/layout.py), so channels-last
models pool without transposes.

Channels are contiguous, so every load is a vector of channels: for each output position the kernel
computes the in-bounds tap range of each axis once (conv.py's ``Axis``: padding is never read, and
ceil_mode's overrun is clamped like padding), then reduces a block of channels — as many vectors as the
accumulator registers hold — over those taps. Global pooling reduces every position into a block of
channel vectors, with a few interleaved partial results so consecutive additions do not wait on each
other. Semantics are pool.py's: the max propagates NaN, the average divides by the taps inside the input
(or inside the explicit pads with count_include_pad, never ceil_mode's overrun; pool.py's
``counted_taps``).

``emit_conv_pool`` computes a channels-last convolution fused with its pooling (exporters/glow/fuse.py)
without storing the convolution: a register tile of pooled outputs (positions along the row times a block
of channels) is reduced, pooling tap by pooling tap, from conv_channels_last.py's ``correlate`` tiles at
the positions that tap reads (every pool-stride-th convolution output), each through the fused
element-wise epilogue. Overlapping windows (stride < kernel) recompute the shared convolution values.
"""

from __future__ import annotations

from collections.abc import Callable

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, INTEGERS, require_dtype
from pegasus.exporters.glow.kernels.reference.conv_channels_last import Block, Tile, conv_correlation, correlate, plan
from pegasus.exporters.glow.kernels.reference.epilogue import Epilogue
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.pooling import counted_taps
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tiles import for_tiles, pieces, range_nest
from pegasus.exporters.glow.llvm.types import Value
from pegasus.exporters.glow.llvm.windows import Axis, axes_of
from pegasus.ir.graph import Node
from pegasus.ops.layout import first_shape
from pegasus.ops.pool import AveragePool, MaxPool
from pegasus.ops.spatial import prod

#: (num, accumulated, loaded) -> combined
Combine = Callable[[Numeric, Value, Value], Value]


def _block_size(k: KernelContext, num: Numeric, channels: int, sets: int = 1) -> int:
    """Channels per block: as many vectors as the accumulator registers hold (``sets`` copies each)."""
    simd = simd_of(k.target)
    lanes = simd.lanes(num.compute)
    needed = len(pieces(channels, lanes))
    most = max(1, min(needed, simd.accumulators // sets))
    vectors = -(-needed // -(-needed // most))
    return min(channels, vectors * lanes)


def _maximum(num: Numeric, best: Value, value: Value) -> Value:
    return num.maximum(value, best)


def _add(num: Numeric, total: Value, value: Value) -> Value:
    return num.add(total, value)


def _window_pool(k: KernelContext, axes: list[Axis], identity: Callable[[Numeric, int], Value], combine: Combine,
                 finish: Callable[[Numeric, list[Value], Value], Value]) -> None:
    """Y[n, o..., c] = finish(reduce over the in-bounds taps of X[n, o*stride - pad + k*dilation..., c]):
    per output position, the taps' ranges, then blocks of channel vectors reduced over them.
    ``finish(num, positions, value)`` turns a reduced vector into the output."""
    x, y = k.inputs[0], k.outputs[0]
    b = k.builder
    num = Numeric(b, x.type.dtype)
    channels = x.shape[-1]
    lanes = simd_of(k.target).lanes(num.compute)
    x_strides, y_strides = x.strides[1:-1], y.strides[1:-1]
    with loop_nest(b, [x.shape[0], *(axis.out for axis in axes)]) as (batch, *position):
        ranges = [axis.taps(b, o) for axis, o in zip(axes, position)]
        origins = [axis.origin(b, o) for axis, o in zip(axes, position)]
        x_base = affine(b, 0, (batch, x.strides[0]), *zip(origins, x_strides))
        y_base = affine(b, 0, (batch, y.strides[0]), *zip(position, y_strides))

        def block(c0: Value, count: int) -> None:
            widths = pieces(count, lanes)
            accs = [Accumulators(num, 1, width) for _, width in widths]
            for acc, (_, width) in zip(accs, widths):
                acc.set(0, identity(num, width))
            with range_nest(b, ranges) as taps:
                flat = affine(b, 0, (x_base, 1), (c0, 1),
                              *((tap, axis.dilation * s) for tap, axis, s in zip(taps, axes, x_strides)))
                for acc, (offset, width) in zip(accs, widths):
                    acc.set(0, combine(num, acc.get(0), num.load(x, affine(b, offset, (flat, 1)), width)))
            for acc, (offset, _) in zip(accs, widths):
                num.store(y, affine(b, offset, (y_base, 1), (c0, 1)), finish(num, position, acc.get(0)))

        for_tiles(b, 0, channels, _block_size(k, num, channels), block)


def _axes(k: KernelContext, geometry) -> list[Axis]:
    x = k.inputs[0]
    return axes_of(geometry(k.attrs, first_shape(x.shape, True)), x.shape[1:-1])


def max_pool(k: KernelContext) -> None:
    require_dtype(k, FLOATS + INTEGERS)
    _window_pool(k, _axes(k, MaxPool.geometry), lambda num, lanes: num.lowest(lanes), _maximum,
                 lambda num, position, value: value)


def average_pool(k: KernelContext) -> None:
    require_dtype(k, FLOATS)
    axes = _axes(k, AveragePool.geometry)
    pads_end = AveragePool.geometry(k.attrs, first_shape(k.inputs[0].shape, True)).pads_end
    include = bool(k.attrs.count_include_pad)
    b = k.builder

    _window_pool(k, axes, lambda num, lanes: num.constant(0, lanes), _add, _mean(b, axes, pads_end, include))


def _mean(b, axes: list[Axis], pads_end: tuple[int, ...], include: bool):
    """finish(num, position, total) of an average: total over the taps it counts (at least 1)."""
    def finish(num: Numeric, position: list[Value], total: Value) -> Value:
        count = counted_taps(b, axes, position, pads_end, include)
        count = b.select(b.icmp_signed("<", count, const(1)), const(1), count)
        return num.div(total, num.from_int(count, total.type.count))

    return finish


# ----------------------------------------------------------------------------------------------------
# Global pooling


def _global_pool(k: KernelContext, identity: Callable[[Numeric, int], Value], combine: Combine,
                 finish: Callable[[Numeric, Value, int], Value]) -> None:
    """Y[n, c] = finish(reduce of X[n, s, c] over every position s, size): per block of channel vectors,
    ``sets`` interleaved partial results over consecutive positions, combined at the end."""
    x, y = k.inputs[0], k.outputs[0]
    b = k.builder
    num = Numeric(b, x.type.dtype)
    channels, size = x.shape[-1], prod(x.shape[1:-1])
    lanes = simd_of(k.target).lanes(num.compute)
    budget = simd_of(k.target).accumulators
    sets = max(1, min(4, size, budget // len(pieces(channels, lanes))))
    full = size // sets

    with for_range(b, x.shape[0], name="n") as batch:
        def block(c0: Value, count: int) -> None:
            widths = pieces(count, lanes)
            accs = [Accumulators(num, sets, width) for _, width in widths]
            for acc, (_, width) in zip(accs, widths):
                for s in range(sets):
                    acc.set(s, identity(num, width))

            def positions(first: Value, used: int) -> None:
                for s in range(used):
                    flat = affine(b, 0, (batch, x.strides[0]), (first, channels), (c0, 1))
                    for acc, (offset, width) in zip(accs, widths):
                        value = num.load(x, affine(b, offset + s * channels, (flat, 1)), width)
                        acc.set(s, combine(num, acc.get(s), value))

            with for_range(b, full, name="position") as chunk:
                positions(affine(b, 0, (chunk, sets)), sets)
            if size % sets:
                positions(const(full * sets), size % sets)
            for acc, (offset, _) in zip(accs, widths):
                value = acc.get(0)
                for s in range(1, sets):
                    value = combine(num, value, acc.get(s))
                num.store(y, affine(b, offset, (batch, y.strides[0]), (c0, 1)), finish(num, value, size))

        for_tiles(b, 0, channels, _block_size(k, num, channels, sets), block)


def global_max_pool(k: KernelContext) -> None:
    require_dtype(k, FLOATS + INTEGERS)
    _global_pool(k, lambda num, lanes: num.lowest(lanes), _maximum, lambda num, value, size: value)


def global_average_pool(k: KernelContext) -> None:
    require_dtype(k, FLOATS)
    _global_pool(k, lambda num, lanes: num.constant(0, lanes), _add,
                 lambda num, value, size: num.div(value, num.constant(size, value.type.count)))


# ----------------------------------------------------------------------------------------------------
# Conv fused with pooling


def _pooled_runs(conv: Axis, pool: Axis, width: int) -> list[tuple[int, int, int, bool]]:
    """(start, tiles, positions, interior) runs of pooled tiles of ``width`` along the row: a tile is
    interior when every pooling tap of its positions reads a convolution output whose every tap reads
    inside the input; consecutive interior tiles form one run."""
    first, end = conv.interior()
    runs: list[list] = []
    for start in range(0, pool.out, width):
        count = min(width, pool.out - start)
        read = [(start + p) * pool.stride - pool.pad + t * pool.dilation
                for p in range(count) for t in range(pool.kernel)]
        interior = count == width and all(first <= o < end for o in read)
        previous = runs[-1] if runs else None
        if interior and previous and previous[3] and previous[0] + previous[1] * width == start:
            previous[1] += 1
        else:
            runs.append([start, 1, count, interior])
    return [tuple(run) for run in runs]


def emit_conv_pool(k: KernelContext, epilogue: Epilogue, pool: Node) -> None:
    """A channels-last Conv layer (k: the Conv node, its inputs, and the pooling's output Y) fused with its
    element-wise consumers (``epilogue``) and the channels-last MaxPool or AveragePool node ``pool``."""
    b = k.builder
    num = Numeric(b, require_dtype(k, FLOATS))
    cr = conv_correlation(k, epilogue)
    y = k.outputs[0]
    conv_out = tuple(axis.out for axis in cr.axes)
    average = pool.op == "AveragePool"
    geometry = (AveragePool if average else MaxPool).geometry(pool.attrs, (1, 1) + conv_out)
    axes = axes_of(geometry, conv_out)
    *outer_pool, row = axes
    tiling = plan(simd_of(k.target), num, cr, row.out)
    identity = (lambda width: num.constant(0, width)) if average else num.lowest
    finish = _mean(b, axes, geometry.pads_end, bool(pool.attrs.count_include_pad)) if average else None

    def pooled_tile(batch: Value, block: Block, position: list[Value], first: Value, count: int,
                    start: int | None) -> None:
        pooled = [Accumulators(num, count, width) for _, width in block.pieces]
        for acc, (_, width) in zip(pooled, block.pieces):
            for p in range(count):
                acc.set(p, identity(width))
        with range_nest(b, [axis.taps(b, o) for axis, o in zip(outer_pool, position)]) as taps:
            conv_outer = [affine(b, 0, (axis.origin(b, o), 1), (t, axis.dilation))
                          for axis, o, t in zip(outer_pool, position, taps)]
            for t in range(row.kernel):
                inside = [p for p in range(count) if start is None
                          or 0 <= (start + p) * row.stride - row.pad + t * row.dilation < row.size]
                if not inside:
                    continue
                conv_first = affine(b, t * row.dilation - row.pad, (first, row.stride))
                conv_start = None if start is None else start * row.stride - row.pad + t * row.dilation
                accs = correlate(num, cr, batch, block, Tile(conv_outer, conv_first, count, conv_start, row.stride))
                for acc, total in zip(accs, pooled):
                    for p in inside:
                        value = cr.epilogue(num, acc.get(p))
                        total.set(p, num.add(total.get(p), value) if average else num.maximum(value, total.get(p)))
        base = affine(b, 0, (batch, y.strides[0]), (block.m0, 1), *zip([*position, first], y.strides[1:-1]))
        for p in range(count):
            where = [*position, affine(b, p, (first, 1))]
            for total, (offset, _) in zip(pooled, block.pieces):
                value = total.get(p) if finish is None else finish(num, where, total.get(p))
                num.store(y, affine(b, offset + p * y.strides[-2], (base, 1)), value)

    def sweep(batch: Value, block: Block) -> None:
        with loop_nest(b, [axis.out for axis in outer_pool]) as position:
            for start, tiles, count, interior in _pooled_runs(cr.axes[-1], row, tiling.positions):
                if tiles == 1:
                    pooled_tile(batch, block, position, const(start), count, None if interior else start)
                    continue
                with for_range(b, tiles, name="tile") as t:
                    pooled_tile(batch, block, position, affine(b, start, (t, tiling.positions)), count, None)

    with for_range(b, cr.x.shape[0], name="n") as batch:
        tiling.blocks(b, cr, lambda block: sweep(batch, block))
