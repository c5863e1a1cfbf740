"""Emitters for Conv and ConvTranspose on channels-last activations (``channels_last``: X is (N, D1..Dn, C)
and Y is (N, O1..On, M), pegasus/ops/layout.py), so TFLite/Keras/TensorFlow models run without a
transpose around every layer.

Channels are the contiguous axis, so the kernels vectorise across them: a register tile is a few output
positions along the row times a block of output channels (vectors over M). The weights are re-laid at
export (``pack_conv``/``pack_conv_transpose``, applied by exporters/glow/lower.py so NAME.weights.bin holds
this layout) as W'[k1..kn, ci, m] — (k..., C/group, M) — whose rows over m are contiguous:

- dense and grouped convolutions are outer products: per tap and input channel ci, one vector of
  weights W'[k, ci, m0:] per vector of the block, one broadcast input X[p', ci] per position, every
  pair multiplied into the tile's accumulators (1×1 convolutions are exactly a matrix product);
- depthwise convolutions (one input channel per group, any multiplier) read the input by channel vector
  too: Y[p, m0:] += X[p', m0/multiplier:] * W'[k, 0, m0:]; the row's taps are unrolled so the inputs a
  neighbouring position shares are loaded once (LLVM merges the identical loads).

The geometry is conv.py's ``Axis``: the outer axes' in-bounds tap ranges are computed per position, the
row's taps per tile: interior tiles read every tap, tiles at the padding or the row's end (static
starts) skip the taps each position has outside the input, so no tap tests a bound. The accumulators
start at the bias, and a fused element-wise epilogue (conv.py's ``Epilogue``) is applied before the store.
ConvTranspose is one stride-1 correlation per stride phase, as in conv.py (``axis_phases``).

Tiles are sized from the register file (``simd_of``, ``tile_shape``): on a scalar FPU (Cortex-M4/M7)
the "vectors" are single floats, so a dense tile is positions × channels of scalars and a depthwise tile a
run of positions along the row (each input loaded once for all the row taps that read it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, require_dtype
from pegasus.exporters.glow.kernels.reference.conv import weights_known
from pegasus.exporters.glow.kernels.reference.epilogue import Epilogue, layer_epilogue
from pegasus.exporters.glow.kernels.registry import channels_last_ops, packer
from pegasus.exporters.glow.kernels.strategy import Choice, Query, Verdict, implementation
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.simd import Simd, simd_of, vconst
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import for_tiles, pieces, range_nest
from pegasus.exporters.glow.llvm.types import Value
from pegasus.exporters.glow.llvm.windows import Axis, axes_of, axis_phases
from pegasus.ops.conv import Conv, ConvTranspose

# ----------------------------------------------------------------------------------------------------
# Weights: (M, C/group, k...) for Conv, (C, M/group, k...) for ConvTranspose  ->  W'[k..., ci, m]


channels_last_ops("Conv", "ConvTranspose", supports=weights_known)


def applies(query: Query) -> Verdict:
    """A channels-last layer (lowering left it so: its weights are constants) whose layer ends without a pooling."""
    if not query.node.attrs.channels_last:
        return "channels first"
    return True if query.layer.pool is None else "heads a pooling"


@packer("conv.channels_last", "conv.pooled")
def pack_conv(query: Query, choice: Choice) -> dict[int, np.ndarray]:
    """W[m, ci, k...] -> W'[k..., ci, m] for a channels-last layer (with its pooling too: pool_channels_last.py)."""
    if not query.node.attrs.channels_last:
        return {}
    w = query.graph.value_of(query.node.inputs[1])
    return {1: np.ascontiguousarray(w.transpose(*range(2, w.ndim), 1, 0))}


@packer("conv_transpose.channels_last")
def pack_conv_transpose(query: Query, choice: Choice) -> dict[int, np.ndarray]:
    """W[g*Cg + ci, j, k...] connects input channel g*Cg + ci to output g*Mg + j: W'[k..., ci, g*Mg + j]."""
    w = query.graph.value_of(query.node.inputs[1])
    group, n = query.node.attrs.group, w.ndim - 2
    grouped = w.reshape((group, w.shape[0] // group) + w.shape[1:])      # (G, Cg, Mg, k...)
    relaid = grouped.transpose(*range(3, 3 + n), 1, 0, 2)                # (k..., Cg, G, Mg)
    return {1: np.ascontiguousarray(relaid).reshape(w.shape[2:] + (w.shape[0] // group, group * w.shape[1]))}


# ----------------------------------------------------------------------------------------------------
# Geometry


@dataclass(frozen=True)
class Correlation:
    """Y[n, o..., m] = bias[m] + sum over the group's input channels ci and taps k of
    X[n, o*stride - pad + k*dilation..., g*Cg + ci] * W'[k..., ci, m] (m in group g). ``w_taps``/``w_offset``
    and ``y_steps``/``y_offset`` place the taps in W' and the positions in Y (a ConvTranspose phase reads
    its taps backwards and writes every stride-th position)."""

    x: TensorRef
    w: TensorRef
    bias: TensorRef | None
    y: TensorRef
    axes: list[Axis]
    group: int
    w_taps: tuple[int, ...]
    w_offset: int
    y_steps: tuple[int, ...]
    y_offset: int = 0
    epilogue: Epilogue = Epilogue()

    @property
    def in_group(self) -> int:
        return self.x.shape[-1] // self.group

    @property
    def out_group(self) -> int:
        return self.y.shape[-1] // self.group

    def depthwise(self, lanes: int) -> bool:
        """Whether to vectorise across groups: one input channel per group (output channel m reads input
        channel m // out_group) and fewer output channels per group than a vector holds (more are
        vectorised within the group, as outer products)."""
        return self.in_group == 1 and (self.out_group == 1 or self.out_group < lanes)


#: bytes a Thumb-2 VLDR reaches from its base register (a scalar FPU's loads: ``tile_shape``)
SCALAR_LOAD_REACH = 1020


def _balanced(needed: int, most: int) -> int:
    """Vectors per block when ``needed`` vectors are cut into blocks of at most ``most``, evenly."""
    most = max(1, min(needed, most))
    return -(-needed // -(-needed // most))


def tile_shape(simd: Simd, num: Numeric, row: int, channels: int, depthwise: bool, taps: int = 1) -> tuple[int, int]:
    """(positions, vectors) of a register tile over a row of ``row`` outputs and ``channels`` channels,
    keeping accumulators and the operands live with them in registers (a spill inside the inner loop
    costs more than a smaller tile). Depthwise: as many positions as the accumulator registers allow
    next to a weight vector per row tap (``taps``) — each input vector then serves up to ``taps``
    positions — and the rest across channels. Dense: the shape that loads the fewest operands over the
    layer (per tap and input channel, a tile loads one input per position and one weight vector per
    vector), ties going to the larger tile, with registers left for its weight vectors, the broadcast
    input and one more. On a scalar FPU (Cortex-M) a depthwise tile reads, if it can with 4 positions or
    more, within the reach of a load's immediate offset (Thumb-2 VLDR: 1020 bytes): further inputs each
    cost an address computation."""
    lanes, budget = simd.lanes(num.compute), simd.accumulators
    needed = len(pieces(channels, lanes))
    if depthwise:
        positions = max(1, min(row, budget, simd.registers - 1 - taps))
        near = SCALAR_LOAD_REACH // (channels * np.dtype(num.dtype.numpy).itemsize) - (taps - 1)
        if lanes == 1 and near >= 4:
            positions = min(positions, near)
        return positions, _balanced(needed, min(budget // positions, (simd.registers - 1) // (positions + taps)))
    best = None
    for positions in range(1, min(row, simd.registers) + 1):
        most = (simd.registers - 2) // (positions + 1)
        if most < 1:
            break
        vectors = _balanced(needed, most)
        loads = -(-needed // vectors) * row + -(-row // positions) * needed
        key = (loads, -positions * vectors)
        if best is None or key < best[0]:
            best = (key, (positions, vectors))
    return best[1]


def row_tiles(axis: Axis, width: int) -> list[tuple[int, int, int, bool]]:
    """(start, tiles, positions, interior) runs covering a row of ``axis.out`` outputs in tiles of ``width``:
    consecutive interior tiles (every tap of every position inside the input) form one run, to be looped
    over; any other tile (at the padding, or the shorter last one) stands alone."""
    first, end = axis.interior()
    runs: list[list] = []
    for start in range(0, axis.out, width):
        count = min(width, axis.out - start)
        interior = count == width and first <= start and start + count <= end
        previous = runs[-1] if runs else None
        if interior and previous and previous[3] and previous[0] + previous[1] * width == start:
            previous[1] += 1
        else:
            runs.append([start, 1, count, interior])
    return [tuple(run) for run in runs]


@dataclass(frozen=True)
class Tile:
    """Outputs ``first + p*step`` (p < ``count``) of the row at the outer positions ``outer``; ``start`` is
    the static ``first`` of a tile that is not interior (None: every tap of every position is inside).
    A step above 1 serves pooling fused after the convolution (pool_channels_last.py)."""

    outer: list[Value]
    first: Value
    count: int
    start: int | None
    step: int = 1

    def row_taps(self, axis: Axis) -> list[tuple[int, list[int]]]:
        """Per tap of the row, the positions of the tile reading inside the input (taps with none left out)."""
        taps = []
        for k in range(axis.kernel):
            inside = [p for p in range(self.count) if self.start is None or 0 <= (
                self.start + p * self.step) * axis.stride - axis.pad + k * axis.dilation < axis.size]
            if inside:
                taps.append((k, inside))
        return taps


def sweep_rows(b, axes: list[Axis], width: int, visit: Callable[[Tile], None]) -> None:
    """Loops over the outer axes' outputs; along the row, ``row_tiles`` (interior runs looped)."""
    *outer, last = axes
    with loop_nest(b, [a.out for a in outer]) as position:
        for start, tiles, count, interior in row_tiles(last, width):
            if tiles == 1:
                visit(Tile(position, const(start), count, None if interior else start))
                continue
            with for_range(b, tiles, name="tile") as t:
                visit(Tile(position, affine(b, start, (t, width)), count, None))


# ----------------------------------------------------------------------------------------------------
# Register tiles


@dataclass(frozen=True)
class Block:
    """Output channels ``m0`` (global index, i32) onwards, as vectors of the widths of ``pieces``; ``group``
    (dense correlations) is the group they belong to."""

    m0: Value
    pieces: list[tuple[int, int]]
    group: Value | None = None


def _start(num: Numeric, cr: Correlation, block: Block, count: int) -> list[Accumulators]:
    """One accumulator per position and vector of the block, holding the bias (or zero)."""
    accs = []
    for offset, width in block.pieces:
        acc = Accumulators(num, count, width)
        start = num.load(cr.bias, affine(num.b, offset, (block.m0, 1)), width) if cr.bias is not None \
            else num.constant(0, width)
        for p in range(count):
            acc.set(p, start)
        accs.append(acc)
    return accs


def _outer_taps(b, cr: Correlation, tile: Tile, batch: Value, body: Callable[[Value, Value], None]) -> None:
    """For each in-bounds tap of the outer axes: body(x_row, w_row), the flat offsets of the tap's input
    row (at the batch, before the row axis and channel terms) and of its weights."""
    *outer, _ = cr.axes
    x_strides, w_strides = cr.x.strides[1:-1], cr.w_taps
    with range_nest(b, [axis.taps(b, o) for axis, o in zip(outer, tile.outer)]) as taps:
        x_terms = [(axis.origin(b, o), s) for axis, o, s in zip(outer, tile.outer, x_strides)]
        x_terms += [(k, axis.dilation * s) for axis, k, s in zip(outer, taps, x_strides)]
        body(affine(b, 0, (batch, cr.x.strides[0]), *x_terms), affine(b, cr.w_offset, *zip(taps, w_strides)))


def _column(b, cr: Correlation, tile: Tile, p: int, k: Value | int) -> Value:
    """Input column read by position p of the tile at row tap k, times the column stride of X."""
    last = cr.axes[-1]
    column = affine(b, p * tile.step * last.stride - last.pad, (tile.first, last.stride), (k, last.dilation))
    return affine(b, 0, (column, cr.x.strides[-2]))


def _dense_taps(num: Numeric, cr: Correlation, block: Block, tile: Tile, accs: list[Accumulators],
                x_row: Value, w_row: Value) -> None:
    """Outer products: per row tap and input channel, weight vectors W'[k, ci, block] times one broadcast
    input per position."""
    b = num.b
    last = cr.axes[-1]
    x_row = affine(b, 0, (x_row, 1), (block.group, cr.in_group))

    def channels(k: Value | int, positions: list[int]) -> None:
        columns = {p: _column(b, cr, tile, p, k) for p in positions}
        with for_range(b, cr.in_group, name="ci") as ci:
            w_flat = affine(b, 0, (w_row, 1), (k, cr.w_taps[-1]), (ci, cr.y.shape[-1]), (block.m0, 1))
            weights = [num.load(cr.w, affine(b, offset, (w_flat, 1)), width) for offset, width in block.pieces]
            for p in positions:
                x_flat = affine(b, 0, (x_row, 1), (columns[p], 1), (ci, 1))
                for acc, (_, width), weight in zip(accs, block.pieces, weights):
                    acc.mul_add(p, num.load(cr.x, x_flat, width, 0), weight)

    if tile.start is None:
        with for_range(b, last.kernel, name="kw") as k:
            channels(k, list(range(tile.count)))
    else:
        for k, positions in tile.row_taps(last):
            channels(k, positions)


def _channel_vector(num: Numeric, cr: Correlation, flat: Value, m0: Value, offset: int, width: int) -> Value:
    """Input lanes for output channels m0+offset .. +width of a depthwise correlation: input channel
    m // multiplier of each (a contiguous vector when the multiplier is 1, else a short one spread out)."""
    multiplier = cr.out_group
    if multiplier == 1:
        return num.load(cr.x, affine(num.b, offset, (flat, 1), (m0, 1)), width)
    # m0 is a multiple of the block, itself of the multiplier (``emit_correlation``): lanes are static
    first = offset // multiplier
    count = (offset + width - 1) // multiplier - first + 1
    b = num.b
    base = affine(b, 0, (flat, 1), (b.sdiv(m0, const(multiplier)), 1))
    short = num.load(cr.x, affine(b, first, (base, 1)), count)
    if count == 1:
        return num.splat(b.extract_element(short, const(0)), width)
    return b.shuffle_vector(short, short, vconst([(offset + lane) // multiplier - first for lane in range(width)]))


def _depthwise_taps(num: Numeric, cr: Correlation, block: Block, tile: Tile, accs: list[Accumulators],
                    x_row: Value, w_row: Value) -> None:
    """Y[p, block] += X[p', block / multiplier] * W'[k, 0, block] per position and tap, row taps unrolled."""
    b = num.b
    for k, positions in tile.row_taps(cr.axes[-1]):
        w_flat = affine(b, k * cr.w_taps[-1], (w_row, 1), (block.m0, 1))
        weights = [num.load(cr.w, affine(b, offset, (w_flat, 1)), width) for offset, width in block.pieces]
        for p in positions:
            x_flat = affine(b, 0, (x_row, 1), (_column(b, cr, tile, p, k), 1))
            for acc, (offset, width), weight in zip(accs, block.pieces, weights):
                acc.mul_add(p, _channel_vector(num, cr, x_flat, block.m0, offset, width), weight)


def correlate(num: Numeric, cr: Correlation, batch: Value, block: Block, tile: Tile) -> list[Accumulators]:
    """Accumulators (per vector of the block, one per position of the tile) of Y[batch, tile, block]."""
    accs = _start(num, cr, block, tile.count)
    taps = _dense_taps if block.group is not None else _depthwise_taps
    _outer_taps(num.b, cr, tile, batch, lambda x_row, w_row: taps(num, cr, block, tile, accs, x_row, w_row))
    return accs


def _store(num: Numeric, cr: Correlation, batch: Value, block: Block, tile: Tile,
           accs: list[Accumulators]) -> None:
    b = num.b
    row = affine(b, cr.y_offset, (batch, cr.y.strides[0]), (block.m0, 1),
                 *zip([*tile.outer, tile.first], cr.y_steps))
    for p in range(tile.count):
        for acc, (offset, _) in zip(accs, block.pieces):
            flat = affine(b, offset + p * cr.y_steps[-1], (row, 1))
            num.store(cr.y, flat, cr.epilogue(num, acc.get(p), flat))


@dataclass(frozen=True)
class Plan:
    """How a correlation is tiled on the target: ``depthwise`` (vectors across groups) or not, tiles of
    ``positions`` outputs along the row times blocks of ``size`` channels cut in vectors of ``lanes``."""

    depthwise: bool
    positions: int
    size: int
    lanes: int

    def blocks(self, b, cr: Correlation, body: Callable[[Block], None]) -> None:
        """Calls body once per block of output channels (inside the loops the blocks need)."""
        if self.depthwise:
            for_tiles(b, 0, cr.y.shape[-1], self.size, lambda m0, count: body(Block(m0, pieces(count, self.lanes))))
            return
        with for_range(b, cr.group, name="g") as group:
            def block(local0: Value, count: int) -> None:
                m0 = affine(b, 0, (group, cr.out_group), (local0, 1))
                body(Block(m0, pieces(count, self.lanes), group))

            for_tiles(b, 0, cr.out_group, self.size, block)


def plan(simd: Simd, num: Numeric, cr: Correlation, row: int) -> Plan:
    """The tiling of ``cr`` for a row of ``row`` tiles' positions."""
    lanes = simd.lanes(num.compute)
    depthwise = cr.depthwise(lanes)
    channels = cr.y.shape[-1] if depthwise else cr.out_group
    positions, vectors = tile_shape(simd, num, row, channels, depthwise, cr.axes[-1].kernel)
    size = vectors * lanes
    if depthwise:     # blocks start on a multiple of the multiplier: the lanes' input channels are static
        size = max(cr.out_group, size // cr.out_group * cr.out_group)
    return Plan(depthwise, positions, size, lanes)


def emit_correlation(k: KernelContext, num: Numeric, cr: Correlation) -> None:
    """Loops over batch, (group,) blocks of output channels, and the output positions in tiles."""
    b = k.builder
    tiling = plan(simd_of(k.target), num, cr, cr.axes[-1].out)

    def sweep(batch: Value, block: Block) -> None:
        sweep_rows(b, cr.axes, tiling.positions,
                   lambda tile: _store(num, cr, batch, block, tile, correlate(num, cr, batch, block, tile)))

    with for_range(b, cr.x.shape[0], name="n") as batch:
        tiling.blocks(b, cr, lambda block: sweep(batch, block))


# ----------------------------------------------------------------------------------------------------
# Conv and ConvTranspose


def conv_correlation(k: KernelContext, epilogue: Epilogue) -> Correlation:
    """The Correlation of the layer's channels-last Conv (inputs X, W' packed, [B]) into its output."""
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    win = Conv.geometry(k.attrs, (1, 1) + x.shape[1:-1], (1, 1) + w.shape[:-2])
    return Correlation(x, w, bias, y, axes_of(win, x.shape[1:-1]), k.attrs.group, w.strides[:-2], 0,
                       y.strides[1:-1], epilogue=epilogue)


@implementation("conv.channels_last", "Conv", "Conv+group", family="reference", priority=60, when=applies)
def emit_conv(k: KernelContext) -> None:
    """Channels-last Conv, outputs through the layer's epilogue (fused element-wise layers) before the store."""
    k, epilogue = layer_epilogue(k)
    emit_correlation(k, Numeric(k.builder, require_dtype(k, FLOATS)), conv_correlation(k, epilogue))


@implementation("conv_transpose.channels_last", "ConvTranspose", family="reference", priority=10,
                when=lambda query: bool(query.node.attrs.channels_last) or "channels first")
def emit_conv_transpose(k: KernelContext) -> None:
    """Channels-last ConvTranspose: per combination of the axes' stride phases (conv.py's ``axis_phases``),
    a stride-1 correlation reading its taps backwards, writing every stride-th output."""
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    kernel = w.shape[:-2]
    win = ConvTranspose.geometry(k.attrs, (1, 1) + x.shape[1:-1], (1, 1) + kernel)
    w_strides, y_strides = w.strides[:-2], y.strides[1:-1]
    for phases in itertools.product(*(axis_phases(win, i, size) for i, size in enumerate(x.shape[1:-1]))):
        cr = Correlation(x, w, bias, y, [p.axis for p in phases], k.attrs.group,
                         tuple(-p.tap_step * s for p, s in zip(phases, w_strides)),
                         sum(p.first_tap * s for p, s in zip(phases, w_strides)),
                         tuple(s * ys for s, ys in zip(win.strides, y_strides)),
                         sum(p.residue * ys for p, ys in zip(phases, y_strides)))
        emit_correlation(k, num, cr)
