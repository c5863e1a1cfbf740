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

``emit_conv_pool`` computes a convolution fused with its pooling (exporters/glow/fuse.py) without ever
storing the convolution: a register tile of pooled outputs (a block of channels times a vector of
pooled positions along the row) is reduced from Conv's ``correlate`` tiles, one per pooling tap, each
through the fused element-wise epilogue. Overlapping windows (stride < kernel) recompute the shared
convolution values. Along the row, pooling tap t reads convolution outputs o*pool_stride - pool_pad +
t*pool_dilation, i.e. the input with stride conv_stride*pool_stride, shifted by t: the tiles and the
lanes that fall in the pooling's padding are decided statically, as Conv's edge tiles are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llvmlite import ir

from pegasus.exporters.glow.kernels.conv import (
    Axis,
    Correlation,
    Tile,
    axes_of,
    block_channels,
    conv_correlation,
    conv_workspace,
    correlate,
    edge_of,
    emit_conv,
    narrow_tail,
    pointwise,
    row_runs,
    row_taps_bytes,
    row_taps_correlation,
    sweep,
    sweep_row,
    sweep_tiles,
    tile_positions,
    tile_shape,
)
from pegasus.exporters.glow.kernels.epilogue import Epilogue, residual_prefetched
from pegasus.exporters.glow.kernels.linear import (
    BIT,
    FLOATS,
    INTEGERS,
    Accumulators,
    Numeric,
    Value,
    affine,
    for_tiles,
    pieces,
    power_of_two_below,
    range_nest,
    require_dtype,
    simd_of,
    vconst,
)
from pegasus.exporters.glow.kernels.registry import (
    KernelContext,
    TensorRef,
    emitter,
    entry_alloca,
    group_emitter,
    piece,
    strides_of,
)
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv
from pegasus.ops.pool import AveragePool, MaxPool
from pegasus.ops.spatial import prod

I64 = ir.IntType(64)


def _tile_width(k: KernelContext, num: Numeric) -> int:
    """Output positions per tile: two vectors, or one position on a scalar FPU (where the selects
    of a vector max would be expanded lane by lane through integer registers)."""
    lanes = simd_of(k.target).lanes(num.compute)
    return 2 * lanes if lanes > 1 else 1


def _taps(b: ir.IRBuilder, axes: list[Axis], tile: Tile) -> list[tuple[Value, Value]]:
    """Tap ranges of the tile inside the input, outer axes first."""
    *outer, last = axes
    return [a.taps(b, o) for a, o in zip(outer, tile.outer)] + [tile.last_taps or (const(0), const(last.kernel))]


def _coordinates(b: ir.IRBuilder, axes: list[Axis], tile: Tile, taps: list[Value | int]) -> list[Value]:
    """Input coordinates read by the tile's first position at the given taps."""
    positions = [*tile.outer, tile.first]
    return [affine(b, 0, (a.origin(b, o), 1), (t, a.dilation)) for a, o, t in zip(axes, positions, taps)]


def _output_flat(b: ir.IRBuilder, y: TensorRef, plane: Value, tile: Tile) -> Value:
    spatial = strides_of(y.shape[2:])
    return affine(b, 0, (plane, prod(y.shape[2:])), (tile.first, 1), *zip(tile.outer, spatial))


def _window_pool(k: KernelContext, geometry, visit) -> None:
    """Sweep every (n, c) plane of X; visit(num, axes, plane, tile) computes one tile."""
    x = k.inputs[0]
    num = Numeric(k.builder, x.type.dtype)
    axes = axes_of(geometry(k.attrs, x.shape), x.shape[2:])
    b = k.builder
    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        sweep(b, axes, _tile_width(k, num), lambda tile: visit(num, axes, plane, tile))


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
        argmax.set(argmax.position(plane, _coordinates(b, axes, tile, [0] * len(axes))))
    x_strides = strides_of(x.shape[2:])
    with range_nest(b, _taps(b, axes, tile)) as taps:
        coordinates = _coordinates(b, axes, tile, taps)
        flat = affine(b, 0, (plane, prod(x.shape[2:])), *zip(coordinates, x_strides))
        value = num.load(x, flat, tile.width, axes[-1].stride)
        current = best.get(0)
        if argmax is None:
            best.set(0, num.maximum(value, current))
        else:
            wins = num.wins(value, current)
            best.set(0, b.select(wins, value, current))
            argmax.update(wins, argmax.position(plane, coordinates))
    out = _output_flat(b, y, plane, tile)
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


def _counted_bounds(axis: Axis, end_pad: int, include_pads: bool) -> tuple[int, int]:
    """[lower, upper) of the positions an average counts: the input, or the input and its explicit pads
    with count_include_pad (never the overrun of ceil_mode)."""
    return (-axis.pad, axis.size + end_pad) if include_pads else (0, axis.size)


def counted_taps(b: ir.IRBuilder, axes: list[Axis], outer: list[Value], pads_end: tuple[int, ...],
                 include_pads: bool) -> Value:
    """Counted taps of ``axes`` (e.g. the outer axes, all but the last) at the positions ``outer``,
    multiplied (i32)."""
    count: Value = const(1)
    for axis, o, end_pad in zip(axes, outer, pads_end):
        lo, hi = axis.taps(b, o, *_counted_bounds(axis, end_pad, include_pads))
        count = b.mul(count, b.sub(hi, lo))
    return count


def window_count(b: ir.IRBuilder, axes: list[Axis], tile: Tile, pads_end: tuple[int, ...],
                 include_pads: bool) -> Value:
    """Taps counted by the average of the tile's positions (``_counted_bounds``), i32, possibly 0;
    shared with the integer average (integer_elementwise.py)."""
    *outer, last = axes
    count = counted_taps(b, outer, tile.outer, pads_end, include_pads)
    if tile.last_taps is None:
        return b.mul(count, const(last.kernel))
    lo, hi = last.taps(b, tile.first, *_counted_bounds(last, pads_end[-1], include_pads))
    return b.mul(count, b.sub(hi, lo))


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
    with range_nest(b, _taps(b, axes, tile)) as taps:
        flat = affine(b, 0, (plane, prod(x.shape[2:])), *zip(_coordinates(b, axes, tile, taps), x_strides))
        total.set(0, num.add(total.get(0), num.load(x, flat, tile.width, axes[-1].stride)))
    divisor = _divisor(num, axes, tile, pads_end, bool(k.attrs.count_include_pad))
    num.store(y, _output_flat(b, y, plane, tile), num.div(total.get(0), divisor))


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


# ----------------------------------------------------------------------------------------------------
# Conv fused with pooling


@dataclass(frozen=True)
class ConvPool:
    """A convolution (``conv``: its Y is the pooled output, same batch and channels) pooled over
    ``pool`` axes (sizes = the convolution's output) by max or average, through ``conv.epilogue``, in
    tiles of ``width`` pooled positions along the row."""

    conv: Correlation
    pool: list[Axis]
    average: bool
    pads_end: tuple[int, ...]
    include_pads: bool
    width: int
    prefetch: bool = False      # correlate's, on x86-64

    @property
    def span(self) -> int:
        """Convolution outputs along the row that a tile of pooled outputs reads."""
        return span_of(self.pool[-1], self.width)

    def conv_start(self, start: int) -> int:
        last = self.pool[-1]
        return start * last.stride - last.pad

    def lanes_at(self, tap: int) -> list[int]:
        """Per pooled lane, the lane of the convolution tile its pooling tap ``tap`` reads."""
        last = self.pool[-1]
        return [lane * last.stride + tap * last.dilation for lane in range(self.width)]

    def lanes_in(self, tap: int, start: int, bounds: tuple[int, int] | None = None) -> tuple[bool, ...]:
        """Per lane of the tile at ``start``: whether pooling tap ``tap`` reads a position in ``bounds``
        (default: the convolution's output) for a pooled output inside the row."""
        last = self.pool[-1]
        lower, upper = bounds or (0, last.size)
        return tuple(start + lane < last.out and lower <= self.conv_start(start + lane) + tap * last.dilation < upper
                     for lane in range(self.width))

    def interior(self, start: int) -> bool:
        """Every pooling tap of every lane reads a convolution output, and every convolution tap of the
        tile reads inside the input."""
        return (all(all(self.lanes_in(t, start)) for t in range(self.pool[-1].kernel))
                and edge_of(self.conv.axes[-1], self.conv_start(start), self.span) is None)


def span_of(pool: Axis, width: int) -> int:
    return (width - 1) * pool.stride + (pool.kernel - 1) * pool.dilation + 1


def pooled_tile(simd, num: Numeric, conv: Correlation, pool: Axis) -> tuple[int, int]:
    """(pooled positions, channels) of a fused tile: the power of two of pooled positions that fits in the
    convolution row tile Conv alone would use (never more than the pooled row: odd or overhanging
    vectors make poor code), and as many channels as the convolution accumulators allow. The pooled
    accumulators are not counted: they are touched only between the convolution's inner loops, where
    spilling them costs little (LeNet: as fast as unfused on the host, and fewer instructions on
    Cortex-M7, than when they shrink the channel block)."""
    positions = tile_positions(simd, num, conv.axes[-1].out)
    width = max(1, min(pool.out, (positions - 1 - (pool.kernel - 1) * pool.dilation) // pool.stride + 1))
    width = power_of_two_below(width)
    return width, block_channels(simd, num, conv.out_group, span_of(pool, width))


def _pooled_lanes(vector: int, pool: Axis) -> int:
    """Pooled positions of a vector of convolution outputs when the windows tile the row (stride = kernel, no
    dilation): a pooled row's rest of whole such runs is one narrower last tile (conv.py ``narrow_tail``; VGG's
    3x3 128@112 + 2x2 max pool, 56 pooled: 16 + 16 + 16 + 8 rather than four overlapping tiles of 16, which
    recomputed an eighth: 17.0 -> 15.8 ms in the model); 0 otherwise."""
    whole = pool.stride == pool.kernel and pool.dilation == 1 and vector % pool.stride == 0
    return vector // pool.stride if whole else 0


def _pool_combine(num: Numeric, cp: ConvPool, pooled: Value, value: Value, lanes: tuple[bool, ...] | None) -> Value:
    """pooled ⊕ value (max, or sum for an average) in the lanes set in ``lanes`` (all if None)."""
    combined = num.add(pooled, value) if cp.average else num.maximum(value, pooled)
    if lanes is None or all(lanes):
        return combined
    return num.b.select(vconst(lanes, BIT), combined, pooled)


def _pooled_divisor(num: Numeric, cp: ConvPool, outer: list[Value], start: int | None) -> Value:
    """Per lane, the taps an average counts: the outer axes' counts times the row's (all its taps in
    interior tiles, counted lane by lane in edge tiles); at least 1."""
    b = num.b
    width, last = cp.width, cp.pool[-1]
    outer_count = b.sitofp(counted_taps(b, cp.pool[:-1], outer, cp.pads_end, cp.include_pads), num.compute)
    if start is None:
        per_lane = [last.kernel] * width
    else:
        bounds = _counted_bounds(last, cp.pads_end[-1], cp.include_pads)
        per_lane = [sum(taps) for taps in zip(*(cp.lanes_in(t, start, bounds) for t in range(last.kernel)))]
    lane_counts = ir.Constant(num.vector(width), [ir.Constant(num.compute, float(c)) for c in per_lane])
    count = num.mul(num.splat(outer_count, width), lane_counts)
    one = num.constant(1, width)
    return b.select(b.fcmp_ordered("<", count, one), one, count)


def _conv_pool_tile(num: Numeric, cp: ConvPool, batch: Value, group: Value, local0: Value, channels: int,
                    position: list[Value], first: Value, start: int | None) -> None:
    """Pooled Y[batch, channels local0:+channels of the group, position, first:+width]. For each pooling
    tap of the outer axes: the convolution tile of the row that the pooled tile reads (``correlate``,
    then the epilogue), whose lanes each pooling tap of the row picks by a shuffle and folds into the
    pooled accumulators. ``start``: the tile's static start in an edge tile (None: an interior tile)."""
    b = num.b
    cr = cp.conv
    *outer_pool, last = cp.pool
    pooled = Accumulators(num, channels, cp.width)
    for j in range(channels):
        pooled.set(j, num.constant(0, cp.width) if cp.average else num.lowest(cp.width))
    edge = None if start is None else edge_of(cr.axes[-1], cp.conv_start(start), cp.span)
    row_taps = [(t, None if start is None else cp.lanes_in(t, start)) for t in range(last.kernel)]
    row_taps = [(t, lanes) for t, lanes in row_taps if lanes is None or any(lanes)]
    with range_nest(b, [a.taps(b, o) for a, o in zip(outer_pool, position)]) as taps:
        conv_outer = [affine(b, 0, (a.origin(b, o), 1), (t, a.dilation)) for a, o, t in zip(outer_pool, position, taps)]
        conv_first = affine(b, -last.pad, (first, last.stride))
        acc = correlate(num, cr, batch, group, local0, channels, Tile(conv_outer, conv_first, cp.span, edge=edge),
                        cp.prefetch)
        for j in range(channels):
            value = cr.epilogue(num, acc.get(j))
            for t, lanes in row_taps:
                picked = b.shuffle_vector(value, value, vconst(cp.lanes_at(t)))
                pooled.set(j, _pool_combine(num, cp, pooled.get(j), picked, lanes))
    divisor = _pooled_divisor(num, cp, position, start) if cp.average else None
    y = cr.y
    channel0 = affine(b, 0, (group, cr.out_group), (local0, 1))
    y_flat = affine(b, 0, (batch, y.strides[0]), (channel0, y.strides[1]), *zip([*position, first], y.strides[2:]))
    stored = None if start is None else min(cp.width, last.out - start)
    for j in range(channels):
        value = pooled.get(j) if divisor is None else num.div(pooled.get(j), divisor)
        num.store(y, affine(b, j * y.strides[1], (y_flat, 1)), value, stored)


def stages_conv_output(target) -> bool:
    """Whether a fused convolution whose pooling windows overlap computes its output once into a workspace
    (one block of channels at a time) and pools from there: on hosted targets, where the recomputation of
    the shared convolution values costs far more than the workspace (ResNet-50's 7x7 stem and its 3x3
    stride-2 max pool: 2.25 times the convolution, read at stride 4). Cortex-M keeps the RAM."""
    return not target.is_cortex_m


def _overlaps(pool: Node, conv_out: tuple[int, ...]) -> bool:
    geometry = (AveragePool if pool.op == "AveragePool" else MaxPool).geometry(pool.attrs, (1, 1) + conv_out)
    return any(s < (k - 1) * d + 1 for s, k, d in zip(geometry.strides, geometry.kernel, geometry.dilations))


def _staged_block(target, conv: Node, x: TensorType, w: TensorType) -> tuple[tuple[int, ...], int]:
    """The convolution's output positions and the channels of one staged block (Conv's channel block)."""
    conv_out = Conv.geometry(conv.attrs, x.shape, w.shape).out
    num = Numeric(None, x.dtype)
    return conv_out, tile_shape(simd_of(target), num, conv_out[-1], w.shape[0] // conv.attrs.group)[1]


def _plane(conv: Node, types_in: list[TensorType | None], target) -> Correlation | None:
    """The convolution (into its own, unpooled output) when it runs over the flattened plane
    (kernels/conv_plane.py): it is then staged, whether the pooling windows overlap or not."""
    x, w = types_in[0], types_in[1]
    win = Conv.geometry(conv.attrs, x.shape, w.shape)
    y = TensorRef(None, TensorType((x.shape[0], w.shape[0], *win.out), x.dtype))
    context = KernelContext(conv, conv.attrs, None, [TensorRef(None, t) if t else None for t in types_in], [y], None,
                            target)
    if pointwise(win) or conv_workspace(context):
        return None
    cr = conv_correlation(context, Epilogue())
    return cr if conv_plane.fits(cr, simd_of(target), Numeric(None, x.dtype), target) else None


def conv_pool_workspace(conv: Node, types_in: list[TensorType | None], pool: Node, target) -> int:
    """Bytes of the workspace a channels-first Conv fused with ``pool`` stages its output in (0: none,
    the pooled tiles are reduced from convolution tiles in registers)."""
    x, w = types_in[0], types_in[1]
    if conv.attrs.channels_last or x.dtype not in FLOATS or not stages_conv_output(target):
        return 0
    plane = _plane(conv, types_in, target)
    if plane is not None:
        return conv_plane.stage_bytes(simd_of(target), Numeric(None, x.dtype), plane)
    conv_out, block = _staged_block(target, conv, x, w)
    if not _overlaps(pool, conv_out):
        return 0
    return piece(_gathered(conv, types_in, target)) + block * prod(conv_out) * x.dtype.itemsize


def _gathered(conv: Node, types_in: list[TensorType | None], target) -> int:
    """Bytes of the taps' runs a staged Conv strided along its last axis gathers first (conv.py
    ``row_taps_correlation``; 0 for others)."""
    context = KernelContext(conv, conv.attrs, None, [TensorRef(None, t) if t else None for t in types_in], [], None,
                            target)
    win = Conv.geometry(conv.attrs, types_in[0].shape, types_in[1].shape)
    return 0 if pointwise(win) else row_taps_bytes(context)


def _emit_staged(k: KernelContext, num: Numeric, cr: Correlation, pool: Node) -> None:
    """Per block of output channels: the convolution tiles through the epilogue into the workspace, then
    the pooling kernel (MaxPool / AveragePool's own emitter) from there into the block's channels of Y."""
    b = k.builder
    x, y = k.inputs[0], cr.y
    conv_out, block = _staged_block(k.target, k.node, x.type, k.inputs[1].type)
    stage_ptr = k.scratch(x.element, block * prod(conv_out) * x.type.dtype.itemsize)
    width = tile_positions(simd_of(k.target), num, conv_out[-1])
    pool_emitter = average_pool if pool.op == "AveragePool" else max_pool

    def channel_block(batch: Value, group: Value, local0: Value, channels: int) -> None:
        stage = TensorRef(stage_ptr, TensorType((1, channels, *conv_out), x.type.dtype))

        def tile(t: Tile) -> None:
            acc = correlate(num, cr, batch, group, local0, channels, t)
            flat = affine(b, 0, *zip([*t.outer, t.first], stage.strides[2:]))
            for j in range(channels):
                num.store(stage, affine(b, j * stage.strides[1], (flat, 1)), cr.epilogue(num, acc.get(j)),
                          t.edge.stored if t.edge else None)

        sweep_tiles(b, cr.axes, width, tile, simd_of(k.target).lanes(num.compute))
        channel0 = affine(b, 0, (group, cr.out_group), (local0, 1))
        first = b.gep(y.ptr, [affine(b, 0, (batch, y.strides[0]), (channel0, y.strides[1]))], inbounds=True)
        pooled = TensorRef(first, TensorType((1, channels, *y.shape[2:]), y.type.dtype))
        pool_emitter(KernelContext(pool, pool.attrs, b, [stage], [pooled], k.math, k.target))

    with loop_nest(b, [x.shape[0], cr.group]) as (batch, group):
        for_tiles(b, 0, cr.out_group, block, lambda start, count: channel_block(batch, group, start, count))


def emit_conv_pool(k: KernelContext, epilogue: Epilogue, pool: Node) -> None:
    """A Conv layer (k: the Conv node, its inputs, and the pooling's output Y) fused with its element-wise
    consumers (``epilogue``) and the MaxPool or AveragePool node ``pool``: staged through the workspace when
    it has one (``conv_pool_workspace``), else pooled straight from the convolution's register tiles."""
    if k.attrs.channels_last:
        pool_channels_last.emit_conv_pool(k, epilogue, pool)
        return
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    types_in = [ref.type for ref in k.inputs if ref]
    if conv_pool_workspace(k.node, types_in, pool, k.target):
        assert k.workspace is not None, f"layer '{k.node.name}': its staged convolution has no workspace"
        if _plane(k.node, types_in, k.target) is not None:
            conv_plane.emit_staged(k, num, conv_correlation(k, epilogue), simd_of(k.target), pool,
                                   average_pool if pool.op == "AveragePool" else max_pool)
            return
        win = Conv.geometry(k.attrs, types_in[0].shape, types_in[1].shape)
        gathered = _gathered(k.node, types_in, k.target)
        _emit_staged(k, num, row_taps_correlation(k, epilogue, win) if gathered else conv_correlation(k, epilogue),
                     pool)
        return
    cr = conv_correlation(k, epilogue)
    conv_out = tuple(a.out for a in cr.axes)
    average = pool.op == "AveragePool"
    geometry = (AveragePool if average else MaxPool).geometry(pool.attrs, cr.y.shape[:2] + conv_out)
    axes = axes_of(geometry, conv_out)
    width, block = pooled_tile(simd_of(k.target), num, cr, axes[-1])
    cp = ConvPool(cr, axes, average, geometry.pads_end, average and bool(pool.attrs.count_include_pad), width,
                  k.target.arch == "x86_64")
    b = k.builder
    tail = narrow_tail(axes[-1].out, width, _pooled_lanes(simd_of(k.target).lanes(num.compute), axes[-1]))
    body = axes[-1].out - tail
    runs = row_runs(body, width, cp.interior)

    def row(batch: Value, group: Value, position: list[Value], local0: Value, channels: int) -> None:
        sweep_row(b, position, runs, width, lambda position, first, start: _conv_pool_tile(
            num, cp, batch, group, local0, channels, position, first, start))
        if tail:
            _conv_pool_tile(num, replace(cp, width=tail), batch, group, local0, channels, position, const(body), body)

    def channel_block(batch: Value, group: Value, local0: Value, channels: int) -> None:
        with loop_nest(b, [a.out for a in axes[:-1]]) as position:
            row(batch, group, position, local0, channels)

    with loop_nest(b, [cr.x.shape[0], cr.group]) as (batch, group):
        if not stages_conv_output(k.target):
            for_tiles(b, 0, cr.out_group, block, lambda start, count: channel_block(batch, group, start, count))
            return
        # hosts: every channel block of a pooled row in turn, while the input rows it reads are in L2 (block by
        # block, each swept the whole input again from memory: VGG's 3x3 + pool 64@224, 12.8 MB of input)
        with loop_nest(b, [a.out for a in axes[:-1]]) as position:
            for_tiles(b, 0, cr.out_group, block, lambda start, count: row(batch, group, position, start, count))


@group_emitter("Conv")
def conv_group(k: KernelContext, layer) -> None:
    """A float convolution group (fuse.py): its element-wise nodes as the epilogue, then its pooling if any.
    A residual sum's other operand comes after the Conv's own inputs (``Layer.inputs``)."""
    heads = len(layer.nodes[0].inputs)
    residual = k.inputs[heads] if layer.residual else None
    k = replace(k, inputs=k.inputs[:heads])
    epilogue = Epilogue(tuple((node.op, node.attrs) for node in layer.epilogue), k.math, residual,
                        prefetches=residual_prefetched(k.target, residual))
    if layer.pool is None:
        emit_conv(k, epilogue)
    else:
        emit_conv_pool(k, epilogue, layer.pool)


# the channels-last kernels build on this file (imported last: they import it)
from pegasus.exporters.glow.kernels import conv_plane, pool_channels_last, pool_plane  # noqa: E402
