"""Cutting a static extent into tiles whose widths make good vectors: ``for_tiles`` (a loop of full tiles and one
tail), ``cover`` (overlapping tiles of one width), ``pieces`` (the widths), and ``range_nest`` (loops over run-time
ranges)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.types import Value


def for_tiles(b: ir.IRBuilder, start: int, total: int, size: int, body: Callable[[Value, int], None]) -> None:
    """body(first, count) over [start, start+total) in tiles of ``size`` (a loop) and one smaller tail."""
    full, rest = divmod(total, size)
    if full == 1:
        body(const(start), size)
    elif full:
        with for_range(b, full, name="tile") as tile:
            body(affine(b, start, (tile, size)), size)
    if rest:
        body(const(start + full * size), rest)


def power_of_two_below(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def cover(b: ir.IRBuilder, start: int, total: int, size: int, body: Callable[[Value, int], None]) -> None:
    """body(first, size) over [start, start+total) in tiles of one width: ``size``, or the largest power
    of two that fits when total is smaller. A tail tile overlaps its neighbour (it recomputes a few
    outputs) rather than having an odd width, which vector code handles badly. Only for outputs that
    are written, never accumulated, and do not alias the inputs."""
    if total < size:
        size = power_of_two_below(total)
    full, rest = divmod(total, size)
    for_tiles(b, start, full * size, size, body)
    if rest:
        body(const(start + total - size), size)


def pieces(total: int, size: int) -> list[tuple[int, int]]:
    """[(first, width)] covering [0, total): whole ``size`` chunks, then power-of-two pieces."""
    out, first = [], 0
    while first < total:
        width = size if total - first >= size else power_of_two_below(total - first)
        out.append((first, width))
        first += width
    return out


@contextmanager
def range_nest(b: ir.IRBuilder, ranges: list[tuple[Value, Value]]):
    """Nested loops over [lo, hi) ranges (values), outermost first; yields the indices."""
    if not ranges:
        yield []
        return
    lo, hi = ranges[0]
    with for_range(b, hi, start=lo, name="tap") as index:
        with range_nest(b, ranges[1:]) as inner:
            yield [index, *inner]
