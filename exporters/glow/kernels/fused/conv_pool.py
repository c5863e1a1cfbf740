"""A float convolution fused with the pooling that reads it (exporters/glow/fuse.py groups Conv, its
element-wise layers and a MaxPool/AveragePool), so the convolution's output is never stored whole.

``emit_conv_pool`` computes it one of two ways. Without a workspace (windows that do not overlap, or a
Cortex-M, which keeps the RAM), a register tile of pooled outputs (a block of channels times a vector of
pooled positions along the row) is reduced from Conv's ``correlate`` tiles, one per pooling tap, each
through the fused element-wise epilogue; along the row, pooling tap t reads convolution outputs
o*pool_stride - pool_pad + t*pool_dilation, i.e. the input with stride conv_stride*pool_stride, shifted by t:
the tiles and the lanes that fall in the pooling's padding are decided statically, as Conv's edge tiles are.
On hosted targets, overlapping windows instead stage the convolution's output in the workspace and pool it
with the pooling's own emitter (pool.py), so no convolution value is computed twice: a run of channels of
the whole plane at a time (conv_plane.py's plane kernel, or ``_emit_staged``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.dtypes import FLOATS, require_dtype
from pegasus.exporters.glow.kernels.reference.conv import (
    Correlation,
    block_channels,
    conv_correlation,
    correlate,
    row_taps_bytes,
    row_taps_correlation,
    tile_channels,
    tile_positions,
    tile_shape,
)
from pegasus.exporters.glow.kernels.reference.epilogue import Epilogue, layer_epilogue
from pegasus.exporters.glow.kernels.reference.pool import average_pool, max_pool
from pegasus.exporters.glow.kernels.registry import workspace
from pegasus.exporters.glow.kernels.strategy import Query, Verdict, implementation
from pegasus.exporters.glow.llvm.copies import copy_strided
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.pooling import counted_bounds, counted_taps
from pegasus.exporters.glow.llvm.simd import simd_of, vconst
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import for_tiles, power_of_two_below, range_nest
from pegasus.exporters.glow.llvm.types import BIT, Value
from pegasus.exporters.glow.llvm.windows import (
    Axis,
    Tile,
    axes_of,
    edge_of,
    narrow_tail,
    pointwise,
    row_runs,
    row_sweeper,
    sweep_row,
    sweep_tiles,
)
from pegasus.ir.graph import Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv
from pegasus.ops.pool import AveragePool, MaxPool
from pegasus.ops.spatial import prod


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
        bounds = counted_bounds(last, cp.pads_end[-1], cp.include_pads)
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
    (kernels/reference/conv_plane.py): it is then staged, whether the pooling windows overlap or not."""
    x, w = types_in[0], types_in[1]
    win = Conv.geometry(conv.attrs, x.shape, w.shape)
    y = TensorRef(None, TensorType((x.shape[0], w.shape[0], *win.out), x.dtype))
    context = KernelContext(conv, conv.attrs, None, [TensorRef(None, t) if t else None for t in types_in], [y], None,
                            target)
    if pointwise(win) or conv_plane.im2col_bytes(context, simd_of(target)) or row_taps_bytes(context):
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
    if _banded(pool, conv_out):
        rows = _band(pool, conv_out, w.shape[0] // conv.attrs.group, x.dtype.itemsize)[1]
        return piece(_gathered(conv, types_in, target)) + w.shape[0] // conv.attrs.group * rows * conv_out[-1] * \
            x.dtype.itemsize
    return piece(_gathered(conv, types_in, target)) + block * prod(conv_out) * x.dtype.itemsize


#: bytes of the convolution's rows (every channel of its group) a fused max pool stages at a time
#: (``_emit_banded``; beside the tiles' inputs, within this CPU's 1 MB L2)
BAND_BYTES = 384 * 1024


def _banded(pool: Node, conv_out: tuple[int, ...]) -> bool:
    """Whether ``_emit_banded`` stages the convolution for ``pool``: an undilated 2-D MaxPool."""
    geometry = MaxPool.geometry(pool.attrs, (1, 1) + conv_out) if pool.op == "MaxPool" else None
    return geometry is not None and len(conv_out) == 2 and all(d == 1 for d in geometry.dilations)


def _band(pool: Node, conv_out: tuple[int, ...], channels: int, itemsize: int) -> tuple[int, int]:
    """(pooled rows, convolution rows) of a band: as many pooled rows as ``BAND_BYTES`` of their
    convolution rows hold (at least one)."""
    geometry = MaxPool.geometry(pool.attrs, (1, 1) + conv_out)
    kernel, stride = geometry.kernel[0], geometry.strides[0]
    row = channels * conv_out[-1] * itemsize
    pooled = max(1, min(geometry.out[0], (BAND_BYTES // row - kernel) // stride + 1))
    return pooled, (pooled - 1) * stride + kernel


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


def _emit_banded(k: KernelContext, num: Numeric, cr: Correlation, pool: Node) -> None:
    """A MaxPool over the convolution staged a band of rows at a time: every channel of the group of the
    convolution rows a band of pooled rows reads (``_band``) computed into the workspace, each tile by every
    channel block in turn (so the tiles' inputs, a strided stem's gathered rows, are read once rather than once
    per block), then pooled channel by channel by MaxPool's own emitter (pool.py). The rows two bands share (the
    window's overlap) are copied to the top of the next band rather than computed again; rows outside the
    convolution's output are the pooling's padding (its pads for that band: the first, the last, and every
    band between are emitted once each). ResNet's 7x7 stride-2 stem with its 3x3 stride-2 max pool: staged
    per block of channels it read its 2 MB of gathered rows once per block."""
    b = k.builder
    y = cr.y
    conv_out = tuple(axis.out for axis in cr.axes)
    geometry = MaxPool.geometry(pool.attrs, (1, 1) + conv_out)
    (kernel, columns_kernel), (stride, columns_stride) = geometry.kernel, geometry.strides
    channels, width_out = cr.out_group, conv_out[-1]
    pooled_rows, rows = _band(pool, conv_out, channels, num.dtype.itemsize)
    shared = max(0, kernel - stride)
    stage = TensorRef(k.scratch(y.element, channels * rows * width_out * num.dtype.itemsize),
                      TensorType((1, channels, rows, width_out), y.type.dtype))
    simd = simd_of(k.target)
    width, block = tile_shape(simd, num, width_out, channels)
    pooled_out = geometry.out[-1]
    right = max(0, (pooled_out - 1) * columns_stride + columns_kernel - width_out - geometry.pads_begin[-1])

    def conv_tile(batch: Value, group: Value, origin: Value, t: Tile) -> None:
        step = tile_channels(simd, num, channels, width, block, t)

        def store(local0: Value, count: int) -> None:
            acc = correlate(num, cr, batch, group, local0, count, t)
            flat = affine(b, 0, (local0, stage.strides[1]), (t.outer[0], width_out), (origin, -width_out),
                          (t.first, 1))
            for j in range(count):
                num.store(stage, affine(b, j * stage.strides[1], (flat, 1)), cr.epilogue(num, acc.get(j)),
                          t.edge.stored if t.edge else None)

        for_tiles(b, 0, channels, step, store)

    def band(batch: Value, group: Value, index: Value, first: bool, top: int, bottom: int, count: int) -> None:
        """Band ``index``: its stage's rows [top, bottom) are convolution rows (origin + row), ``count`` pooled
        rows from index * pooled_rows."""
        origin = affine(b, -geometry.pads_begin[0], (index, pooled_rows * stride))
        if not first and shared:
            copy_strided(b, stage, stage, (channels, shared, width_out), stage.strides[1:], stage.strides[1:],
                         src_base=pooled_rows * stride * width_out, lanes=simd.lanes(num.storage))
        sweep = row_sweeper(b, cr.axes[-1], width, lambda t: conv_tile(batch, group, origin, t),
                            simd.lanes(num.compute))
        with for_range(b, affine(b, bottom, (origin, 1)), start=affine(b, top if first else max(top, shared),
                                                                           (origin, 1)), name="crow") as row:
            sweep([row])
        needed = (count - 1) * stride + kernel
        bottom = min(bottom, needed)
        attrs = replace(pool.attrs, pads=(top, geometry.pads_begin[-1], needed - bottom, right), ceil_mode=0,
                        auto_pad="NOTSET")
        with for_range(b, channels, name="pchannel") as channel:
            view = TensorRef(stage.address(b, affine(b, top * width_out, (channel, stage.strides[1]))),
                             TensorType((1, 1, bottom - top, width_out), y.type.dtype))
            into = TensorRef(y.address(b, affine(b, 0, (batch, y.strides[0]), (group, channels * y.strides[1]),
                                                 (channel, y.strides[1]), (index, pooled_rows * pooled_out))),
                             TensorType((1, 1, count, pooled_out), y.type.dtype))
            max_pool(KernelContext(pool, attrs, b, [view], [into], k.math, k.target))

    # each band's static shape: (first, top, bottom, pooled rows); runs of equal ones share a loop
    shapes = []
    for index in range(-(-geometry.out[0] // pooled_rows)):
        origin = index * pooled_rows * stride - geometry.pads_begin[0]
        shapes.append((index == 0, max(0, -origin), min(rows, conv_out[0] - origin),
                       min(pooled_rows, geometry.out[0] - index * pooled_rows)))
    with loop_nest(b, [y.shape[0], cr.group]) as (batch, group):
        index = 0
        while index < len(shapes):
            end = index
            while end < len(shapes) and shapes[end] == shapes[index]:
                end += 1
            with for_range(b, end, start=index, name="band") as current:
                band(batch, group, current, *shapes[index])
            index = end


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
        cr = row_taps_correlation(k, epilogue, win) if gathered else conv_correlation(k, epilogue)
        (_emit_banded if _banded(pool, win.out) else _emit_staged)(k, num, cr, pool)
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


def pooled(query: Query) -> Verdict:
    """A Conv group that ends in its pooling."""
    return True if query.layer.pool is not None else "no pooling"


@implementation("conv.pooled", "Conv+group", family="fused", priority=100, when=pooled)
def conv_group(k: KernelContext) -> None:
    """A float convolution, its element-wise nodes as the epilogue, its pooling reduced from the convolution's
    tiles (staged through the workspace where ``conv_pool_workspace`` says)."""
    k, epilogue = layer_epilogue(k)
    emit_conv_pool(k, epilogue, k.layer.pool)


@workspace("conv.pooled")
def conv_group_workspace(k: KernelContext) -> int:
    return conv_pool_workspace(k.node, [ref.type if ref else None for ref in k.inputs], k.layer.pool, k.target)


# the channels-last kernels build on this file (imported last: they import it)
from pegasus.exporters.glow.kernels.reference import conv_plane, pool_channels_last  # noqa: E402
