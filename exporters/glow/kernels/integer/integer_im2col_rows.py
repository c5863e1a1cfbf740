"""The rows of QConv's im2col buffer (integer_im2col.py): each output position's receptive field copied, centred,
into the layer's workspace, zeros where it crosses the padding, with the row's sum when the weights have a zero
point. A window inside the input is read through a constant table of tap offsets (``Taps``), in groups of four
taps, or channels last run by run; on the SMLAD path 8-bit inputs go a word of four at a time, SXTAB16/UXTAB16
centring the pairs (x0, x2), (x1, x3) that the buffer holds (``Words``, ``Run``). A window crossing the padding
tests each tap, takes each tap's words from the input or from a run of zero points, or copies its rows inside
the input as words (``_Window``: one method per path)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.integer.integer_conv_plan import (
    ConvPlan,
    tap_at,
    tap_index,
    tap_offsets,
    window_inside,
)
from pegasus.exporters.glow.kernels.integer.integer_dot import accumulate, centered, dsp, zeroed
from pegasus.exporters.glow.kernels.parameters import load_channel
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.tables import constant_table
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.exporters.glow.llvm.types import I32, I64, Value
from pegasus.ops.spatial import prod

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
