"""The QAveragePool emitter (pegasus/ops/integer.py), channels first or channels last (``channels_last``:
pegasus/ops/layout.py), computing exactly the bits of the NumPy reference.

QAveragePool divides by nothing: a window of c taps is requantised by the (M, S) of r / c that the
op's attributes hold per tap count: immediates when every window of the layer has the same count (no
padding, no ceil_mode overrun), else a table over the counts that occur, loaded once per tile —
multipliers sharing one immediate shift (exact: (M * 2**j, S + j) is the same rule as (M, S)), or
``Requant``'s per-entry tables (integer_dot.py) when that would overflow 64 bits. Cortex-M7, int8
3x3 pooling with pads 1: 47 instructions per output (65 with the former rounded division).

Channels first, a tile is a run of positions along a row (pool.py's sweep). Channels last, the channels
of a position are contiguous: per output position, the taps inside the input (conv.py's ``Axis.taps``;
padding is never read) are summed as vectors over a block of channels, then each channel is
requantised by the window's count, computed once per position.

With ``rounding`` tflite (TFLite's AVERAGE_POOL_2D, input and output on one grid) a window's sum is divided
by its count instead, rounded half away from zero, by a multiplier per count (``_rounded_mean``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_dot import Requant, channel_block
from pegasus.exporters.glow.kernels.parameters import load_channel
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.pooling import (
    counted_taps,
    output_flat,
    pool_tile_width,
    tap_coordinates,
    window_count,
    window_taps,
)
from pegasus.exporters.glow.llvm.requant import clamp, requantize, wide_multiplier, widen
from pegasus.exporters.glow.llvm.tables import constant_table
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.exporters.glow.llvm.tiles import for_tiles, pieces, range_nest
from pegasus.exporters.glow.llvm.types import I32, I64
from pegasus.exporters.glow.llvm.windows import Axis, Tile, axes_of, sweep
from pegasus.ir.dtypes import DType
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.integer import QAveragePool, RequantAttrs, clamp_bounds
from pegasus.ops.layout import first_shape
from pegasus.ops.spatial import prod

Value = ir.Value


def _accumulator(dtype: DType, zero_point: int, taps: int) -> DType:
    """i32 when a window of ``taps`` inputs cannot overflow it: neither the raw sum nor the centred one
    (raw - zp * taps inside); else i64."""
    lo, hi = integer_range(dtype.numpy)
    return DType.INT32 if taps * (max(-lo, hi) + abs(zero_point)) < 2 ** 31 else DType.INT64


#: requant(b, s, entry): the window sum ``s`` requantised by table entry ``entry`` (an i32 value).
CountRequant = Callable[[ir.IRBuilder, Value, Value], Value]


def _count_requant(k: KernelContext, counts: np.ndarray, taps: int) -> tuple[int | None, CountRequant]:
    """(c_min, the requantisation of a window by its tap count c) from the attributes' entries for the
    counts c_min..c_max that the layer's windows have: immediates when they are one (M, S) (c_min is then
    None: no count is needed); else a table of multipliers indexed by c - c_min sharing one immediate shift
    — (M * 2**j, S + j) is the same rule as (M, S) — when the products stay inside 64 bits; else
    ``Requant``'s per-entry tables."""
    a, x, y = k.attrs, k.inputs[0], k.outputs[0]
    first, last = int(counts.min()), int(counts.max())
    pairs = list(zip(a.multiplier[first - 1:last], a.shift[first - 1:last]))
    if a.rounding == "tflite_wide":     # the half_up rule of TFLite's 16-bit multipliers (tflite: _rounded_mean)
        pairs = [wide_multiplier(m, s) for m, s in pairs]
    lo, hi = clamp_bounds(a)
    if len(set(pairs)) == 1:
        multiplier, shift = pairs[0]
        return None, lambda b, acc, _: requantize(b, acc, multiplier, shift, a.out_zero_point, lo, hi, y.element)
    x_lo, x_hi = integer_range(x.type.dtype.numpy)
    bound = taps * max(x_hi - a.x_zero_point, a.x_zero_point - x_lo)
    shift = max(s for _, s in pairs)
    multipliers = tuple(m << (shift - s) for m, s in pairs)
    if all(m >= 0 for m in multipliers) and bound * max(multipliers) + (1 << shift >> 1) < 1 << 63:
        narrow = max(multipliers) < 1 << 32    # stored as u32 (i32 bits), zero-extended: umull + mla on ARM
        stored = tuple(m - (m >> 31 << 32) for m in multipliers) if narrow else multipliers
        table = k.table(stored, I32 if narrow else I64)

        def finish(b: ir.IRBuilder, acc: Value, entry: Value) -> Value:
            multiplier = load_channel(b, table, entry)
            multiplier = b.zext(multiplier, I64) if narrow else multiplier
            return requantize(b, acc, multiplier, shift, a.out_zero_point, lo, hi, y.element)

        return first, finish
    entries = RequantAttrs(tuple(m for m, _ in pairs), tuple(s for _, s in pairs), a.out_zero_point, a.out_dtype,
                           a.lo, a.hi)
    return first, Requant(k.table, entries, y, bound)


def _rounded_mean(k: KernelContext, counts: np.ndarray, taps: int) -> tuple[int | None, CountRequant]:
    """``rounding`` tflite, TFLite's AVERAGE_POOL_2D: y = clamp(±floor((|s| + c // 2) / c) + zp) for a window
    of c taps (C's division of s ± c // 2), in ``_count_requant``'s form. The division multiplies instead:
    floor(n / c) = floor(n * m / 2**S) with m = ceil(2**S / c), exact for every 0 <= n <= N once
    N * c <= 2**S (the excess n * (m * c - 2**S) / 2**S stays below 1 and cannot reach the next multiple):
    one multiplier per count c_min..c_max, an immediate when all windows count the same."""
    a, x, y = k.attrs, k.inputs[0], k.outputs[0]
    first, last = int(counts.min()), int(counts.max())
    lo, hi = clamp_bounds(a)
    x_lo, x_hi = integer_range(x.type.dtype.numpy)
    bound = taps * max(x_hi - a.x_zero_point, a.x_zero_point - x_lo) + last // 2     # the largest n
    shift = (bound * last).bit_length()
    multipliers = [-(-(1 << shift) // c) for c in range(first, last + 1)]
    if bound * max(multipliers) >= 1 << 63:
        raise PegasusError(f"QAveragePool with tflite rounding over {taps} taps of {x.type.dtype.value} is not "
                           "supported by the Glow exporter (its division would pass 64 bits)",
                           where=f"layer '{k.node.name}'")
    table = constant_table(k.module, np.asarray(multipliers, np.int64)) if first < last else None

    def finish(b: ir.IRBuilder, acc: Value, entry: Value) -> Value:
        total = widen(b, acc, I64, True)
        count = const(first) if table is None else b.add(entry, const(first))
        half = b.zext(b.lshr(count, const(1)), I64)
        positive = b.icmp_signed(">", total, ir.Constant(I64, 0))
        n = b.select(positive, b.add(total, half), b.sub(half, total))
        multiplier = ir.Constant(I64, multipliers[0]) if table is None else load_channel(b, table, entry)
        mean = b.lshr(b.mul(n, multiplier), ir.Constant(I64, shift))
        mean = b.select(positive, mean, b.neg(mean))
        value = clamp(b, b.add(mean, ir.Constant(I64, a.out_zero_point)), lo, hi)
        return widen(b, value, y.element, True)

    return (first if table is not None else None), finish


@emitter("QAveragePool", channels_last=True)
def q_average_pool(k: KernelContext) -> None:
    """Channels first: the window sums as AveragePool's (pool.py: interior vector tiles, border positions
    alone), of the raw inputs; then per position s = sum - zp * (taps inside X) and y = requant(s) by the
    (M, S) of the window's tap count c (AveragePool's count): immediates when every window has the same
    count, else table entries chosen once per tile (the lanes of a tile share their count). Channels last:
    ``_average_last``."""
    b, x, a = k.builder, k.inputs[0], k.attrs
    x_shape = first_shape(x.shape, a.channels_last)
    win = QAveragePool.geometry(a, x_shape)
    taps = prod(win.kernel)
    counts = QAveragePool.counts(a, x_shape)
    first, rq = (_rounded_mean if a.rounding == "tflite" else _count_requant)(k, counts, taps)
    acc = Numeric(b, _accumulator(x.type.dtype, a.x_zero_point, taps))
    axes = axes_of(win, x_shape[2:])
    if a.channels_last:
        _average_last(k, acc, axes, win.pads_end, first, rq)
        return
    tile_width = pool_tile_width(k.target, acc)
    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        sweep(b, axes, tile_width, lambda tile: _average_tile(k, acc, axes, plane, tile, win.pads_end, first, rq))


def _average_tile(k: KernelContext, acc: Numeric, axes: list, plane: Value, tile: Tile, pads_end: tuple[int, ...],
                  first: int | None, rq: CountRequant) -> None:
    b, x, y, a = k.builder, k.inputs[0], k.outputs[0], k.attrs
    source = Numeric(b, x.type.dtype)
    total = Accumulators(acc, 1, tile.width)
    total.set(0, acc.constant(0, tile.width))
    x_strides = strides_of(x.shape[2:])
    with range_nest(b, window_taps(b, axes, tile)) as taps:
        flat = affine(b, 0, (plane, prod(x.shape[2:])), *zip(tap_coordinates(b, axes, tile, taps), x_strides))
        values = source.load(x, flat, tile.width, axes[-1].stride)
        values = (b.sext if source.signed else b.zext)(values, acc.vector(tile.width))
        total.set(0, b.add(total.get(0), values))
    word = acc.compute
    offset = ir.Constant(word, 0)
    if a.x_zero_point:
        inside = widen(b, window_count(b, axes, tile, pads_end, False), word, signed=True)
        offset = b.mul(inside, ir.Constant(word, a.x_zero_point))
    entry = const(0)
    if first is not None:
        count = window_count(b, axes, tile, pads_end, bool(a.count_include_pad))
        entry = b.sub(b.select(b.icmp_signed("<", count, const(1)), const(1), count), const(first))
    sums, out = total.get(0), ir.Constant(ir.VectorType(y.element, tile.width), None)
    for lane in range(tile.width):
        s = b.sub(b.extract_element(sums, const(lane)), offset)
        out = b.insert_element(out, rq(b, s, entry), const(lane))
    Numeric(b, y.type.dtype).store(y, output_flat(b, y, plane, tile), out)


def _average_last(k: KernelContext, acc: Numeric, axes: list[Axis], pads_end: tuple[int, ...], first: int | None,
                  rq: CountRequant) -> None:
    """Channels last: per output position, the window's taps inside X summed as vectors of channels, then
    s = sum - zp * (taps inside X) and y = requant(s) per channel, by the window's count."""
    b, x, y, a = k.builder, k.inputs[0], k.outputs[0], k.attrs
    source, word = Numeric(b, x.type.dtype), acc.compute
    channels = x.shape[-1]
    lanes, size = channel_block(k.target, word, 1, channels)
    x_spatial, y_spatial = x.strides[1:-1], y.strides[1:-1]
    with loop_nest(b, [x.shape[0], *(axis.out for axis in axes)], names="nabcdefg") as (batch, *coords):
        ranges = [axis.taps(b, o) for axis, o in zip(axes, coords)]
        origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
        x_base = affine(b, 0, (batch, x.strides[0]), *zip(origins, x_spatial))
        y_base = affine(b, 0, (batch, y.strides[0]), *zip(coords, y_spatial))
        offset = ir.Constant(word, 0)
        if a.x_zero_point:
            inside = widen(b, counted_taps(b, axes, coords, pads_end, False), word, signed=True)
            offset = b.mul(inside, ir.Constant(word, a.x_zero_point))
        entry = const(0)
        if first is not None:
            count = counted_taps(b, axes, coords, pads_end, bool(a.count_include_pad))
            entry = b.sub(b.select(b.icmp_signed("<", count, const(1)), const(1), count), const(first))

        def block(c0: Value, count: int) -> None:
            widths = pieces(count, lanes)
            totals = [Accumulators(acc, 1, width) for _, width in widths]
            for total, (_, width) in zip(totals, widths):
                total.set(0, acc.constant(0, width))
            with range_nest(b, ranges) as taps:
                flat = affine(b, 0, (x_base, 1), (c0, 1),
                              *((tap, axis.dilation * s) for tap, axis, s in zip(taps, axes, x_spatial)))
                for total, (at, width) in zip(totals, widths):
                    values = source.load(x, affine(b, at, (flat, 1)), width)
                    values = (b.sext if source.signed else b.zext)(values, acc.vector(width))
                    total.set(0, b.add(total.get(0), values))
            for total, (at, width) in zip(totals, widths):
                sums = total.get(0)
                for lane in range(width):
                    value = rq(b, b.sub(b.extract_element(sums, const(lane)), offset), entry)
                    y.store(b, value, affine(b, at + lane, (y_base, 1), (c0, 1)))

        for_tiles(b, 0, channels, size, block)
