"""Emitters for the convolutions (Conv, ConvTranspose), and the sliding-window sweeps that the pooling
kernels share with them.

Geometry comes from the ops themselves (``Conv.geometry``, ``ConvTranspose.geometry``): this file only
turns a resolved ``Window`` into loops. ``Axis`` answers, per spatial axis, which taps of an output
position fall inside the input: statically for the interior, with a few integer instructions near
the padding, so no tap ever tests a bound. Both sweeps loop over the outer spatial axes and cut the
last (contiguous) axis into tiles of ``width`` positions, one vector each: ``sweep_tiles`` (Conv) gives
the tiles crossing the padding static lane masks per tap (``Edge``: masked loads, no scalar border
code); ``sweep`` (pooling) visits the border positions one at a time.

Conv is a direct convolution in register tiles (``Correlation``): a block of output channels times a
tile of one output row, all accumulators in registers (bias as their initial value), reduced over
input channels and taps; each tap multiplies one broadcast weight per channel with a vector of inputs
shared by the block. ConvTranspose is the same kernel once per stride phase: the outputs
o = q*stride + r of one residue r read a fixed subset of the taps, a dense stride-1 correlation over q
(``_axis_phases``), so it needs no scatter and no accumulation in memory.

A Conv fused with element-wise consumers (exporters/glow/fuse.py) applies them as an ``Epilogue`` (epilogue.py) to
each accumulator vector before storing it, a residual sum's other operand read at the store's own index and
lanes (every store site passes them); conv_pool.py's ``emit_conv_pool`` reduces ``correlate``'s register tiles
straight into pooled outputs.

Channels-last layers (``channels_last``) with constant weights go to conv_channels_last.py, built on
this file's ``Axis``; the exporter re-lays their weights for it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, require_dtype
from pegasus.exporters.glow.kernels.epilogue import Epilogue
from pegasus.exporters.glow.kernels.registry import emitter, workspace
from pegasus.exporters.glow.llvm.copies import copy_strided, fill_strided
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.simd import Simd, prefetch_span, simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import cover, for_tiles, range_nest
from pegasus.exporters.glow.llvm.types import Value
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv, ConvTranspose
from pegasus.ops.spatial import Window

Range = tuple[Value, Value]


def _ceil_div(a: int, d: int) -> int:
    return -(-a // d)


def _clamp(b: ir.IRBuilder, value: Value, lo: int, hi: int) -> Value:
    value = b.select(b.icmp_signed("<", value, const(lo)), const(lo), value)
    return b.select(b.icmp_signed(">", value, const(hi)), const(hi), value)


@dataclass(frozen=True)
class Axis:
    """One spatial axis: output position o reads input o*stride - pad + k*dilation for k < kernel."""

    size: int
    out: int
    kernel: int
    stride: int
    dilation: int
    pad: int

    def origin(self, b: ir.IRBuilder, o: Value) -> Value:
        return affine(b, -self.pad, (o, self.stride))

    def interior(self, lower: int = 0, upper: int | None = None) -> tuple[int, int]:
        """[first, end) of the outputs whose every tap lies in [lower, upper) (default: the input)."""
        upper = self.size if upper is None else upper
        first = max(0, min(self.out, _ceil_div(lower + self.pad, self.stride)))
        last = (upper - 1 + self.pad - (self.kernel - 1) * self.dilation) // self.stride
        return first, max(first, min(self.out, last + 1))

    def taps(self, b: ir.IRBuilder, o: Value, lower: int = 0, upper: int | None = None) -> Range:
        """[lo, hi) of the taps k of output ``o`` reading inside [lower, upper) (hi >= lo)."""
        upper = self.size if upper is None else upper
        if self.interior(lower, upper) == (0, self.out):
            return const(0), const(self.kernel)
        origin = self.origin(b, o)
        smallest = min(lower, upper) - ((self.out - 1) * self.stride - self.pad)
        lo = _clamp(b, self._ceil_div(b, b.sub(const(lower), origin), smallest), 0, self.kernel)
        hi = _clamp(b, self._ceil_div(b, b.sub(const(upper), origin), smallest), 0, self.kernel)
        return lo, b.select(b.icmp_signed("<", hi, lo), lo, hi)

    def _ceil_div(self, b: ir.IRBuilder, a: Value, smallest: int) -> Value:
        """ceil(a / dilation) for a >= smallest (sdiv rounds toward zero: shift a to be >= 0 first)."""
        d = self.dilation
        if d == 1:
            return a
        shift = _ceil_div(max(0, -smallest), d) + 1
        return b.sub(b.sdiv(b.add(a, const(shift * d + d - 1)), const(d)), const(shift))


def axes_of(win: Window, in_sizes: tuple[int, ...]) -> list[Axis]:
    return [Axis(size, out, k, s, d, p) for size, out, k, s, d, p in
            zip(in_sizes, win.out, win.kernel, win.strides, win.dilations, win.pads_begin)]


@dataclass(frozen=True)
class Edge:
    """A tile crossing the padding or the row's end: the last-axis taps that read inside the input,
    each with the lanes that do, and how many lanes lie inside the output row."""

    taps: tuple[tuple[int, tuple[bool, ...]], ...]
    stored: int


def edge_of(axis: Axis, start: int, width: int) -> Edge | None:
    """The Edge of the tile of ``width`` outputs from ``start``; None when every tap is inside."""
    taps = []
    for k in range(axis.kernel):
        mask = tuple(start + lane < axis.out and 0 <= (start + lane) * axis.stride - axis.pad + k * axis.dilation
                     < axis.size for lane in range(width))
        if any(mask):
            taps.append((k, mask))
    stored = min(width, axis.out - start)
    if stored == width and len(taps) == axis.kernel and all(all(mask) for _, mask in taps):
        return None
    return Edge(tuple(taps), stored)


def row_runs(out: int, width: int, is_interior: Callable[[int], bool]) -> list[tuple[int, int]]:
    """(start, count) runs of tiles of ``width`` positions covering a row of ``out``: tiles every
    ``width``, the last one moved back to end at the row's end (overlapping its neighbour) when the row
    is longer than a tile. A run of several tiles is a loop of interior tiles (``is_interior(start)``);
    edge tiles stand alone."""
    starts = list(range(0, out - width, width)) + [max(0, out - width)]
    runs: list[list[int]] = []
    for start in starts:
        interior = is_interior(start)
        previous = runs[-1] if runs else None
        if interior and previous and previous[2] and previous[0] + previous[1] * width == start:
            previous[1] += 1
        else:
            runs.append([start, 1, interior])
    return [(start, count) for start, count, _ in runs]


@dataclass(frozen=True)
class Tile:
    """Output positions being computed: ``outer`` indices of the outer axes, ``width`` positions of
    the last axis from ``first``. ``last_taps`` (a single border position) or ``edge`` (a tile
    crossing the padding) say which last-axis taps read inside; with neither, all of them do."""

    outer: list[Value]
    first: Value
    width: int
    last_taps: Range | None = None
    edge: Edge | None = None


def sweep(b: ir.IRBuilder, axes: list[Axis], width: int, visit: Callable[[Tile], None]) -> None:
    """Visit every output position: loops over the outer axes; the last axis in interior tiles of
    ``width`` (the tail tile overlapping its neighbour), then its border positions one by one."""
    *outer, last = axes
    first, end = last.interior()
    left, right = first, last.out - end
    with loop_nest(b, [a.out for a in outer]) as position:
        if end > first:
            cover(b, first, end - first, width, lambda start, count: visit(Tile(position, start, count)))
        if left + right:
            with for_range(b, left + right, name="border") as i:
                o = b.select(b.icmp_signed("<", i, const(left)), i, b.add(i, const(end - first)))
                visit(Tile(position, o, 1, last_taps=last.taps(b, o)))


def sweep_row(b: ir.IRBuilder, position: list[Value], runs: list[tuple[int, int]], width: int,
              visit: Callable[[list[Value], Value, int | None], None]) -> None:
    """The runs of ``row_runs`` of one row (``position``: its outer coordinates): a loop of interior tiles
    (visit(position, first, None)), or one tile at a static start (visit(position, first, start))."""
    for start, count in runs:
        if count == 1:
            visit(position, const(start), start)
            continue
        with for_range(b, count, name="tile") as t:
            visit(position, affine(b, start, (t, width)), None)


def narrow_tail(out: int, width: int, lanes: int) -> int:
    """Positions of the narrower last tile ``sweep_tiles`` ends a row of ``out`` with (0: none, the last tile
    overlaps its neighbour instead): the rest of the row after whole tiles of ``width``, when it is a whole
    number of ``lanes`` vectors. A 112-wide row in 32-position tiles is three tiles and one of 16 rather than
    four overlapping ones, which recomputed 16 of every 112 outputs (ResNet's and Inception's 7x7 stride-2
    stems, VGG's 112x112 layers)."""
    rest = out % width if out > width else 0
    return rest if lanes > 1 and rest and rest % lanes == 0 else 0


def sweep_tiles(b: ir.IRBuilder, axes: list[Axis], width: int, visit: Callable[[Tile], None], lanes: int = 0) -> None:
    """Visit every output position in tiles of ``width`` along the last axis only: interior tiles in
    loops, tiles crossing the padding as edge tiles (lanes masked per tap, no scalar border code). With
    ``lanes``, a row's rest of whole vectors is one narrower last tile (``narrow_tail``; visit sees its width)."""
    *outer, last = axes
    row = row_sweeper(b, last, width, visit, lanes)
    with loop_nest(b, [a.out for a in outer]) as position:
        row(position)


def row_sweeper(b: ir.IRBuilder, last: Axis, width: int, visit: Callable[[Tile], None],
                lanes: int = 0) -> Callable[[list[Value]], None]:
    """``sweep_tiles``' visit of one row, as a function of the row's outer coordinates (a caller looping over
    rows its own way: conv_pool.py's bands)."""
    tail = narrow_tail(last.out, width, lanes)
    body = last.out - tail
    runs = row_runs(body, width, lambda start: edge_of(last, start, width) is None)

    def tile(position: list[Value], first: Value, start: int | None) -> None:
        visit(Tile(position, first, width, edge=None if start is None else edge_of(last, start, width)))

    def row(position: list[Value]) -> None:
        sweep_row(b, position, runs, width, tile)
        if tail:
            visit(Tile(position, const(body), tail, edge=edge_of(last, body, tail)))

    return row


def tile_channels(simd: Simd, num: Numeric, channels: int, width: int, block: int, tile: Tile) -> int:
    """Output channels a register tile computes: ``block`` for a full tile of ``width`` positions; a narrower
    tail tile keeps as many accumulators as a full one by taking more channels."""
    return block if tile.width == width else block_channels(simd, num, channels, tile.width)


def tile_shape(simd: Simd, num: Numeric, row: int, channels: int) -> tuple[int, int]:
    """(positions, channels) of a Conv register tile: two vectors of the output row (four positions on
    a scalar FPU; for a shorter row, the power of two that holds it), and as many channels as the
    accumulator registers then allow."""
    positions = tile_positions(simd, num, row)
    return positions, block_channels(simd, num, channels, positions)


def tile_positions(simd: Simd, num: Numeric, row: int) -> int:
    lanes = simd.lanes(num.compute)
    return min(2 * lanes if lanes > 1 else 4, 1 << (row - 1).bit_length())


def block_channels(simd: Simd, num: Numeric, channels: int, *widths: int) -> int:
    """Channels of a register tile keeping, per channel, one accumulator of each of ``widths`` lanes."""
    lanes = simd.lanes(num.compute)
    vectors = sum(-(-width // lanes) for width in widths)
    return max(1, min(channels, simd.accumulators // vectors, 16))


# ----------------------------------------------------------------------------------------------------
# Conv


@dataclass(frozen=True)
class Correlation:
    """Y[n, m, o] = bias[m] + sum over the group's input channels ci and taps k of
    X[n, ci, o*stride - pad + k*dilation] * W[...], the weight's flat index being affine in (m, ci, k).
    Conv is one; ConvTranspose is one per stride phase (see ``_phases``)."""

    x: TensorRef
    w: TensorRef
    bias: TensorRef | None
    y: TensorRef
    axes: list[Axis]
    group: int
    w_channel: int                # weight index step per output channel of the group
    w_input: int                  # ... per input channel of the group
    w_group: int                  # ... per group
    w_taps: tuple[int, ...]       # ... per tap along each spatial axis
    w_offset: int = 0
    y_steps: tuple[int, ...] = ()  # output index step per position along each axis (default: Y's strides)
    y_offset: int = 0
    epilogue: Epilogue = Epilogue()

    @property
    def in_group(self) -> int:
        return self.x.shape[1] // self.group

    @property
    def out_group(self) -> int:
        return self.y.shape[1] // self.group

    @property
    def y_strides(self) -> tuple[int, ...]:
        return self.y_steps or self.y.strides[2:]


#: input channels ahead whose inputs a tile asks into L1 (conv_plane.py ``prefetch_rows``, ``correlate``)
PREFETCH_CHANNELS = 2


def correlate(num: Numeric, cr: Correlation, batch: Value, group: Value, local0: Value, channels: int,
              tile: Tile, prefetch: bool = False) -> Accumulators:
    """Accumulators of Y[batch, channels local0:+channels of the group, tile] = bias + the sum over input
    channels and taps: one broadcast weight per channel times a vector of the tile's inputs, per tap.
    ``prefetch`` (2-D, contiguous rows): each input channel's step first asks the rows of the channel
    ``PREFETCH_CHANNELS`` ahead into L1 (conv_pool.py's fused tiles on x86-64: VGG-19's 3x3 64@224 + 2x2 max pool
    16.6 -> 15.4 ms, 128@112 + pool 16.0 -> 15.5; plain row tiles gained nothing, 128@112 244 -> 241 GF/s)."""
    b = num.b
    *outer_axes, last = cr.axes
    x_strides = cr.x.strides[2:]
    channel0 = affine(b, 0, (group, cr.out_group), (local0, 1))
    acc = Accumulators(num, channels, tile.width)
    for j in range(channels):
        start = num.load(cr.bias, affine(b, j, (channel0, 1)), tile.width, 0) if cr.bias is not None \
            else num.constant(0, tile.width)
        acc.set(j, start)

    def tap(x_flat: Value, w_flat: Value, mask: tuple[bool, ...] | None) -> None:
        inputs = num.load(cr.x, x_flat, tile.width, last.stride) if mask is None else \
            num.load_lanes(cr.x, x_flat, tile.width, last.stride, mask)
        for j in range(channels):
            acc.mul_add(j, num.load(cr.w, affine(b, j * cr.w_channel, (w_flat, 1)), tile.width, 0), inputs)

    ranges = [axis.taps(b, o) for axis, o in zip(outer_axes, tile.outer)]
    if tile.edge is None:
        ranges.append((const(0), const(last.kernel)))
    with for_range(b, cr.in_group, name="ci") as ci:
        x_plane = affine(b, 0, (batch, cr.x.strides[0]), (group, cr.in_group * cr.x.strides[1]), (ci, cr.x.strides[1]))
        w_plane = affine(b, cr.w_offset, (group, cr.w_group), (local0, cr.w_channel), (ci, cr.w_input))
        if prefetch and len(cr.axes) == 2 and x_strides[-1] == 1:
            (height,) = outer_axes
            ahead = affine(b, PREFETCH_CHANNELS * cr.x.strides[1], (x_plane, 1),
                           (height.origin(b, tile.outer[0]), x_strides[0]), (last.origin(b, tile.first), 1))
            span = (tile.width - 1) * last.stride + (last.kernel - 1) * last.dilation
            for kh in range(height.kernel):
                prefetch_span(b, cr.x, ahead, kh * height.dilation * x_strides[0], kh * height.dilation * x_strides[0]
                              + span)
        with range_nest(b, ranges) as taps:
            x_terms = [(axis.origin(b, o), s) for axis, o, s in zip(outer_axes, tile.outer, x_strides)]
            x_terms += [(k, axis.dilation * s) for axis, k, s in zip(cr.axes, taps, x_strides)]
            x_flat = affine(b, 0, (x_plane, 1), (last.origin(b, tile.first), x_strides[-1]), *x_terms)
            w_flat = affine(b, 0, (w_plane, 1), *zip(taps, cr.w_taps))
            if tile.edge is None:
                tap(x_flat, w_flat, None)
            for k, mask in tile.edge.taps if tile.edge else ():
                tap(affine(b, k * last.dilation, (x_flat, 1)), affine(b, k * cr.w_taps[-1], (w_flat, 1)), mask)
    return acc


def _correlation_tile(num: Numeric, cr: Correlation, batch: Value, group: Value, local0: Value, channels: int,
                      tile: Tile) -> None:
    """Y[batch, channels local0:+channels of the group, tile], through the epilogue."""
    b = num.b
    channel0 = affine(b, 0, (group, cr.out_group), (local0, 1))
    y_flat = affine(b, cr.y_offset, (batch, cr.y.strides[0]), (channel0, cr.y.strides[1]),
                    *zip([*tile.outer, tile.first], cr.y_strides))
    for j in range(channels):
        cr.epilogue.prefetch(num, affine(b, j * cr.y.strides[1], (y_flat, 1)), (tile.width - 1) * cr.y_strides[-1] + 1)
    acc = correlate(num, cr, batch, group, local0, channels, tile)
    stored = tile.edge.stored if tile.edge else None
    for j in range(channels):
        flat = affine(b, j * cr.y.strides[1], (y_flat, 1))
        num.store(cr.y, flat, cr.epilogue(num, acc.get(j), flat, stored, cr.y_strides[-1]), stored, cr.y_strides[-1])


#: bytes of weights a run of channel blocks may share (kept in L2 while every output tile goes through them)
WEIGHT_BUDGET = 160 * 1024


def emit_correlation(k: KernelContext, num: Numeric, cr: Correlation) -> None:
    """Loops over batch, group and runs of channel blocks whose weights fit ``WEIGHT_BUDGET``; the tiles of the
    output rows inside, and each block of the run on each tile, so the inputs a tile reads are read from
    memory once per run rather than once per block (a run is one block on a target with little memory)."""
    b = k.builder
    width, block = tile_shape(simd_of(k.target), num, cr.axes[-1].out, cr.out_group)

    weights = block * cr.in_group * math.prod(a.kernel for a in cr.axes) * num.dtype.itemsize
    blocks = 1 if k.target.is_cortex_m else max(1, WEIGHT_BUDGET // max(1, weights))

    lanes = simd_of(k.target).lanes(num.compute)

    def channel_blocks(batch: Value, group: Value, first: Value, channels: int) -> None:
        def tile(t: Tile) -> None:
            step = tile_channels(simd_of(k.target), num, cr.out_group, width, block, t)
            for_tiles(b, 0, channels, step, lambda start, count: _correlation_tile(
                num, cr, batch, group, affine(b, 0, (first, 1), (start, 1)), count, t))

        sweep_tiles(b, cr.axes, width, tile, lanes)

    with loop_nest(b, [cr.x.shape[0], cr.group]) as (batch, group):
        for_tiles(b, 0, cr.out_group, block * blocks, lambda start, count: channel_blocks(batch, group, start, count))


def conv_correlation(k: KernelContext, epilogue: Epilogue) -> Correlation:
    """The Correlation of the layer's Conv node (inputs X, W[, B]) into its output."""
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y = k.outputs[0]
    win = Conv.geometry(k.attrs, x.shape, w.shape)
    group = k.attrs.group
    return Correlation(x, w, bias, y, axes_of(win, x.shape[2:]), group, w.strides[0], w.strides[1],
                       y.shape[1] // group * w.strides[0], w.strides[2:], epilogue=epilogue)


def pointwise(win: Window) -> bool:
    """Every output position reads one input position, the same for every tap (1x1, no padding)."""
    return all(k == 1 for k in win.kernel) and not any(win.pads_begin) and not any(win.pads_end)


def _flat(ref: TensorRef, ptr: ir.Value | None = None) -> TensorRef:
    """``ref`` (N, C, D1, ...) seen as (N, C, D1*...) at ``ptr`` (default: its own)."""
    shape = ref.shape
    return TensorRef(ref.ptr if ptr is None else ptr, TensorType((*shape[:2], math.prod(shape[2:])), ref.type.dtype))


@workspace("Conv")
def conv_workspace(k: KernelContext) -> int:
    """A Conv strided along its last axis on a hosted target gathers, once, what its taps read into the
    workspace, so each block of output channels reads contiguous vectors (rather than shuffling strided loads,
    once per block: ResNet-50's stride-2 projections ran at 22-33 GF/s): a pointwise one the input positions
    it reads (``_pointwise_correlation``), one whose output rows the flattened plane covers better every
    tap's inputs (conv_plane.py ``im2col_bytes``), any other each tap's run of the last axis
    (``row_taps_correlation``)."""
    if conv_lanes.packed(k):
        return conv_lanes.workspace_bytes(k)
    return conv_plane.im2col_bytes(k, simd_of(k.target)) or row_taps_bytes(k)


def row_taps_bytes(k: KernelContext) -> int:
    """The workspace of ``conv_workspace`` but for the im2col one (also what a staged Conv + pool gathers)."""
    x, w = k.inputs[0], k.inputs[1]
    if k.attrs.channels_last or k.target.is_cortex_m or x.type.dtype not in FLOATS:
        return 0
    win = Conv.geometry(k.attrs, x.shape, w.shape)
    if pointwise(win):
        return 0 if all(s == 1 for s in win.strides) else \
            x.shape[0] * x.shape[1] * math.prod(win.out) * x.type.dtype.itemsize
    if win.strides[-1] == 1:
        return 0
    return math.prod(x.shape[:-1]) * win.kernel[-1] * win.out[-1] * x.type.dtype.itemsize


def row_taps_correlation(k: KernelContext, epilogue: Epilogue, win: Window) -> Correlation:
    """A Conv strided along its last axis, over the workspace Z[..., kw*out + o] = X[..., o*stride - pad +
    kw*dilation] (0 in the padding): each tap of the last axis then reads a contiguous run of Z, with no edge
    masks (AlexNet's 11x11 stride 4 read its input by shuffles of 8 vectors per tap and 16 outputs: 15 GF/s)."""
    x, w, y, b = k.inputs[0], k.inputs[1], k.outputs[0], k.builder
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    kernel, stride, dilation, pad, out = (win.kernel[-1], win.strides[-1], win.dilations[-1], win.pads_begin[-1],
                                          win.out[-1])
    z = TensorRef(k.scratch(x.element, row_taps_bytes(k)),
                  TensorType((*x.shape[:-1], kernel * out), x.type.dtype))
    rows = (*x.shape[:-1],)
    zero = ir.Constant(x.element, 0.0)
    for kw in range(kernel):
        shift = kw * dilation - pad
        first = min(out, max(0, _ceil_div(-shift, stride)))
        end = max(first, min(out, (x.shape[-1] - 1 - shift) // stride + 1))
        for start, stop in ((0, first), (end, out)):
            fill_strided(b, z, zero, (*rows, stop - start), z.strides, kw * out + start)
        if end > first:
            copy_strided(b, z, x, (*rows, end - first), z.strides, (*x.strides[:-1], stride),
                         dst_base=kw * out + first, src_base=first * stride + shift)
    axes = axes_of(win, x.shape[2:])[:-1] + [Axis(kernel * out, out, kernel, 1, out, 0)]
    group = k.attrs.group
    return Correlation(z, w, bias, y, axes, group, w.strides[0], w.strides[1], y.shape[1] // group * w.strides[0],
                       w.strides[2:], epilogue=epilogue)


def gather_positions(b: ir.IRBuilder, pointer: ir.Value, x: TensorRef, win: Window) -> TensorRef:
    """The input positions a strided 1x1 convolution reads, (N, C, out...), copied to ``pointer``."""
    picked = TensorRef(pointer, TensorType((*x.shape[:2], *win.out), x.type.dtype))
    copy_strided(b, picked, x, picked.shape, picked.strides,
                 (*x.strides[:2], *(st * s for st, s in zip(x.strides[2:], win.strides))))
    return picked


def _pointwise_correlation(k: KernelContext, epilogue: Epilogue, win: Window) -> Correlation:
    """A pointwise Conv on a hosted target as a correlation over the flattened positions (one axis: rows as
    long as the whole plane, so a 7x7 plane fills 16-lane tiles instead of 8-lane rows of 7). Strided: over the
    input positions it reads, gathered into the workspace first (``conv_workspace``)."""
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    source = _flat(x)
    if conv_workspace(k):
        assert k.workspace is not None, f"layer '{k.node.name}': its strided pointwise Conv has no workspace"
        source = _flat(gather_positions(k.builder, k.scratch(x.element, conv_workspace(k)), x, win))
    positions = source.shape[2]
    group = k.attrs.group
    return Correlation(source, w, bias, _flat(y), [Axis(positions, positions, 1, 1, 1, 0)], group, w.strides[0],
                       w.strides[1], y.shape[1] // group * w.strides[0], (0,), epilogue=epilogue)


def emit_conv(k: KernelContext, epilogue: Epilogue) -> None:
    """Conv, its outputs passed through ``epilogue`` (fused element-wise layers) before they are stored."""
    if k.attrs.channels_last:
        conv_channels_last.emit_conv(k, epilogue)
        return
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    if conv_lanes.packed(k):
        conv_lanes.emit_layer(k, epilogue)
        return
    win = Conv.geometry(k.attrs, k.inputs[0].shape, k.inputs[1].shape)
    simd = simd_of(k.target)
    if pointwise(win) and (len(win.out) > 1 and not k.target.is_cortex_m or conv_workspace(k)):
        flat = _pointwise_correlation(k, epilogue, win)
        cr = conv_plane.as_plane(flat)
        if conv_plane.fits(cr, simd, num, k.target) and conv_plane.pointwise_fits(cr, simd, num):
            conv_plane.emit_plane(k, num, cr, simd)
            return
        emit_correlation(k, num, flat)
        return
    if conv_plane.im2col_bytes(k, simd):
        conv_plane.emit_plane(k, num, conv_plane.im2col_correlation(k, epilogue, win, simd), simd)
        return
    if conv_workspace(k):
        emit_correlation(k, num, row_taps_correlation(k, epilogue, win))
        return
    cr = conv_correlation(k, epilogue)
    if conv_plane.fits(cr, simd, num, k.target):
        conv_plane.emit_plane(k, num, cr, simd)
        return
    emit_correlation(k, num, cr)


def weights_known(node: Node, graph: Graph) -> bool:
    """Channels-last convolutions run natively when their weights are constants (re-laid at export)."""
    return graph.tensors[node.inputs[1]].is_constant


@emitter("Conv", channels_last=weights_known)
def conv(k: KernelContext) -> None:
    emit_conv(k, Epilogue())


# ----------------------------------------------------------------------------------------------------
# ConvTranspose


@dataclass(frozen=True)
class Phase:
    """Outputs o = q*stride + residue of one ConvTranspose axis as a stride-1 correlation over q:
    tap t reads input q - axis.pad + t*axis.dilation with weight tap ``first_tap - t*tap_step``."""

    axis: Axis
    residue: int
    first_tap: int
    tap_step: int


def _axis_phases(win: Window, index: int, in_size: int) -> list[Phase]:
    """The ``stride`` phases of one axis. Output o gets tap k from input i = (o + pad - k*d) / s when
    that divides; with o = q*s + r the taps that divide are k = k_r + t*s/g (g = gcd(s, d)) and
    i = q + c_r - t*d/g, c_r = (r + pad - k_r*d) / s; counting t from the far end makes the
    dilation positive (pad = (T-1)*d/g - c_r)."""
    s, d, pad, kernel, out = (win.strides[index], win.dilations[index], win.pads_begin[index],
                              win.kernel[index], win.out[index])
    g = math.gcd(s, d)
    phases = []
    for r in range(min(s, out)):
        k_r = next((k for k in range(s // g) if (k * d - r - pad) % s == 0), kernel)
        taps = max(0, -(-(kernel - k_r) // (s // g)))
        c_r = (r + pad - k_r * d) // s
        axis = Axis(in_size, -(-(out - r) // s), taps, 1, d // g, (taps - 1) * (d // g) - c_r)
        phases.append(Phase(axis, r, k_r + (taps - 1) * (s // g), s // g))
    return phases


@emitter("ConvTranspose", channels_last=weights_known)
def conv_transpose(k: KernelContext) -> None:
    """Y[o] = bias + sum of X[i] * W[tap] over the (i, tap) with i*stride - pad + tap*dilation = o:
    each combination of per-axis phases (o mod stride) is a dense stride-1 correlation, register
    tiled like Conv, whose outputs land every ``stride`` positions of Y."""
    if k.attrs.channels_last:
        conv_channels_last.emit_conv_transpose(k)
        return
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y = k.outputs[0]
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    win = ConvTranspose.geometry(k.attrs, x.shape, w.shape)
    group = k.attrs.group
    in_group = x.shape[1] // group
    w_taps, y_strides = w.strides[2:], y.strides[2:]
    for phases in itertools.product(*(_axis_phases(win, i, size) for i, size in enumerate(x.shape[2:]))):
        cr = Correlation(x, w, bias, y, [p.axis for p in phases], group, w.strides[1], w.strides[0],
                         in_group * w.strides[0], tuple(-p.tap_step * ws for p, ws in zip(phases, w_taps)),
                         sum(p.first_tap * ws for p, ws in zip(phases, w_taps)),
                         tuple(s * ys for s, ys in zip(win.strides, y_strides)),
                         sum(p.residue * ys for p, ys in zip(phases, y_strides)))
        emit_correlation(k, num, cr)


# the channels-last and flattened-plane kernels build on this file (imported last: they import it; this
# also registers the channels-last weight layouts)
from pegasus.exporters.glow.kernels import conv_channels_last, conv_lanes, conv_plane  # noqa: E402
