"""Window arithmetic of the pooling kernels (float and integer): the taps of a tile inside the input
(``window_taps``), the input coordinates they read, the output index of a tile, how many taps an average divides by
(``counted_taps``, ``window_count``: with or without the padding), and how wide a pooling tile is on a target."""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import affine, const
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.types import Value
from pegasus.exporters.glow.llvm.windows import Axis, Tile
from pegasus.ops.spatial import prod


def pool_tile_width(target, num: Numeric) -> int:
    """Output positions per tile: two vectors, or one position on a scalar FPU (where the selects
    of a vector max would be expanded lane by lane through integer registers)."""
    lanes = simd_of(target).lanes(num.compute)
    return 2 * lanes if lanes > 1 else 1


def window_taps(b: ir.IRBuilder, axes: list[Axis], tile: Tile) -> list[tuple[Value, Value]]:
    """Tap ranges of the tile inside the input, outer axes first."""
    *outer, last = axes
    return [a.taps(b, o) for a, o in zip(outer, tile.outer)] + [tile.last_taps or (const(0), const(last.kernel))]


def tap_coordinates(b: ir.IRBuilder, axes: list[Axis], tile: Tile, taps: list[Value | int]) -> list[Value]:
    """Input coordinates read by the tile's first position at the given taps."""
    positions = [*tile.outer, tile.first]
    return [affine(b, 0, (a.origin(b, o), 1), (t, a.dilation)) for a, o, t in zip(axes, positions, taps)]


def output_flat(b: ir.IRBuilder, y: TensorRef, plane: Value, tile: Tile) -> Value:
    spatial = strides_of(y.shape[2:])
    return affine(b, 0, (plane, prod(y.shape[2:])), (tile.first, 1), *zip(tile.outer, spatial))


def counted_bounds(axis: Axis, end_pad: int, include_pads: bool) -> tuple[int, int]:
    """[lower, upper) of the positions an average counts: the input, or the input and its explicit pads
    with count_include_pad (never the overrun of ceil_mode)."""
    return (-axis.pad, axis.size + end_pad) if include_pads else (0, axis.size)


def counted_taps(b: ir.IRBuilder, axes: list[Axis], outer: list[Value], pads_end: tuple[int, ...],
                 include_pads: bool) -> Value:
    """Counted taps of ``axes`` (e.g. the outer axes, all but the last) at the positions ``outer``,
    multiplied (i32)."""
    count: Value = const(1)
    for axis, o, end_pad in zip(axes, outer, pads_end):
        lo, hi = axis.taps(b, o, *counted_bounds(axis, end_pad, include_pads))
        count = b.mul(count, b.sub(hi, lo))
    return count


def window_count(b: ir.IRBuilder, axes: list[Axis], tile: Tile, pads_end: tuple[int, ...],
                 include_pads: bool) -> Value:
    """Taps counted by the average of the tile's positions (``counted_bounds``), i32, possibly 0;
    shared with the integer average (integer_elementwise.py)."""
    *outer, last = axes
    count = counted_taps(b, outer, tile.outer, pads_end, include_pads)
    if tile.last_taps is None:
        return b.mul(count, const(last.kernel))
    lo, hi = last.taps(b, tile.first, *counted_bounds(last, pads_end[-1], include_pads))
    return b.mul(count, b.sub(hi, lo))
