"""QConv as im2col + dot products, the kernel of every convolution that integer_conv.py sends no other way.

The receptive fields of a tile of output positions are copied, centred, into a scratch buffer (zeros for
the padding; windows inside the input read through a constant table of tap offsets, windows crossing the
padding test every tap), then each block of output channels takes dot products of its contiguous weight
rows with the buffer's rows — loops of constant trip count over a contiguous reduction axis, which LLVM
vectorises on the host. The buffer takes ``positions * depth`` 16-bit values (32-bit when ``x - zx`` needs
them) of the layer's workspace in the activations region: 2 positions on Cortex-M, 4 elsewhere, fewer if
that would pass 16 KB.

On Cortex-M CPUs with the DSP extension (M4/M7/M33/M55) the dot products use SMLAD, two 16-bit MACs per
instruction (integer_smlad.py): the buffer holds each group of four taps of a position as the pairs
(x0, x2), (x1, x3) — what SXTB16 makes of a weight word of bytes, and what 8-bit weights stored as pairs
hold (integer_conv_plan.spread_pairs) — and a block of 2 channels x 2 positions over pairs takes 10
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

import itertools
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels import integer_pointwise_dsp
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer_conv_plan import (
    TILE_TAIL,
    ConvPlan,
    block_layout,
    tap_at,
    tap_index,
    tap_offsets,
    tile_layout,
    window_inside,
)
from pegasus.exporters.glow.kernels.integer_dot import (
    Requant,
    acc_bound,
    accumulate,
    centered,
    dsp,
    finish,
    seeds_bias,
    zeroed,
)
from pegasus.exporters.glow.kernels.integer_madd import load_lanes, madd, padded, reduce_all
from pegasus.exporters.glow.kernels.integer_smlad import dot_dual
from pegasus.exporters.glow.kernels.integer_smlad_tile import tile_blocks
from pegasus.exporters.glow.kernels.parameters import load_channel
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.tables import constant_table
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import I16, I32, I64
from pegasus.ops.spatial import prod

Value = ir.Value
#: Most taps a channels-last window may have for its runs to be copied with the taps unrolled.
UNROLLED_TAPS = 64


@dataclass(frozen=True)
class Taps:
    """The taps' input offsets (see ``tap_offsets``), and the same as a constant table in the code."""

    offsets: list[int]
    table: ir.GlobalVariable

    @classmethod
    def of(cls, module: ir.Module, cp: ConvPlan) -> Taps:
        offsets = tap_offsets(cp)
        narrow = max(offsets) < (1 << 15)
        return cls(offsets, constant_table(module, np.asarray(offsets, np.int16 if narrow else np.int32)))


@dataclass(frozen=True)
class Run:
    """A run of a window's taps contiguous in a channels-last input: a row along the window's last axis (or one
    tap when that axis is dilated or the layer grouped) — its first tap's natural index (k..., ci), input
    offset from the window's origin, whole words (count, first group of the row's buffer) and last len % 4
    taps (input offset, place in the row)."""

    tap: int
    offset: int
    words: int
    group: int
    singles: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Words:
    """How the SMLAD path copies a channels-last window of 8-bit inputs a word at a time: its ``runs``, in a
    paired layer's stored order (integer_conv_plan.stored_taps); ``taps`` the per-tap runs (kernel index,
    input offset, first group) a window crossing the padding copies, with a multiple of four channels;
    ``places`` where each natural tap is stored."""

    runs: tuple[Run, ...]
    taps: list[tuple[tuple[int, ...], int, int]]
    places: dict[int, int]

    @classmethod
    def of(cls, cp: ConvPlan, offsets: list[int]) -> Words | None:
        if not (cp.dual and cp.channels_last and cp.x.type.dtype.itemsize == 1 and cp.swapped
                and cp.mac.acc is I32 and (cp.in_group % 4 == 0 or cp.order is not None)):
            return None
        kernel = [axis.kernel for axis in cp.axes]
        order = cp.order or range(cp.mac.depth)
        place = {t: i for i, t in enumerate(order) if t is not None}
        channels = cp.in_group
        # a row's taps are contiguous in the input when the last axis is not dilated and the group is the input
        run = kernel[-1] * channels if cp.axes[-1].dilation == 1 and cp.group == 1 else channels
        whole = run // 4 * 4
        runs = tuple(Run(start, offsets[start], whole // 4, place[start] // 4 if whole else 0,
                         tuple((offsets[t], place[t]) for t in range(start + whole, start + run)))
                     for start in range(0, prod(kernel) * channels, run))
        if sum(bool(r.words) + len(r.singles) for r in runs) > UNROLLED_TAPS and cp.order is None:
            return None     # the table of tap offsets copies it (``interior``)
        taps = [(ks, offsets[s * channels], place[s * channels] // 4)
                for s, ks in enumerate(itertools.product(*(range(n) for n in kernel)))] if channels % 4 == 0 else []
        return cls(runs, taps, place)


@dataclass
class _Window:
    """The copy of one output position's receptive field into its buffer row (``im2col``): the position ``p`` of
    the row and ``position`` in the output, its window's ``origins`` per axis, the running sum of the row (when the
    weights have a zero point) and the SMLAD path's helpers (``words``: None off that path)."""

    b: ir.IRBuilder
    cp: ConvPlan
    taps: Taps
    batch: Value
    group: Value
    buffer: Value
    words: Words | None
    spatial: list[int]
    pointwise: bool
    dsp: tuple[ir.Function, ir.Function, Value, Value] | None   # SXTAB16/UXTAB16, SMLAD, -zx pairs, buffer as i32*
    p: Value
    position: Value
    coords: list[Value]
    origins: list[Value]
    running: Value | None

    def put(self, value: Value, slot: Value) -> None:
        b, cp = self.b, self.cp
        b.store(widen(b, value, cp.element, True), b.gep(self.buffer, [slot], inbounds=True))
        if self.running is not None:
            accumulate(b, self.running, widen(b, value, cp.mac.acc, True))

    def put_word(self, word: Value, group: Value) -> None:
        """The four 8-bit inputs of ``word`` centred as the pairs (x0, x2), (x1, x3) of ``group``."""
        b, cp = self.b, self.cp
        centre, smlad, minus_zx, pairs = self.dsp
        both = [b.call(centre, [minus_zx, value])
                for value in (word, b.or_(b.lshr(word, const(8)), b.shl(word, const(24))))]
        slot = b.lshr(cp.group_slot(b, self.p, group, 0), const(1))
        # (x0, x2) and (x1, x3) side by side: one STRD
        b.store(b.or_(b.zext(both[0], I64), b.shl(b.zext(both[1], I64), ir.Constant(I64, 32))),
                b.bitcast(b.gep(pairs, [slot], inbounds=True), I64.as_pointer()), align=4)
        if self.running is not None:
            for pair in both:
                b.store(b.call(smlad, [pair, const(0x10001), b.load(self.running)]), self.running)

    def copy_words(self, address: Value, count: int, group: int) -> None:
        """``count`` words from the i8* ``address`` to the groups from ``group``."""
        b = self.b
        if count == 1:
            self.put_word(b.load(b.bitcast(address, I32.as_pointer()), align=1), const(group))
            return
        with for_range(b, count, name="g") as g:
            at = b.bitcast(b.gep(address, [b.shl(g, const(2))], inbounds=True), I32.as_pointer())
            self.put_word(b.load(at, align=1), affine(b, group, (g, 1)))

    def x_base(self) -> Value:
        cp, xa = self.cp, self.cp.xa
        if self.pointwise:
            return affine(self.b, 0, (self.batch, xa.batch), (self.group, cp.in_group), (self.position, xa.channels))
        return affine(self.b, 0, (self.batch, xa.batch), (self.group, cp.in_group), *zip(self.origins, xa.spatial))

    def x_base_safe(self) -> Value:
        """The first input of the image and group: a place any tap may read, its value discarded."""
        return affine(self.b, 0, (self.batch, self.cp.xa.batch), (self.group, self.cp.in_group))

    def interior(self) -> None:
        b, cp, xa, taps, depth = self.b, self.cp, self.cp.xa, self.taps, self.cp.mac.depth
        base = affine(b, 0, (self.batch, xa.batch), (self.group, cp.in_group * xa.channel),
                      *zip(self.origins, xa.spatial))
        if depth >= 4:
            with for_range(b, depth // 4, name="q") as q:
                for j in range(4):
                    offset = widen(b, load_channel(b, taps.table, affine(b, j, (q, 4))), I32, True)
                    self.put(centered(b, cp.x, b.add(base, offset), cp.mac.x), cp.group_slot(b, self.p, q, j))
        for k in range(depth // 4 * 4, depth):
            self.put(centered(b, cp.x, affine(b, taps.offsets[k], (base, 1)), cp.mac.x), cp.slot(b, self.p, k))

    def word_runs(self) -> None:
        """The SMLAD path's window: its runs a word at a time (SXTAB16/UXTAB16 centre the pairs (x0, x2),
        (x1, x3) that the buffer holds), the runs' last taps one by one."""
        base = self.x_base()
        for run in self.words.runs:
            self.copy_run(base, run)

    def copy_run(self, base: Value, run: Run) -> None:
        b, cp = self.b, self.cp
        if run.words:
            self.copy_words(cp.x.address(b, affine(b, run.offset, (base, 1))), run.words, run.group)
        for offset, place in run.singles:
            self.put(centered(b, cp.x, affine(b, offset, (base, 1)), cp.mac.x), cp.slot(b, self.p, place))

    def inside_taps(self) -> list[list[Value]]:
        """Per axis, per kernel index, whether the tap reads inside the input."""
        b = self.b
        return [[b.icmp_unsigned("<", affine(b, kk * axis.dilation, (origin, 1)), const(axis.size))
                 for kk in range(axis.kernel)] for axis, origin in zip(self.cp.axes, self.origins)]

    def border_rows(self) -> None:
        """A window crossing the padding, fewer than four channels (reordered taps): each row of the window
        inside the input copied as in ``word_runs``, each other tap by tap (zero where it reads the padding)."""
        b, cp, axes = self.b, self.cp, self.cp.axes
        base = self.x_base()
        inside = self.inside_taps()
        last = axes[-1].kernel
        whole_row = inside[-1][0]
        for ok in inside[-1][1:]:
            whole_row = b.and_(whole_row, ok)
        for run in self.words.runs:
            ks = run.tap // cp.in_group // last
            row_ok = None
            for axis_inside, axis in zip(inside[-2::-1], axes[-2::-1]):
                ks, kk = divmod(ks, axis.kernel)
                row_ok = axis_inside[kk] if row_ok is None else b.and_(row_ok, axis_inside[kk])
            full = whole_row if row_ok is None else b.and_(row_ok, whole_row)
            with b.if_else(full) as (then, otherwise):
                with then:
                    self.copy_run(base, run)
                with otherwise:
                    self.part_row(base, run, inside[-1], row_ok)

    def part_row(self, base: Value, run: Run, inside: list[Value], row_ok: Value | None) -> None:
        """A row not wholly inside: tap by tap where its other axes are inside (``row_ok``), else zeros."""
        b, cp = self.b, self.cp
        if row_ok is None:
            self.partial_row(base, run, inside)
            return
        with b.if_else(row_ok) as (partial, outside):
            with partial:
                self.partial_row(base, run, inside)
            with outside:       # the row reads the padding only: zeros
                for j in range(cp.axes[-1].kernel * cp.in_group):
                    self.put(const(0), cp.slot(b, self.p, self.words.places[run.tap + j]))

    def partial_row(self, base: Value, run: Run, inside: list[Value]) -> None:
        """A row of the window inside the input along its other axes, partly in the padding along the last
        (``inside``: per last-axis kernel index), tap by tap."""
        b, cp = self.b, self.cp
        for j in range(cp.axes[-1].kernel * cp.in_group):
            ok = inside[j // cp.in_group]
            flat = b.select(ok, affine(b, self.taps.offsets[run.tap + j], (base, 1)), self.x_base_safe())
            value = b.select(ok, centered(b, cp.x, flat, cp.mac.x), const(0))
            self.put(value, cp.slot(b, self.p, self.words.places[run.tap + j]))

    def runs(self) -> None:
        """Channels last: each tap's C/group channels are one contiguous run of X and of the row (the
        weights' order), copied element by element (LLVM vectorises the loop)."""
        b, cp = self.b, self.cp
        base = self.x_base()
        for s, offset in enumerate(self.spatial):
            with for_range(b, cp.in_group, name="ci") as ci:
                self.put(centered(b, cp.x, affine(b, offset, (base, 1), (ci, 1)), cp.mac.x),
                         cp.slot(b, self.p, affine(b, s * cp.in_group, (ci, 1))))

    def border_words(self) -> None:
        """A window crossing the padding with a multiple of four channels: each tap's words from the input,
        or from a constant run of zero points (centred: zeros) where the tap reads the padding."""
        b, cp = self.b, self.cp
        zeros = constant_table(b.module, np.full(cp.in_group, cp.mac.x.zero_point, cp.x.type.dtype.numpy))
        padding = b.bitcast(zeros, cp.x.ptr.type)
        base = self.x_base()
        inside = self.inside_taps()
        for ks, offset, group in self.words.taps:
            ok = inside[0][ks[0]]
            for axis_inside, kk in zip(inside[1:], ks[1:]):
                ok = b.and_(ok, axis_inside[kk])
            address = b.select(ok, cp.x.address(b, affine(b, offset, (base, 1))), padding)
            self.copy_words(address, cp.in_group // 4, group)

    def border(self) -> None:
        b, cp, xa = self.b, self.cp, self.cp.xa
        with for_range(b, cp.in_group, name="ci") as ci:
            x_chan = affine(b, 0, (self.batch, xa.batch), (self.group, cp.in_group * xa.channel), (ci, xa.channel))
            with loop_nest(b, [axis.kernel for axis in cp.axes], names="abcdefgh") as ks:
                flat, inside = tap_at(b, cp.axes, self.origins, ks, xa.spatial, x_chan)
                value = b.select(inside, centered(b, cp.x, flat, cp.mac.x), const(0))
                self.put(value, cp.slot(b, self.p, tap_index(b, cp, ci, ks)))

    def copy(self) -> None:
        """The whole window: its interior path when it lies inside the input, else its border path."""
        b, axes = self.b, self.cp.axes
        words = self.words
        whole = self.word_runs if words else self.runs if self.spatial else self.interior
        limits = [axis.interior() for axis in axes]
        checked = [(o, limit) for o, limit, axis in zip(self.coords, limits, axes) if limit != (0, axis.out)]
        inside = window_inside(b, [o for o, _ in checked], [limit for _, limit in checked])
        if inside is None:
            whole()
            return
        with b.if_else(inside) as (then, otherwise):
            with then:
                whole()
            with otherwise:
                (self.border_words if words and words.taps else self.border_rows if words else self.border)()


def _output_coordinates(b: ir.IRBuilder, cp: ConvPlan, position: Value, pointwise: bool) -> list[Value]:
    """The output coordinates of flat output ``position`` (none for a pointwise layer: it needs none)."""
    coords = []
    out_strides = strides_of(tuple(axis.out for axis in cp.axes))
    for i, (axis, stride) in enumerate(zip(cp.axes, out_strides)):
        if pointwise:
            break
        o = b.udiv(position, const(stride)) if stride != 1 else position
        coords.append(b.urem(o, const(axis.out)) if i else o)
    return coords


def im2col(b: ir.IRBuilder, cp: ConvPlan, taps: Taps, batch: Value, group: Value, first: Value, count: int,
           buffer: Value, sums: Value | None) -> None:
    """Rows 0..count-1 of the buffer: the centred receptive fields of output positions first.., zeros where
    they cross the padding; sums[p] = Σ of row p when the weights have a zero point. A window inside the
    input is read through a constant table of tap offsets, in groups of four taps (every store's place in
    the buffer a constant), or channels last run by run (``runs``, ``Words``); a window crossing the padding
    tests each tap (``_Window``)."""
    axes, xa = cp.axes, cp.xa
    kernel = [axis.kernel for axis in axes]
    spatial = [sum(kk * axis.dilation * stride for kk, axis, stride in zip(ks, axes, xa.spatial))
               for ks in itertools.product(*(range(n) for n in kernel))]
    if not cp.channels_last or len(spatial) > UNROLLED_TAPS:
        spatial = []
    words = Words.of(cp, taps.offsets)
    helpers = None
    if words:
        centre = dsp(b.module, "sxtab16" if cp.mac.x.signed else "uxtab16", 2)
        smlad = dsp(b.module, "smlad", 3)
        minus_zx = const((-cp.mac.x.zero_point & 0xFFFF) * 0x10001)
        helpers = (centre, smlad, minus_zx, b.bitcast(buffer, I32.as_pointer()))

    # a 1x1 convolution of stride 1 reads output position p's input at position p: no coordinates to find
    pointwise = cp.channels_last and all(axis.kernel == 1 and axis.stride == 1 and axis.pad == 0
                                         and axis.size == axis.out for axis in axes)

    with for_range(b, count, name="p") as p:
        position = b.add(first, p)
        coords = _output_coordinates(b, cp, position, pointwise)
        origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
        running = zeroed(b, cp.mac.acc) if sums is not None else None
        _Window(b, cp, taps, batch, group, buffer, words, spatial, pointwise, helpers, p, position, coords, origins,
                running).copy()
        if sums is not None:
            b.store(b.load(running), b.gep(sums, [const(0), p], inbounds=True))


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


def _dot_madd(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
    """The same dot products with x86 PMADDWD: a loop over whole vectors of the reduction, then pieces of
    16, 8 and the last depth % 8 taps (zero-padded), one vector accumulator per output, summed by a tree."""
    lanes, depth = cp.madd, cp.mac.depth
    accumulator = ir.VectorType(I32, lanes // 2)
    slots = [[zeroed(b, accumulator) for _ in range(count)] for _ in w_rows]

    def chunk(first: Value, width: int) -> None:
        size = max(8, width)
        xs = [load_lanes(b, b.gep(buffer, [cp.slot(b, p, first)], inbounds=True), width, True, size)
              for p in range(count)]
        for c, w_row in enumerate(w_rows):
            weights = load_lanes(b, cp.w.address(b, b.add(w_row, first)), width, cp.mac.w.signed, size)
            for p in range(count):
                accumulate(b, slots[c][p], padded(b, madd(b, xs[p], weights), lanes // 2))

    full, rest = divmod(depth, lanes)
    if full:
        with for_range(b, full, name="q") as q:
            chunk(b.mul(q, const(lanes)), lanes)
    first = full * lanes
    for width in (16, 8):
        if width < lanes and rest >= width:
            chunk(const(first), width)
            first, rest = first + width, rest - width
    if rest:
        chunk(const(first), rest)
    totals = reduce_all(b, [b.load(slot) for row in slots for slot in row])
    return [totals[c * count:(c + 1) * count] for c in range(len(w_rows))]


def qconv_im2col(k: KernelContext, cp: ConvPlan) -> None:
    """QConv as tiles of output positions: their receptive fields copied into the workspace (``im2col``),
    then dot products with blocks of output channels, each output finished and requantised."""
    if integer_pointwise_dsp.handles(cp):     # a 1x1 layer of 4 or 8 channels: its inputs held in registers
        integer_pointwise_dsp.qconv_pointwise_dsp(k, cp)
        return
    b = k.builder
    taps = Taps.of(k.module, cp)
    # a paired layer's biases may have been replaced by its blocks' table (integer_conv_plan.block_table), which
    # holds the requantisation's parameters too: no tables of Requant's own then
    layout = block_layout(cp)
    tiled = tile_layout(cp)     # or by its tile_stream, which holds the weights too (integer_smlad_tile.py)
    rq = (Requant(k.table, k.attrs, cp.y, acc_bound(cp.sums, cp.bias)) if layout is None and not tiled
          else Requant(lambda values, ty: None, k.attrs, cp.y, acc_bound(cp.sums, None)))
    positions = prod([axis.out for axis in cp.axes])
    words = cp.buffer_bytes // 4
    buffer = b.bitcast(k.scratch(ir.ArrayType(I32, words), cp.buffer_bytes), cp.element.as_pointer())
    sums = entry_alloca(b, ir.ArrayType(cp.mac.acc, cp.positions)) if cp.mac.fold else None
    dot = dot_dual if cp.dual else _dot_madd if cp.madd else _dot_plain
    ya = cp.ya
    # the fold of asymmetric weights, subtracted after the seeded sums, wraps back exactly; doubled weights
    # (integer_conv_plan.doubles) seed doubled biases when the requantisation takes 2 (acc + bias) as it is
    seeded = layout is not None or (cp.dual and seeds_bias(cp.sums, cp.bias) and (not cp.doubled or rq.takes_doubled))
    doubled = seeded and cp.doubled

    def table_words(at: Value, offset: int) -> list[Value]:
        """Two int32 words of the bias tensor at ``at`` + ``offset`` as one LDRD (a volatile 64-bit load)."""
        both = volatile_load(b, b.bitcast(b.gep(at, [const(offset)], inbounds=True), I64.as_pointer()), 4)
        return [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]

    def block(at: Value, w_at: Value, y_at: Value, width: int, count: int, buffer: Value) -> None:
        """A block of ``width`` channels from the ``block_table`` (at ``at``: its doubled biases, then (M, t) or
        (M, t + 1) of each channel, and the channels' K), the weights at ``w_at``, the outputs at ``y_at``."""
        acc = dot_dual(b, cp, buffer, [None] * width, count, table_words(at, 0)[:width], base=w_at)
        past = cp.mac.depth if tiled else 0     # a tile_stream's parameters follow the pair's weights
        m0, s0, m1, s1 = table_words(at, 2 + past) + table_words(at, 4 + past)
        ks = table_words(at, 6 + past) if layout == 8 or tiled else [None, None]
        parameters = [(m0, s0, ks[0]), (m1, s1, ks[1])]
        cells = [(c, p) for c in range(width) for p in range(count)]
        values = rq.many(b, [(acc[c][p], None, None) for c, p in cells], doubled=True,
                         parameters=[parameters[c] for c, _ in cells])
        for (c, p), value in zip(cells, values):
            b.store(value, b.gep(y_at, [const(p * ya.position + c)], inbounds=True))

    def blocks(batch: Value, first: Value, count: int, buffer: Value) -> None:
        """The blocks of a tile of a layer with a ``block_table``: a loop over pairs of channels walking three
        pointers (table, weights, outputs), laundered so that LLVM keeps them as they are rather than indices
        (each an add per block, no base kept), then an odd last channel."""
        pairs = cp.out_group // 2
        table = b.bitcast(cp.bias.ptr, I32.as_pointer())
        size = cp.mac.depth + TILE_TAIL if tiled else layout    # words a pair takes in the table (or tile_stream)
        weights = b.gep(table, [const(2)], inbounds=True) if tiled else cp.w.ptr
        starts = [table, b.bitcast(weights, I16.as_pointer()),
                  cp.y.address(b, affine(b, 0, (batch, ya.batch), (first, ya.position)))]
        steps = [size, 2 * size if tiled else 2 * cp.mac.depth, 2]
        ends = starts
        if pairs:
            entry = b.block
            body, after = b.append_basic_block("blocks.body"), b.append_basic_block("blocks.end")
            end = b.gep(starts[0], [const(pairs * size)], inbounds=True)
            b.branch(body)
            b.position_at_end(body)
            phis = [b.phi(start.type) for start in starts]
            block(*phis, 2, count, buffer)
            ends = [opaque(b, b.gep(phi, [const(step)], inbounds=True)) for phi, step in zip(phis, steps)]
            for phi, start, following in zip(phis, starts, ends):
                phi.add_incoming(start, entry)
                phi.add_incoming(following, b.block)
            b.cbranch(b.icmp_unsigned("!=", ends[0], end), body, after)
            b.position_at_end(after)
        if cp.out_group % 2:
            block(*ends, 1, count, buffer)

    def seeds(chans: list[Value]) -> list[Value]:
        """The (int32) biases of a block's channels, doubled for doubled weights; two as one LDRD (a volatile
        64-bit load)."""
        if len(chans) != 2:
            values = [cp.bias.load(b, chan) for chan in chans]
        else:
            both = volatile_load(b, b.bitcast(cp.bias.address(b, chans[0]), I64.as_pointer()), 4)
            values = [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]
        return [b.add(value, value) for value in values] if doubled else values

    def channels(batch: Value, group: Value, first: Value, count: int, local0: Value, width: int,
                 buffer: Value) -> None:
        chans = [affine(b, c, (group, cp.out_group), (local0, 1)) for c in range(width)]
        w_rows = [b.mul(chan, const(cp.mac.depth)) for chan in chans]
        if seeded:      # the SMLAD sums start at the biases: no add per output after them
            acc = dot_dual(b, cp, buffer, w_rows, count, seeds(chans))
        else:
            acc = dot(b, cp, buffer, w_rows, count)
        sum_xs = [b.load(b.gep(sums, [const(0), const(p)], inbounds=True)) if sums is not None else None
                  for p in range(count)]
        cells = [(c, p) for c in range(width) for p in range(count)]
        if doubled:
            values = rq.many(b, [(acc[c][p], chans[c], None) for c, p in cells], doubled=True)
        else:
            if cp.doubled:      # 2 Σ, exactly even
                acc = [[b.ashr(total, ir.Constant(total.type, 1)) for total in row] for row in acc]
            values = finish(b, cp.mac, [(acc[c][p], sum_xs[p], chans[c]) for c, p in cells],
                            None if seeded else cp.bias, rq)
        for (c, p), value in zip(cells, values):
            y_row = affine(b, 0, (batch, ya.batch), (chans[c], ya.channel), (first, ya.position))
            cp.y.store(b, value, affine(b, p * ya.position, (y_row, 1)))

    def tile(batch: Value, group: Value, first: Value, count: int) -> None:
        im2col(b, cp, taps, batch, group, first, count, buffer, sums)
        # the blocks read the rows through a laundered pointer: LLVM then stops carrying copied values across
        # the loop of channel blocks (DS-CNN on Cortex-M7: 0.7 % fewer instructions)
        rows = opaque(b, buffer) if cp.dual else buffer
        if tiled and count > 1:     # one group
            tile_blocks(b, cp, rq, rows, count, cp.y.address(b, affine(b, 0, (batch, ya.batch), (first, ya.position))))
            return
        if layout is not None or tiled:      # one group
            blocks(batch, first, count, rows)
            return
        for_tiles(b, 0, cp.out_group, cp.block,
                  lambda local0, width: channels(batch, group, first, count, local0, width, rows))

    with loop_nest(b, [cp.x.shape[0], cp.group]) as (batch, group):
        for_tiles(b, 0, positions, cp.positions, lambda first, count: tile(batch, group, first, count))
