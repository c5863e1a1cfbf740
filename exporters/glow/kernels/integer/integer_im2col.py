"""QConv as im2col + dot products, the kernel of every convolution that integer_conv.py sends no other way.

The receptive fields of a tile of output positions are copied, centred, into a scratch buffer
(integer_im2col_rows.py; zeros for the padding; windows inside the input read through a constant table of tap
offsets, windows crossing the padding test every tap), then each block of output channels takes dot products of its
contiguous weight rows with the buffer's rows — loops of constant trip count over a contiguous reduction axis, which
LLVM vectorises on the host. The buffer takes ``positions * depth`` 16-bit values (32-bit when ``x - zx`` needs
them) of the layer's workspace in the activations region: 2 positions on Cortex-M, 4 elsewhere, fewer if that would
pass 16 KB.

On Cortex-M CPUs with the DSP extension (M4/M7/M33/M55) the dot products use SMLAD, two 16-bit MACs per
instruction (integer_smlad.py): the buffer holds each group of four taps of a position as the pairs
(x0, x2), (x1, x3) — what SXTB16 makes of a weight word of bytes, and what 8-bit weights stored as pairs
hold (integer_conv_weights.spread_pairs) — and a block of 2 channels x 2 positions over pairs takes 10
instructions per 16 MACs. Channels last, a weight row is (k..., C/group) (integer_conv_plan.py), so each row
of the window along its last axis is one contiguous run of the input: 8-bit inputs are copied a word of four
at a time, SXTAB16/UXTAB16 centring the two pairs, one STRD storing them (``Words``). A paired layer of fewer
than four (or not a multiple of four) input channels — a first layer: RGB, a spectrogram — stores its taps
reordered (integer_conv_plan.stored_taps), each row's whole words first, the rows' last taps after them, so
that it is copied the same way. A window crossing the padding takes each tap's words from the input or from
a constant run of zero points (a multiple of four channels), or copies its rows inside the input as words,
stores zeros for rows in the padding and goes tap by tap through the rows the padding cuts (reordered taps);
other layers test each tap. A 1x1 convolution
takes the same route: reading each pixel's channels straight from the input instead would unpack every input
word once per pair of output channels rather than once. Cortex-M7, int8, MACs per instruction (from 0.43 to
1.21 before the LDM groups, the word copies of first layers and the doubled weights): MobileNetV1's 1x1 layers
0.52 (8 -> 16 channels: the requantisation of 8-MAC outputs dominates), 0.79, 1.04, then 1.25 to 1.46 from 64
channels on; ResNet-8's 3x3 layers with their residual add 1.20 / 1.28 / 1.43 at 16 / 32 / 64 channels;
DS-CNN's 1x1 64 -> 64 1.26; the first layers 0.76 (MobileNetV1, 3 channels), 0.85 (ResNet-8), 1.06 (DS-CNN's
10x4 window of 1 channel). A layer whose biases and weights were replaced by a ``tile_stream``
(integer_conv_plan.py: TFLite rounding with a fused ReLU, an even number of output channels, at most 72
groups) computes every block of a tile in one function (integer_smlad_tile.py; MobileNetV1's 1x1 layers then
0.96 from 16 channels, 1.17 to 1.21 from 32, 1.36 from 64, 1.43 to 1.49 from 128 and 256); a 1x1 layer of 4 or
8 input channels holds each position's inputs in registers instead (integer_pointwise_dsp.py; MobileNetV1's
8 -> 16: 0.81).

On x86-64 the dot products use PMADDWD (integer_madd.py; VPDPWSSD with AVX-512 VNNI) whenever the
accumulator is i32 and both sides are 16-bit values: one vector accumulator per output over the
buffer's rows (whole vectors, then pieces of 16, 8 and a zero-padded rest), 4 positions x 4 channels
with AVX-512, summed by one tree per tile.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import (
    TILE_TAIL,
    ConvPlan,
    block_layout,
    pointwise_layout,
    tile_layout,
)
from pegasus.exporters.glow.kernels.integer.integer_dot import (
    Requant,
    acc_bound,
    accumulate,
    finish,
    seeds_bias,
    zeroed,
)
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour_of
from pegasus.exporters.glow.kernels.integer.integer_im2col_rows import (
    Taps,
    im2col,
)
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import I16, I32, I64, Value
from pegasus.ops.spatial import prod


def _dot_plain(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
    """acc[c][p] = Σ_k buffer[p][k] * W[row c][k]: one loop over k, every access contiguous."""
    acc = cp.mac.acc
    slots = [[zeroed(b, acc) for _ in range(count)] for _ in w_rows]
    with for_range(b, cp.mac.depth, name="k") as kk:
        xs = [widen(b, b.load(b.gep(buffer, [cp.slot(b, p, kk)], inbounds=True)), acc, True)
              for p in range(count)]
        for c, w_row in enumerate(w_rows):
            weight = widen(b, cp.w.load(b, affine(b, 0, (w_row, 1), (kk, 1))), acc, cp.mac.w.signed)
            for p in range(count):
                accumulate(b, slots[c][p], b.mul(xs[p], weight))
    return [[b.load(slot) for slot in row] for row in slots]


@dataclass
class _Im2colConv:
    """One QConv layer computed as tiles of output positions (``qconv_im2col``): the tiles' buffer of receptive
    fields and their sums, the requantisation, how the layer's blocks read their parameters (``layout``: a
    ``block_table``; ``tiled``: a tile_stream) and whether the SMLAD sums start at the (doubled) biases."""

    b: ir.IRBuilder
    cp: ConvPlan
    taps: Taps
    rq: Requant
    layout: int | None
    tiled: bool
    buffer: Value
    sums: Value | None
    seeded: bool
    doubled: bool

    def dot(self, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
        cp = self.cp
        dot = flavour_of("smlad.dot") if cp.dual else flavour_of("madd.dot") if cp.madd else _dot_plain
        return dot(self.b, cp, buffer, w_rows, count)

    def table_words(self, at: Value, offset: int) -> list[Value]:
        """Two int32 words of the bias tensor at ``at`` + ``offset`` as one LDRD (a volatile 64-bit load)."""
        b = self.b
        both = volatile_load(b, b.bitcast(b.gep(at, [const(offset)], inbounds=True), I64.as_pointer()), 4)
        return [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]

    def block(self, at: Value, w_at: Value, y_at: Value, width: int, count: int, buffer: Value) -> None:
        """A block of ``width`` channels from the ``block_table`` (at ``at``: its doubled biases, then (M, t) or
        (M, t + 1) of each channel, and the channels' K), the weights at ``w_at``, the outputs at ``y_at``."""
        b, cp = self.b, self.cp
        acc = flavour_of("smlad.dot")(b, cp, buffer, [None] * width, count, self.table_words(at, 0)[:width],
                                      base=w_at)
        past = cp.mac.depth if self.tiled else 0     # a tile_stream's parameters follow the pair's weights
        m0, s0, m1, s1 = self.table_words(at, 2 + past) + self.table_words(at, 4 + past)
        ks = self.table_words(at, 6 + past) if self.layout == 8 or self.tiled else [None, None]
        parameters = [(m0, s0, ks[0]), (m1, s1, ks[1])]
        cells = [(c, p) for c in range(width) for p in range(count)]
        values = self.rq.many(b, [(acc[c][p], None, None) for c, p in cells], doubled=True,
                              parameters=[parameters[c] for c, _ in cells])
        for (c, p), value in zip(cells, values):
            b.store(value, b.gep(y_at, [const(p * cp.ya.position + c)], inbounds=True))

    def blocks(self, batch: Value, first: Value, count: int, buffer: Value) -> None:
        """The blocks of a tile of a layer with a ``block_table``: a loop over pairs of channels walking three
        pointers (table, weights, outputs), laundered so that LLVM keeps them as they are rather than indices
        (each an add per block, no base kept), then an odd last channel."""
        b, cp, tiled = self.b, self.cp, self.tiled
        pairs = cp.out_group // 2
        table = b.bitcast(cp.bias.ptr, I32.as_pointer())
        size = cp.mac.depth + TILE_TAIL if tiled else self.layout    # words a pair takes in the table (or stream)
        weights = b.gep(table, [const(2)], inbounds=True) if tiled else cp.w.ptr
        starts = [table, b.bitcast(weights, I16.as_pointer()),
                  cp.y.address(b, affine(b, 0, (batch, cp.ya.batch), (first, cp.ya.position)))]
        steps = [size, 2 * size if tiled else 2 * cp.mac.depth, 2]
        ends = starts
        if pairs:
            entry = b.block
            body, after = b.append_basic_block("blocks.body"), b.append_basic_block("blocks.end")
            end = b.gep(starts[0], [const(pairs * size)], inbounds=True)
            b.branch(body)
            b.position_at_end(body)
            phis = [b.phi(start.type) for start in starts]
            self.block(*phis, 2, count, buffer)
            ends = [opaque(b, b.gep(phi, [const(step)], inbounds=True)) for phi, step in zip(phis, steps)]
            for phi, start, following in zip(phis, starts, ends):
                phi.add_incoming(start, entry)
                phi.add_incoming(following, b.block)
            b.cbranch(b.icmp_unsigned("!=", ends[0], end), body, after)
            b.position_at_end(after)
        if cp.out_group % 2:
            self.block(*ends, 1, count, buffer)

    def seeds(self, chans: list[Value]) -> list[Value]:
        """The (int32) biases of a block's channels, doubled for doubled weights; two as one LDRD (a volatile
        64-bit load)."""
        b, cp = self.b, self.cp
        if len(chans) != 2:
            values = [cp.bias.load(b, chan) for chan in chans]
        else:
            both = volatile_load(b, b.bitcast(cp.bias.address(b, chans[0]), I64.as_pointer()), 4)
            values = [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]
        return [b.add(value, value) for value in values] if self.doubled else values

    def channels(self, batch: Value, group: Value, first: Value, count: int, local0: Value, width: int,
                 buffer: Value) -> None:
        b, cp, ya, sums = self.b, self.cp, self.cp.ya, self.sums
        chans = [affine(b, c, (group, cp.out_group), (local0, 1)) for c in range(width)]
        w_rows = [b.mul(chan, const(cp.mac.depth)) for chan in chans]
        if self.seeded:      # the SMLAD sums start at the biases: no add per output after them
            acc = flavour_of("smlad.dot")(b, cp, buffer, w_rows, count, self.seeds(chans))
        else:
            acc = self.dot(buffer, w_rows, count)
        sum_xs = [b.load(b.gep(sums, [const(0), const(p)], inbounds=True)) if sums is not None else None
                  for p in range(count)]
        cells = [(c, p) for c in range(width) for p in range(count)]
        if self.doubled:
            values = self.rq.many(b, [(acc[c][p], chans[c], None) for c, p in cells], doubled=True)
        else:
            if cp.doubled:      # 2 Σ, exactly even
                acc = [[b.ashr(total, ir.Constant(total.type, 1)) for total in row] for row in acc]
            values = finish(b, cp.mac, [(acc[c][p], sum_xs[p], chans[c]) for c, p in cells],
                            None if self.seeded else cp.bias, self.rq)
        for (c, p), value in zip(cells, values):
            y_row = affine(b, 0, (batch, ya.batch), (chans[c], ya.channel), (first, ya.position))
            cp.y.store(b, value, affine(b, p * ya.position, (y_row, 1)))

    def tile(self, batch: Value, group: Value, first: Value, count: int) -> None:
        b, cp, ya = self.b, self.cp, self.cp.ya
        im2col(b, cp, self.taps, batch, group, first, count, self.buffer, self.sums)
        # the blocks read the rows through a laundered pointer: LLVM then stops carrying copied values across
        # the loop of channel blocks (DS-CNN on Cortex-M7: 0.7 % fewer instructions)
        rows = opaque(b, self.buffer) if cp.dual else self.buffer
        if self.tiled and count > 1:     # one group
            flavour_of("smlad.tile")(b, cp, self.rq, rows, count,
                                     cp.y.address(b, affine(b, 0, (batch, ya.batch), (first, ya.position))))
            return
        if self.layout is not None or self.tiled:      # one group
            self.blocks(batch, first, count, rows)
            return
        for_tiles(b, 0, cp.out_group, cp.block,
                  lambda local0, width: self.channels(batch, group, first, count, local0, width, rows))


def qconv_im2col(k: KernelContext, cp: ConvPlan) -> None:
    """QConv as tiles of output positions: their receptive fields copied into the workspace (``im2col``),
    then dot products with blocks of output channels, each output finished and requantised (``_Im2colConv``)."""
    if pointwise_layout(cp):     # a 1x1 layer of 4 or 8 channels: its inputs held in registers (Cortex-M DSP)
        flavour_of("smlad.pointwise")(k, cp)
        return
    b = k.builder
    taps = Taps.of(k.module, cp)
    # a paired layer's biases may have been replaced by its blocks' table (integer_conv_weights.block_table), which
    # holds the requantisation's parameters too: no tables of Requant's own then
    layout = block_layout(cp)
    tiled = tile_layout(cp)     # or by its tile_stream, which holds the weights too (integer_smlad_tile.py)
    rq = (Requant(k.table, k.attrs, cp.y, acc_bound(cp.sums, cp.bias)) if layout is None and not tiled
          else Requant(lambda values, ty: None, k.attrs, cp.y, acc_bound(cp.sums, None)))
    positions = prod([axis.out for axis in cp.axes])
    words = cp.buffer_bytes // 4
    buffer = b.bitcast(k.scratch(ir.ArrayType(I32, words), cp.buffer_bytes), cp.element.as_pointer())
    sums = entry_alloca(b, ir.ArrayType(cp.mac.acc, cp.positions)) if cp.mac.fold else None
    # the fold of asymmetric weights, subtracted after the seeded sums, wraps back exactly; doubled weights
    # (integer_conv_plan.doubles) seed doubled biases when the requantisation takes 2 (acc + bias) as it is
    seeded = layout is not None or (cp.dual and seeds_bias(cp.sums, cp.bias) and (not cp.doubled or rq.takes_doubled))
    conv = _Im2colConv(b, cp, taps, rq, layout, tiled, buffer, sums, seeded, seeded and cp.doubled)
    with loop_nest(b, [cp.x.shape[0], cp.group]) as (batch, group):
        for_tiles(b, 0, positions, cp.positions, lambda first, count: conv.tile(batch, group, first, count))
