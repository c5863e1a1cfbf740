"""Emitters for the convolutions (Conv, ConvTranspose), on the sliding-window sweeps of llvm/windows.py that the
pooling kernels share with them.

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
(``axis_phases``), so it needs no scatter and no accumulation in memory.

A Conv fused with element-wise consumers (exporters/glow/fuse.py) applies them as an ``Epilogue`` (epilogue.py) to
each accumulator vector before storing it, a residual sum's other operand read at the store's own index and
lanes (every store site passes them); conv_pool.py's ``emit_conv_pool`` reduces ``correlate``'s register tiles
straight into pooled outputs.

The Conv implementations are registered by the files that emit them (kernels/strategy.py; schedule/select.py
chooses): conv_plane.py (channels first: pointwise, im2col, row taps, direct), conv_lanes.py (x86),
conv_channels_last.py and conv_pool.py (a Conv with its pooling).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, require_dtype
from pegasus.exporters.glow.kernels.reference.epilogue import Epilogue
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.copies import copy_strided, fill_strided
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.simd import Simd, prefetch_span, simd_of
from pegasus.exporters.glow.llvm.tensors import (
    TensorRef,
    flat_spatial,
)
from pegasus.exporters.glow.llvm.tiles import for_tiles, range_nest
from pegasus.exporters.glow.llvm.types import Value
from pegasus.exporters.glow.llvm.windows import (
    Axis,
    Tile,
    axes_of,
    axis_phases,
    ceil_div,
    pointwise,
    sweep_tiles,
)
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv, ConvTranspose
from pegasus.ops.spatial import Window


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


def row_taps_bytes(k: KernelContext) -> int:
    """The workspace of a Conv strided along its last axis on a hosted target, which gathers once what its taps
    read, so each block of output channels reads contiguous vectors (rather than shuffling strided loads, once
    per block: ResNet-50's stride-2 projections ran at 22-33 GF/s): a pointwise one the input positions it reads
    (``pointwise_correlation``), any other each tap's run of the last axis (``row_taps_correlation``); also
    what a staged Conv + pool gathers. 0: none."""
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
        first = min(out, max(0, ceil_div(-shift, stride)))
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


def pointwise_correlation(k: KernelContext, epilogue: Epilogue, win: Window) -> Correlation:
    """A pointwise Conv on a hosted target as a correlation over the flattened positions (one axis: rows as
    long as the whole plane, so a 7x7 plane fills 16-lane tiles instead of 8-lane rows of 7). Strided: over the
    input positions it reads, gathered into the workspace first (``row_taps_bytes``)."""
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    source = flat_spatial(x)
    gathered = row_taps_bytes(k)
    if gathered:
        assert k.workspace is not None, f"layer '{k.node.name}': its strided pointwise Conv has no workspace"
        source = flat_spatial(gather_positions(k.builder, k.scratch(x.element, gathered), x, win))
    positions = source.shape[2]
    group = k.attrs.group
    return Correlation(source, w, bias, flat_spatial(y), [Axis(positions, positions, 1, 1, 1, 0)], group, w.strides[0],
                       w.strides[1], y.shape[1] // group * w.strides[0], (0,), epilogue=epilogue)


def weights_known(node: Node, graph: Graph) -> bool:
    """Channels-last convolutions run natively when their weights are constants (re-laid at export)."""
    return graph.tensors[node.inputs[1]].is_constant


# ----------------------------------------------------------------------------------------------------
# ConvTranspose


@emitter("ConvTranspose")
def conv_transpose(k: KernelContext) -> None:
    """Y[o] = bias + sum of X[i] * W[tap] over the (i, tap) with i*stride - pad + tap*dilation = o:
    each combination of per-axis phases (o mod stride) is a dense stride-1 correlation, register
    tiled like Conv, whose outputs land every ``stride`` positions of Y (channels first; channels last:
    conv_channels_last.py)."""
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y = k.outputs[0]
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    win = ConvTranspose.geometry(k.attrs, x.shape, w.shape)
    group = k.attrs.group
    in_group = x.shape[1] // group
    w_taps, y_strides = w.strides[2:], y.strides[2:]
    for phases in itertools.product(*(axis_phases(win, i, size) for i, size in enumerate(x.shape[2:]))):
        cr = Correlation(x, w, bias, y, [p.axis for p in phases], group, w.strides[1], w.strides[0],
                         in_group * w.strides[0], tuple(-p.tap_step * ws for p, ws in zip(phases, w_taps)),
                         sum(p.first_tap * ws for p, ws in zip(phases, w_taps)),
                         tuple(s * ys for s, ys in zip(win.strides, y_strides)),
                         sum(p.residue * ys for p, ys in zip(phases, y_strides)))
        emit_correlation(k, num, cr)

