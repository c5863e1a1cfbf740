"""Sliding windows as loops, shared by the convolution and pooling kernels. ``Axis`` answers, per spatial axis,
which taps of an output position fall inside the input: statically for the interior, with a few integer
instructions near the padding, so no tap ever tests a bound. ``sweep_tiles`` (convolutions) cuts the last axis into
tiles of ``width`` positions whose border crossings get static lane masks per tap (``Edge``); ``sweep`` (pooling)
visits the border positions one at a time. ``axis_phases`` splits a transposed convolution's axis into stride
phases, each a dense stride-1 correlation (``Phase``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.tiles import cover
from pegasus.exporters.glow.llvm.types import Value
from pegasus.ops.spatial import Window

Range = tuple[Value, Value]


def ceil_div(a: int, d: int) -> int:
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
        first = max(0, min(self.out, ceil_div(lower + self.pad, self.stride)))
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
        shift = ceil_div(max(0, -smallest), d) + 1
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


def pointwise(win: Window) -> bool:
    """Every output position reads one input position, the same for every tap (1x1, no padding)."""
    return all(k == 1 for k in win.kernel) and not any(win.pads_begin) and not any(win.pads_end)


@dataclass(frozen=True)
class Phase:
    """Outputs o = q*stride + residue of one ConvTranspose axis as a stride-1 correlation over q:
    tap t reads input q - axis.pad + t*axis.dilation with weight tap ``first_tap - t*tap_step``."""

    axis: Axis
    residue: int
    first_tap: int
    tap_step: int


def axis_phases(win: Window, index: int, in_size: int) -> list[Phase]:
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
