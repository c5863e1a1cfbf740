"""The kernel of a pooled pair (exporters/glow/pooled_pair.py): two QConv + MaxPool stages, each summing over a
window of 16-bit centred input rows with SMLAD, the first's pooled rows written into the second's window.

A stage's pooled row: its rows of input are made sure of first (``Stage.ensure``: the first stage unpacks rows
of X into its window, the second asks the first for pooled rows of T; rows no longer read are dropped by moving
the others down, 8 bytes at a time), then per pair of output channels (one row of integer_halves' halfwords
256 w1 + w0) and per group of up to ``StagePlan.positions`` positions, the sums over the kernel rows
(``Stage.kernel_rows``). With LDRD (every run word-aligned) a group of four taps is one LDRD of the pair's
halfwords, two SXTB16 of them (their low bytes, w0), and per position one LDRD of its two input pairs and four
SMLAD (T and A0 twice): 18 instructions for 24 MACs with three positions. Otherwise (LeNet's conv1: one input
channel) a group of two taps is an LDR of the halfwords, one SXTB16, and per position an LDR (unaligned) and two
SMLAD: 14 for 16 MACs with four. The sums, the pointers and the group's operands fill the 14 registers; the
sums and pointers pass through ``integer_smlad.pinned`` between groups, without which LLVM's allocator spills
two sums of every group, and the 64-bit loads are volatile, which Arm lowers to LDRD (a plain one becomes two
LDR). A1 = (T - A0) >> 8.

A stage whose window holds a pooled row's whole input (``together``: the first) takes a pooling window's
positions as one group — neighbours in two rows — so their max is taken over the raw sums and requantised once
(the multipliers are non-negative) and stored as it is. The other (the second) sums one convolution row at a time
in groups along it: the output row starts at the lowest value and takes the max of each requantised value (two
of a group's positions in one window of width 2 are reduced as raw sums first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.cortex_m.integer_smlad import pinned, tuned
from pegasus.exporters.glow.kernels.integer.integer_dot import Requant, bias_bound, dsp
from pegasus.exporters.glow.llvm.barriers import volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import I16, I32, I64
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.integer import clamp_bounds

Value = ir.Value
#: the registers a group of taps finds the sums in (then the two pointers): the others are the group's operands
SUMS = ("r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7")
POINTERS = {True: ("r6", "r7"), False: ("r8", "r9")}
#: a position's kernel rows of at most this many groups of taps are one line of code (else a loop over the rows)
IN_LINE_GROUPS = 32
#: groups of taps per iteration of a kernel row's loop (positions that leave a register for its count)
CHUNK = 5
#: the immediate offsets of LDRD and LDR reach this many bytes
LDRD_REACH, LDR_REACH = 1020, 4095


def column_groups(count: int, most: int, unit: int) -> list[tuple[int, int]]:
    """(first, size) of groups of neighbouring positions covering ``count``, at most ``most`` each, sizes multiples
    of ``unit`` (a pooling window's width, when windows must not straddle groups): a last lone position is paired
    with the one before."""
    size = most - most % unit
    full, rest = divmod(count, size)
    groups = [(i * size, size) for i in range(full)]
    if rest == 1 and unit == 1 and full and size > 2:
        start = groups.pop()[0]
        half = (size + 1) // 2
        groups += [(start, half), (start + half, size + 1 - half)]
    elif rest:
        groups.append((full * size, rest))
    return groups


@dataclass
class Destination:
    """Where a stage's pooled outputs go: ``flat(channel, row, column)`` into ``pointer``'s elements, each value
    (the output type's integer) stored as ``encode`` makes it, compared as ``signed`` when max-ed in, the row
    starting at ``lowest``."""

    pointer: Value
    flat: Callable
    encode: Callable
    signed: bool
    lowest: Value


class Stage:
    """One convolution + max pooling over its ring (module docstring)."""

    def __init__(self, b: ir.IRBuilder, plan, conv, k: KernelContext, weights: Value, bias: TensorRef | None,
                 ring: Value, fill: Callable[[Value], None], destination: Destination, conv_type: TensorType):
        self.b, self.plan, self.weights, self.bias, self.ring, self.fill = b, plan, weights, bias, ring, fill
        self.to = destination
        bound = plan.kernel[0] * plan.run * plan.x_magnitude * 128 + bias_bound(bias)
        self.rq = Requant(k.table, conv.attrs, TensorRef(None, conv_type), bound)
        self.base, self.computed = entry_alloca(b, I32), entry_alloca(b, I32)   # rows [base, computed) held
        b.store(const(0), self.base)
        b.store(const(0), self.computed)
        self.smlad, self.unpack = dsp(b.module, "smlad", 3), dsp(b.module, "sxtb16", 1)

    def slot(self, row: Value) -> Value:
        """The window's first halfword of input row ``row``."""
        b = self.b
        return b.mul(b.sub(row, b.load(self.base)), const(self.plan.row_halves))

    def ensure(self, keep: Value, need: Value) -> None:
        """Input rows [keep, need) in the window, each computed once, in order: when ``need`` is past the window's
        end, the rows from ``keep`` on move to its first slots first (the older ones are read no more)."""
        b, plan = self.b, self.plan
        with b.if_then(b.icmp_signed(">", b.sub(need, b.load(self.base)), const(plan.ring_rows))):
            self._move(b.sub(keep, b.load(self.base)), b.sub(b.load(self.computed), keep))
            b.store(keep, self.base)
        with for_range(b, need, start=b.load(self.computed), name="fill", unroll=False) as row:
            self.fill(row)
        b.store(need, self.computed)

    def _move(self, first: Value, rows: Value) -> None:
        """Rows ``first`` .. ``first + rows - 1`` of the window to its first slots (moving down: in order), 8 bytes
        (LDRD, STRD) at a time when a row is a whole number of them."""
        b = self.b
        row_bytes = 2 * self.plan.row_halves
        unit = next(n for n in (8, 4, 2) if row_bytes % n == 0)
        typ = ir.IntType(8 * unit)
        base = b.bitcast(self.ring, typ.as_pointer())
        per_row = row_bytes // unit
        offset = b.mul(first, const(per_row))
        with for_range(b, b.mul(rows, const(per_row)), name="move", unroll=False) as i:
            source = b.gep(base, [b.add(i, offset)])
            value = volatile_load(b, source, unit) if unit == 8 else b.load(source)
            b.store(value, b.gep(base, [i]))

    def _words(self, pointer: Value, offset: int, wide: bool) -> list[Value]:
        b = self.b
        address = b.gep(pointer, [const(offset)], inbounds=True)
        if not wide:
            return [b.load(b.bitcast(address, I32.as_pointer()), align=2)]
        pair = volatile_load(b, b.bitcast(address, I64.as_pointer()), 4)
        return [b.trunc(pair, I32), b.trunc(b.lshr(pair, ir.Constant(I64, 32)), I32)]

    def kernel_rows(self, sums: list[Value], row: Value, w_row: Value, offsets: list[int], rows: int,
                    groups: int) -> list[Value]:
        """``sums`` (A0, T per position) plus the products of ``groups`` groups of taps of each of ``rows``
        kernel rows from ``row`` and ``w_row`` on, the positions ``offsets`` halfwords from ``row``, in a line
        (module docstring)."""
        b, plan = self.b, self.plan
        wide, step = plan.wide, plan.step
        sums = list(sums)
        for ky in range(rows):
            for g in range(groups):
                *sums, w_at, x_at = pinned(b, [*sums, b.ptrtoint(w_row, I32), b.ptrtoint(row, I32)],
                                           SUMS[:len(sums)] + POINTERS[wide])
                w_row, row = (b.inttoptr(v, I16.as_pointer()) for v in (w_at, x_at))
                halves = self._words(w_row, ky * plan.stored_run + step * g, wide)
                lows = [b.call(self.unpack, [h]) for h in halves]
                for p, offset in enumerate(offsets):
                    xs = self._words(row, ky * plan.row_halves + step * g + offset, wide)
                    low, total = sums[2 * p], sums[2 * p + 1]
                    for x, h, w0 in zip(xs, halves, lows):
                        total = b.call(self.smlad, [x, h, total])
                        low = b.call(self.smlad, [x, w0, low])
                    sums[2 * p], sums[2 * p + 1] = low, total
        return sums

    def sums(self, top: Value, w_pair: Value, first: Value, offsets: list[int]) -> list[tuple[Value, Value]]:
        """(A0, A1) of the positions ``offsets`` halfwords from column ``first`` of input row ``top``: the
        kernel rows in a line when their loads reach every offset and they are few (``in_line``), else a loop
        over them — whose groups of taps are a loop too, of up to ``CHUNK`` at a time, when a register is left
        for its count (at most two positions: the rest of a row after the groups of three) or when a row has
        more than ``IN_LINE_GROUPS`` (its count then spilled: code over speed)."""
        b, plan = self.b, self.plan
        kh, step = plan.kernel[0], plan.step
        groups = plan.stored_run // step
        row = b.gep(self.ring, [b.add(self.slot(top), b.mul(first, const(plan.strides[1] * plan.channels)))],
                    inbounds=True)
        size = len(offsets)
        if self.in_line(offsets):
            values = self.kernel_rows([const(0)] * (2 * size), row, w_pair, offsets, kh, groups)
        else:
            slots = [entry_alloca(b, I32) for _ in range(2 * size)]
            for slot in slots:
                b.store(const(0), slot)
            chunk = groups
            if groups > (CHUNK if size <= 2 else IN_LINE_GROUPS):   # a loop over the row's groups, a few at a time
                chunk = max(d for d in range(1, CHUNK + 1) if groups % d == 0)
            with for_range(b, kh, name="ky", unroll=False) as ky:
                with for_range(b, groups // chunk, name="chunk", unroll=False) as c:
                    at = [b.gep(row, [b.add(b.mul(ky, const(plan.row_halves)), b.mul(c, const(chunk * step)))],
                                inbounds=True),
                          b.gep(w_pair, [b.add(b.mul(ky, const(plan.stored_run)), b.mul(c, const(chunk * step)))],
                                inbounds=True)]
                    for slot, value in zip(slots, self.kernel_rows([b.load(s) for s in slots], *at, offsets, 1,
                                                                   chunk)):
                        b.store(value, slot)
            values = [b.load(slot) for slot in slots]
        return [(low, b.ashr(b.sub(total, low), const(8)), b.sub(total, low))
                for low, total in zip(values[0::2], values[1::2])]

    def in_line(self, offsets: list[int]) -> bool:
        """Whether a position's kernel rows are one line of code: few groups, offsets within the loads' reach."""
        plan = self.plan
        groups = plan.kernel[0] * plan.stored_run // plan.step
        reach = 2 * ((plan.kernel[0] - 1) * plan.row_halves + plan.stored_run + max(offsets))
        return groups <= IN_LINE_GROUPS and reach <= (LDRD_REACH if plan.wide else LDR_REACH)

    def _put(self, channel: Value, row: Value, column: Value, value: Value) -> None:
        b, to = self.b, self.to
        at = b.gep(to.pointer, [to.flat(channel, row, column)], inbounds=True)
        stored = to.encode(value)
        if not self.plan.together:      # else a window's one value
            current = b.load(at)
            larger = (b.icmp_signed if to.signed else b.icmp_unsigned)(">", stored, current)
            stored = b.select(larger, stored, current)
        b.store(stored, at)

    def pooled_row(self, py: Value) -> None:
        """Pooled output row ``py`` into the destination: per pair of channels, the groups of each size in a loop."""
        b, plan = self.b, self.plan
        (ph, pw), (_, columns) = plan.pool, plan.pooled
        kh, sy, sx, c = plan.kernel[0], plan.strides[0], plan.strides[1], plan.channels
        if plan.together:   # a group is a pooling window: its sums' max requantised once, stored
            top = b.mul(b.mul(py, const(ph)), const(sy))
            self.ensure(top, b.add(b.add(top, const((ph - 1) * sy)), const(kh)))
            offsets = [dy * sy * plan.row_halves + dx * sx * c for dy in range(ph) for dx in range(pw)]
            with self._pairs() as (pair, w_pair), for_range(b, columns, name="window", unroll=False) as px:
                self._window(py, top, pair, w_pair, px, offsets)
            return
        with for_range(b, plan.out_channels, name="init", unroll=False) as channel:
            for column in range(columns):
                at = b.gep(self.to.pointer, [self.to.flat(channel, py, const(column))], inbounds=True)
                b.store(self.to.lowest, at)
        runs: list[list[int]] = []        # [first, size, count] of consecutive groups of one size
        for first, size in column_groups(columns * pw, plan.positions, 1):
            if runs and runs[-1][1] == size:
                runs[-1][2] += 1
            else:
                runs.append([first, size, 1])
        with for_range(b, ph, name="pr", unroll=False) as j:
            top = b.mul(b.add(b.mul(py, const(ph)), j), const(sy))
            self.ensure(top, b.add(top, const(kh)))
            with self._pairs() as (pair, w_pair):
                for start, size, count in runs:
                    with for_range(b, count, name="group", unroll=False) as i:
                        first = b.add(const(start), b.mul(i, const(size)))
                        self._positions(py, top, pair, w_pair, first, size)

    @contextmanager
    def _pairs(self) -> Iterator[tuple[Value, Value]]:
        """A loop over the pairs of output channels: (pair, the pair's first halfword of weights)."""
        b, plan = self.b, self.plan
        with for_range(b, plan.out_channels // 2, name="pair", unroll=False) as pair:
            yield pair, b.gep(self.weights, [b.mul(pair, const(plan.kernel[0] * plan.stored_run))], inbounds=True)

    def _channels(self, pair: Value) -> tuple[list[Value], list[Value | None]]:
        b = self.b
        channels = [b.mul(pair, const(2)), b.add(b.mul(pair, const(2)), const(1))]
        return channels, [None if self.bias is None else self.bias.load(b, channel) for channel in channels]

    def _max(self, values: list[Value]) -> Value:
        b, best = self.b, values[0]
        for value in values[1:]:
            best = b.select(b.icmp_signed(">", value, best), value, best)
        return best

    def _window(self, py: Value, top: Value, pair: Value, w_pair: Value, px: Value, offsets: list[int]) -> None:
        """One pooling window (``together``): the max of its sums requantised, stored."""
        b = self.b
        values = self.sums(top, w_pair, b.mul(px, const(self.plan.pool[1])), offsets)
        channels, biases = self._channels(pair)
        # channel 1: A1 = (T - A0) >> 8 is monotonic in T - A0, so the max is taken before the shift
        low = self._max([v[0] for v in values])
        high = b.ashr(self._max([v[2] for v in values]), const(8))
        results = self.rq.many(b, [(low, channels[0], biases[0]), (high, channels[1], biases[1])])
        for channel, result in zip(channels, results):
            self._put(channel, py, px, result)

    def _positions(self, py: Value, top: Value, pair: Value, w_pair: Value, first: Value, size: int) -> None:
        """A group of ``size`` positions of one convolution row from column ``first``, max-ed into their pooled
        outputs. Pooling windows two wide (``pw`` = 2): the group's two or three positions cover the windows of
        columns first // 2 and the next, the first window holding positions 0 and 1 when ``first`` is even,
        position 0 alone when it is odd — so each window's values are reduced as raw sums and requantised once.
        Other widths: each position requantised."""
        b, plan = self.b, self.plan
        pw = plan.pool[1]
        values = self.sums(top, w_pair, first, [p * plan.strides[1] * plan.channels for p in range(size)])
        channels, biases = self._channels(pair)
        if pw == 2 and size in (2, 3):
            even = b.icmp_unsigned("==", b.and_(first, const(1)), const(0))
            column = b.lshr(first, const(1))
            items, places = [], []      # per window: (value, channel, bias), (channel, column, stored when)
            for ch in range(2):
                v = [value[ch] for value in values]
                lead = b.select(even, self._max(v[:2]), v[0])
                items.append((lead, channels[ch], biases[ch]))
                places.append((channels[ch], column, None))
                if size == 3:
                    items.append((b.select(even, v[2], self._max(v[1:])), channels[ch], biases[ch]))
                    places.append((channels[ch], b.add(column, const(1)), None))
                else:   # the second position is a window of its own only when ``first`` is odd
                    items.append((v[1], channels[ch], biases[ch]))
                    places.append((channels[ch], b.add(column, const(1)), b.not_(even)))
            for (channel, place, when), result in zip(places, self.rq.many(b, items)):
                if when is None:
                    self._put(channel, py, place, result)
                else:
                    with b.if_then(when):
                        self._put(channel, py, place, result)
            return
        results = self.rq.many(b, [(values[p][c], channels[c], biases[c]) for p in range(size) for c in range(2)])
        for i, result in enumerate(results):
            self._put(channels[i % 2], py, b.udiv(b.add(first, const(i // 2)), const(pw)), result)


def emit_pooled_pair(b: ir.IRBuilder, graph, unit, refs: dict, math, target, workspace: Value,
                     parameters) -> None:
    """The pair ``unit`` (pooled_pair.PooledPair) into the function ``b`` builds (module docstring)."""
    plan = unit.plan
    a, pool_a, conv_b, pool_b = unit.nodes
    first, second = plan.first, plan.second
    tuned(b.function)
    ring_b = b.bitcast(workspace, I16.as_pointer())
    ring_a = b.gep(ring_b, [const(second.ring_bytes // 2)], inbounds=True)
    x = refs[a.inputs[0]]
    y = refs[pool_b.outputs[0]]
    last = bool(a.attrs.channels_last)
    t_type = graph.type_of(pool_a.outputs[0])

    def context(conv) -> KernelContext:
        return KernelContext(conv, conv.attrs, b, [refs.get(n) if n else None for n in conv.inputs],
                             [TensorRef(None, graph.type_of(conv.outputs[0]))], math, target, None, 0,
                             parameters=parameters)

    def weights(conv) -> Value:
        return b.bitcast(refs[conv.inputs[1]].ptr, I16.as_pointer())

    def bias(conv) -> TensorRef | None:
        return refs[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else None

    def centred(value: Value, signed: bool, zero: int) -> Value:
        wide = (b.sext if signed else b.zext)(value, I32) if value.type.width < 32 else value
        return b.trunc(b.sub(wide, const(zero)), I16)

    def fill_a(row: Value) -> None:
        """Input row ``row`` of X into A's ring as int16 x - zx, channels last."""
        base = stage_a.slot(row)
        signed = x.type.dtype is DType.INT8
        with for_range(b, first.width, name="xw", unroll=False) as column:
            with for_range(b, first.channels, name="xc", unroll=False) as channel:
                value = x.load(b, x.flat(b, [0, row, column, channel] if last else [0, channel, row, column]))
                at = b.add(base, b.add(b.mul(column, const(first.channels)), channel))
                b.store(centred(value, signed, first.x_zero), b.gep(ring_a, [at], inbounds=True))

    t_signed = t_type.dtype is DType.INT8
    t_zero = second.x_zero
    t_lowest = clamp_bounds(a.attrs)[0]
    to_ring = Destination(ring_b, lambda channel, row, column: b.add(stage_b.slot(row), b.add(
        b.mul(column, const(second.channels)), channel)), lambda value: centred(value, t_signed, t_zero), True,
        ir.Constant(I16, t_lowest - t_zero))
    y_signed = y.type.dtype is DType.INT8
    to_y = Destination(y.ptr, lambda channel, row, column: y.flat(
        b, [0, row, column, channel] if last else [0, channel, row, column]), lambda value: value, y_signed,
        ir.Constant(y.element, integer_range(y.type.dtype.numpy)[0]))
    stage_a = Stage(b, first, a, context(a), weights(a), bias(a), ring_a, fill_a, to_ring,
                    graph.type_of(a.outputs[0]))
    stage_b = Stage(b, second, conv_b, context(conv_b), weights(conv_b), bias(conv_b), ring_b,
                    stage_a.pooled_row, to_y, graph.type_of(conv_b.outputs[0]))
    with for_range(b, second.pooled[0], name="py", unroll=False) as py:
        stage_b.pooled_row(py)
