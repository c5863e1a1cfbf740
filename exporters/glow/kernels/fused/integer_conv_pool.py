"""A QConv fused with the MaxPool that reads its output (exporters/glow/fuse.py), in either layout.

Unfused, a QConv writes its whole output and im2col (integer_im2col.py) copies the receptive fields of a tile
of positions into a workspace; fused, the layer needs neither: the convolution values are summed straight
from the input, pooled in registers and requantised (integer_dot.Requant). Each pooled output is the max of
the requantised integers of the convolution positions in its window — what QConv then MaxPool compute, bit
for bit — so the activations hold the input and the pooled output only (LeNet int8: 14,400 -> 3,680 bytes).
With non-negative multipliers (every quantizer's) the requantisation is monotonic, so the max of a window's
sums is taken first and requantised once (``raw_max``: LeNet int8 on Cortex-M7, conv1 538,369 -> 502,009
instructions, conv2 2,159,769 -> 2,107,769). With SMLAD the layer's function is scheduled as a Cortex-M4 on
Armv7E-M (integer_smlad.TUNING, as its helpers are): Cortex-M7's schedule interleaves more loads with the MACs and
the register allocator spills (LeNet int8 on Cortex-M7: conv1 502,009 -> 477,489, conv2 2,107,769 -> 2,091,729).

Per batch, group and block of output channels (``BLOCK``), per pooled position, the pooling taps inside the
convolution's output (conv.py's ``Axis.taps``: the pooling's padding and ceil_mode overrun are never read) are
visited along the last axis two at a time (a pair whose second tap is missing computes its first twice: the
max is the same). A convolution value is a reduction over ``Reduction.dims`` loops around runs of taps that
lie contiguous both in the input and in the weight row: channels first, a row of the window along its last
axis (dilation 1); channels last, a tap's C/group channels (weights re-laid (M, k..., C/group) at export,
integer_conv_weights.pack_weights). On Cortex-M with the DSP extension a run is taken a word at a time: four
8-bit inputs become the centred pairs (x0, x2), (x1, x3) by SXTAB16/UXTAB16, four weights (w0 - zw, w2 - zw),
(w1 - zw, w3 - zw) the same way, and SMLAD multiplies the pairs (SMLALD into 64 bits; two int16 are a pair as
loaded); the rest of a run, and every tap elsewhere, is a single multiply-accumulate of centred values. A
window that crosses the convolution's padding sums only its taps inside the input (a padded tap reads zx:
(zx - zx) * w = 0).

A channels-first layer of 8-bit signed weights without padding takes its weights as halfword pairs of channels
(``pack_pooled_halves``, integer_halves.py): a block's two channels are one row of ``256 w1 + w0``, whose words
SMLAD multiplies as they are (summing T = 256 A1 + A0) and, after one SXTB16, by their low bytes (A0), so that
a word of four weights takes one unpacking instead of two; its input's zero point is folded into the biases at
export, so SXTB16 (not SXTAB16 with zx in a register, which LLVM kept rematerialising) unpacks the inputs.
LeNet int8 conv2 (20 -> 50, 5x5, with its 2x2 pool) on Cortex-M7: 2,364,569 -> 2,159,769 instructions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.cortex_m import integer_halves
from pegasus.exporters.glow.kernels.cortex_m.integer_smlad import tuned
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import BYTES, HALVES, ConvPlan, conv_plan, window_inside
from pegasus.exporters.glow.kernels.integer.integer_conv_weights import pack_weights, weights_layout, weights_table
from pegasus.exporters.glow.kernels.integer.integer_dot import Operand, Requant, acc_bound, dsp, load_word
from pegasus.exporters.glow.kernels.registry import packer
from pegasus.exporters.glow.kernels.strategy import Choice, Query, implementation
from pegasus.exporters.glow.llvm.functions import entry_alloca, intrinsic
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.tiles import for_tiles, range_nest
from pegasus.exporters.glow.llvm.types import I16, I32, I64
from pegasus.exporters.glow.llvm.windows import axes_of
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.layout import first_shape
from pegasus.ops.pool import MaxPool

Value = ir.Value
#: output channels per block: their accumulators and the pair of positions' fit the Thumb registers
BLOCK = 2
#: most words of a run summed unrolled (a longer run is a loop)
UNROLLED_WORDS = 4


@dataclass(frozen=True)
class Reduction:
    """One convolution value as loops over ``dims`` ((count, input step, weight step), outermost first) around
    runs of ``run`` taps contiguous in the input and in the weight row."""

    dims: tuple[tuple[int, int, int], ...]
    run: int


def reduction(cp: ConvPlan) -> Reduction:
    """The loops of ``cp``'s reduction: over the group's channels and the kernel axes, the innermost one that
    is contiguous on both sides (stride 1) folded into the runs, with the next ones while they stay so."""
    xa = cp.xa
    taps = [(axis.kernel, axis.dilation * step) for axis, step in zip(cp.axes, xa.spatial)]
    _, w_channel, w_taps = weight_steps(cp)
    channel = (cp.in_group, xa.channel, w_channel)
    kernel = [(count, x_step, w_step) for (count, x_step), w_step in zip(taps, w_taps)]
    dims = kernel + [channel] if cp.channels_last else [channel] + kernel
    run = 1
    while dims and dims[-1][1] == run and dims[-1][2] == run:
        run *= dims.pop()[0]
    return Reduction(tuple(dims), run)


def weight_steps(cp: ConvPlan) -> tuple[int, int, tuple[int, ...]]:
    """The weights' strides as stored: (output channel, input channel of the group, each kernel axis)."""
    w = strides_of(cp.w.shape)
    if cp.channels_last and cp.depthwise:       # (k..., 1, M)
        return w[-1], w[-2], w[:-2]
    if cp.channels_last:                        # (M, k..., C/group)
        return w[0], w[-1], w[1:-1]
    return w[0], w[1], w[2:]                    # (M, C/group, k...)


def conv_output(k: KernelContext) -> TensorRef:
    """The convolution's output, never stored: its type only (the group's output is the pooling's)."""
    a, x, w = k.attrs, k.inputs[0], k.inputs[1]
    last = bool(a.channels_last)
    channels = x.shape[-1] if last else x.shape[1]
    packed = last and a.group > 1 and channels // a.group == 1       # depthwise weights (k..., 1, M)
    out_channels = k.outputs[0].shape[-1 if last else 1]              # the pooling keeps the channels
    kernel = w.shape[:-2] if packed else (w.shape[1:-1] if last else w.shape[2:])
    w_first = (out_channels, channels // a.group, *kernel)
    out = Conv.geometry(a, first_shape(x.shape, last), w_first).out
    shape = (x.shape[0], *out, out_channels) if last else (x.shape[0], out_channels, *out)
    return TensorRef(None, TensorType(shape, DType(a.out_dtype)))


class Dot:
    """Sums of centred products over the taps of a few positions for a block of output channels."""

    def __init__(self, k: KernelContext, cp: ConvPlan):
        self.b, self.cp, self.mac = k.builder, cp, cp.mac
        x_bytes, w_bytes = cp.x.type.dtype.itemsize, cp.w.type.dtype.itemsize
        zero = self.mac.x.zero_point == 0 and self.mac.w.zero_point == 0
        self.dual = self.mac.dual(k.target) and ((x_bytes == w_bytes == 1) or (x_bytes == w_bytes == 2 and zero)
                                                 or (cp.halves and x_bytes == 1))
        self.per_word = 4 // x_bytes
        # without pairs, a target with vector registers sums each run as one vector product (reduced once)
        self.vector = not self.dual and simd_of(k.target).width >= 16

    def single(self, slots: list[list[Value]], xs: list[Value], ws: list[Value]) -> None:
        """slots[p][c] += (X[xs[p]] - zx) * (W[ws[c]] - zw)."""
        b, mac = self.b, self.mac
        acc = mac.acc

        def centred(ref: TensorRef, flat: Value, side) -> Value:
            value = widen(b, ref.load(b, flat), acc, side.signed)
            return b.sub(value, ir.Constant(acc, side.zero_point)) if side.zero_point else value

        x_values = [centred(self.cp.x, flat, mac.x) for flat in xs]
        weights = self.halves_at(ws[0]) if self.cp.halves else [centred(self.cp.w, flat, mac.w) for flat in ws]
        for c, weight in enumerate(weights):
            for p, value in enumerate(x_values):
                slot = slots[p][c]
                b.store(b.add(b.load(slot), b.mul(value, weight)), slot)

    def pairs(self, ref: TensorRef, flat: Value, side) -> list[Value]:
        """The centred 16-bit pairs of the word at ref[flat]: (v0, v2), (v1, v3) of four bytes, or two int16."""
        b = self.b
        word = load_word(b, ref, flat)
        if self.per_word == 2:
            return [word]
        rotated = b.or_(b.lshr(word, const(8)), b.shl(word, const(24)))
        if not side.zero_point:
            unpack = dsp(b.module, "sxtb16" if side.signed else "uxtb16", 1)
            return [b.call(unpack, [word]), b.call(unpack, [rotated])]
        centre = dsp(b.module, "sxtab16" if side.signed else "uxtab16", 2)
        minus = const((-side.zero_point & 0xFFFF) * 0x10001)
        return [b.call(centre, [minus, word]), b.call(centre, [minus, rotated])]

    def weight_pairs(self, ws: list[Value]) -> list[list[Value]]:
        """Per accumulator of a block, the 16-bit weight pairs of the group of four taps at ``ws`` (a row per
        channel; halfwords: the pair of rows' one row, whose accumulators sum A0 and T, integer_halves.py)."""
        if not self.cp.halves:
            return [self.pairs(self.cp.w, flat, self.mac.w) for flat in ws]
        b = self.b
        raw = [load_word(b, self.cp.w, affine(b, 2 * j, (ws[0], 1))) for j in range(2)]
        unpack = dsp(b.module, "sxtb16", 1)
        return [[b.call(unpack, [word]) for word in raw], raw]

    def weight_values(self, ws: list[Value]) -> list[Value]:
        """Per accumulator of a block, the centred i32 weight of the single tap at ``ws``."""
        if self.cp.halves:
            return self.halves_at(ws[0])
        b, side = self.b, self.mac.w
        values = [widen(b, self.cp.w.load(b, flat), I32, side.signed) for flat in ws]
        return [b.sub(value, const(side.zero_point)) if side.zero_point else value for value in values]

    def halves_at(self, flat: Value) -> list[Value]:
        """The halfword 256 w1 + w0 at ``flat`` as (w0, the halfword), sign-extended to the accumulator."""
        b, acc = self.b, self.mac.acc
        half = self.cp.w.load(b, flat)
        return [b.sext(b.trunc(half, ir.IntType(8)), acc), b.sext(half, acc)]

    def word(self, slots: list[list[Value]], xs: list[Value], ws: list[Value]) -> None:
        """slots[p][c] += the products of the word of taps at X[xs[p]] and W[ws[c]] (SMLAD / SMLALD)."""
        b, acc = self.b, self.mac.acc
        dual = dsp(b.module, "smlad", 3) if acc is I32 else intrinsic(b.module, "llvm.arm.smlald", I64,
                                                                       [I32, I32, I64])
        x_pairs = [self.pairs(self.cp.x, flat, self.mac.x) for flat in xs]
        for c, w_pairs in enumerate(self.weight_pairs(ws)):
            for p, pairs in enumerate(x_pairs):
                total = b.load(slots[p][c])
                for x_pair, w_pair in zip(pairs, w_pairs):
                    total = b.call(dual, [x_pair, w_pair, total])
                b.store(total, slots[p][c])

    def vector_run(self, slots: list[list[Value]], xs: list[Value], ws: list[Value], length: int) -> None:
        """slots[p][c] (vectors of ``length`` lanes) += the centred products of the run's taps, lane by lane."""
        b, mac = self.b, self.mac
        # a product of two centred values fits 32 bits unless both are wide (64-bit lanes multiply slowly)
        word = I32 if mac.x.magnitude * mac.w.magnitude < (1 << 31) else mac.acc
        vector = ir.VectorType(word, length)

        def load(ref: TensorRef, flat: Value, side) -> Value:
            pointer = b.bitcast(ref.address(b, flat), ir.VectorType(ref.element, length).as_pointer())
            value = (b.sext if side.signed else b.zext)(b.load(pointer, align=ref.type.dtype.itemsize), vector)
            zero = ir.Constant(vector, [ir.Constant(word, side.zero_point)] * length)
            return b.sub(value, zero) if side.zero_point else value

        x_values = [load(self.cp.x, flat, mac.x) for flat in xs]
        for c, flat in enumerate(ws):
            weights = load(self.cp.w, flat, mac.w)
            for p, value in enumerate(x_values):
                product = b.mul(value, weights)
                if word is not mac.acc:
                    product = b.sext(product, ir.VectorType(mac.acc, length))
                b.store(b.add(b.load(slots[p][c]), product), slots[p][c])

    def neighbours(self, slots: list[list[Value]], x0: Value, ws: list[Value], length: int) -> None:
        """``run`` for two positions whose taps start at X[x0] and X[x0 + 1], ``length`` = 4q + 1: the words at
        x0 + 4m and x0 + 4m + 2 give the pairs (4m, 4m+2), (4m+1, 4m+3), (4m+2, 4m+4), (4m+3, 4m+5) that both
        positions need (the first's group m is (4m, 4m+2), (4m+1, 4m+3), the second's (4m+1, 4m+3),
        (4m+2, 4m+4), against the same weight pairs); the last taps, 4q and 4q + 1, are the high halves of the
        last two pairs (SMLATB) — so no byte past the second window is read."""
        b = self.b
        dual, single = dsp(b.module, "smlad", 3), dsp(b.module, "smlatb", 3)
        mac = self.mac
        for m in range(length // 4):
            low = self.pairs(self.cp.x, affine(b, 4 * m, (x0, 1)), mac.x)
            high = self.pairs(self.cp.x, affine(b, 4 * m + 2, (x0, 1)), mac.x)
            for c, w_pairs in enumerate(self.weight_pairs([affine(b, 4 * m, (w_at, 1)) for w_at in ws])):
                for p, xs in enumerate(([low[0], low[1]], [low[1], high[0]])):
                    total = b.load(slots[p][c])
                    for x_pair, w_pair in zip(xs, w_pairs):
                        total = b.call(dual, [x_pair, w_pair, total])
                    b.store(total, slots[p][c])
        last = length - 1
        for c, weight in enumerate(self.weight_values([affine(b, last, (w_at, 1)) for w_at in ws])):
            for p, x_pair in enumerate(high):
                b.store(b.call(single, [x_pair, weight, b.load(slots[p][c])]), slots[p][c])

    def run(self, slots: list[list[Value]], xs: list[Value], ws: list[Value], length: int) -> None:
        """The products of ``length`` contiguous taps from X[xs[p]] and W[ws[c]]: whole words, then singles."""
        b = self.b
        words = length // self.per_word if self.dual else 0
        step = self.per_word

        def at(first: Value | int, bases: list[Value]) -> list[Value]:
            return [affine(b, 0, (base, 1), (first, 1)) for base in bases]

        if words > UNROLLED_WORDS:
            with for_range(b, words, name="word") as j:
                first = b.mul(j, const(step))
                self.word(slots, at(first, xs), at(first, ws))
        else:
            for j in range(words):
                self.word(slots, at(j * step, xs), at(j * step, ws))
        if words * step == length:
            return
        if self.dual or length - words * step <= UNROLLED_WORDS:
            for t in range(words * step, length):
                self.single(slots, at(t, xs), at(t, ws))
            return
        with for_range(b, length, name="tap") as t:
            self.single(slots, at(t, xs), at(t, ws))


def pooled_params(query: Query) -> dict[str, str | None]:
    """How the layer's weights are stored: channels last as integer_conv_weights.py ``weights_layout`` and
    ``weights_table`` say, channels first as halfword pairs of rows where ``pooled_halves`` lays them."""
    node, graph, target, pooled = query.node, query.graph, query.target, query.layer.pool is not None
    if node.attrs.channels_last:
        layout = weights_layout(node, graph, target, pooled)
        return {"weights": layout, "table": weights_table(node, graph, layout, pooled)}
    return {"weights": HALVES if pooled_halves(node, graph, target, pooled) else BYTES, "table": None}


@dataclass
class _PooledConv:
    """One QConv + MaxPool layer being emitted (module docstring): its plan, the pooling's axes, the dot-product
    flavour and the requantisation, decided once; ``block`` writes a block of output channels."""

    k: KernelContext

    def __post_init__(self) -> None:
        k = self.k
        b = self.b = k.builder
        self.pooled = k.outputs[0]
        cp = conv_plan(replace(k, outputs=[conv_output(k)]))
        self.paired = cp.paired      # depthwise weights stored as centred 16-bit pairs (pack_weights), read as int16
        if self.paired:
            cp = replace(cp, w=TensorRef(b.bitcast(cp.w.ptr, I16.as_pointer()),
                                         TensorType((*cp.w.shape[:-1], cp.w.shape[-1] * 2), DType.INT16)), paired=False)
        self.cp = cp
        conv = cp.y
        last = cp.channels_last
        conv_sizes = conv.shape[1:-1] if last else conv.shape[2:]
        self.pool_axes = axes_of(MaxPool.geometry(k.layer.pool.attrs, first_shape(conv.shape, last)), conv_sizes)
        self.rq = Requant(k.table, k.attrs, conv, acc_bound(cp.mac, cp.bias))
        self.red = red = reduction(cp)
        self.dot = dot = Dot(k, cp)
        if dot.dual:    # scheduled as integer_smlad.TUNING says (module docstring)
            tuned(b.function)
        self.acc = acc = cp.mac.acc
        self.out = conv.element
        self.signed = conv.type.dtype != DType.UINT8
        self.lowest = integer_range(conv.type.dtype.numpy)[0]
        # the max of a window's sums, requantised once: with non-negative multipliers the requantisation is
        # monotonic (rounding and clamps never reorder), so max(rq(a), rq(b)) = rq(max(a, b)) — one
        # requantisation per pooled output instead of one per convolution value (LeNet conv1: 4 per output)
        self.raw_max = all(int(m) >= 0 for m in k.attrs.multiplier)
        self.pair = 2 if self.pool_axes[-1].kernel % 2 == 0 else 1
        # the pair's windows one byte apart along rows of 4q + 1 taps: their words are shared (Dot.neighbours)
        self.reduce_add = intrinsic(k.module, f"llvm.vector.reduce.add.v{red.run}i{acc.width}", acc,
                                    [ir.VectorType(acc, red.run)])
        self.neighbours = (self.pair == 2 and dot.dual and dot.per_word == 4 and acc is I32 and not last
                           and cp.axes[-1].stride * self.pool_axes[-1].dilation == 1 and red.run % 4 == 1
                           and 1 <= red.run // 4 <= UNROLLED_WORDS)
        self.limits = [axis.interior() for axis in cp.axes]
        self.checked = [i for i, (limit, axis) in enumerate(zip(self.limits, cp.axes)) if limit != (0, axis.out)]
        if cp.halves and (self.checked or red.run != cp.axes[-1].kernel or not dot.dual):
            raise AssertionError(f"layer '{k.node.name}': halfword weights laid for runs of the kernel's rows, "
                                 "no padding")
        self.y_spatial = self.pooled.strides[1:-1] if last else self.pooled.strides[2:]
        self.y_channel = 1 if last else self.pooled.strides[1]

    def _interior(self, slots, lanes, bases, rows) -> None:
        """The positions' windows inside the input: runs of the reduction, no bounds."""
        b, red, dot = self.b, self.red, self.dot
        with loop_nest(b, [count for count, _, _ in red.dims], names="rstuvwxyz") as indices:
            x_at = affine(b, 0, *((i, x_step) for i, (_, x_step, _) in zip(indices, red.dims)))
            w_at = affine(b, 0, *((i, w_step) for i, (_, _, w_step) in zip(indices, red.dims)))
            xs, ws = [b.add(base, x_at) for base in bases], [b.add(row, w_at) for row in rows]
            if self.neighbours:
                dot.neighbours(slots, xs[0], ws, red.run)
            elif lanes:
                dot.vector_run(lanes, xs, ws, red.run)
            else:
                dot.run(slots, xs, ws, red.run)
        for row, lane_row in zip(slots, lanes or []):
            for slot, lane_slot in zip(row, lane_row):
                b.store(b.add(b.load(slot), b.call(self.reduce_add, [b.load(lane_slot)])), slot)

    def _border(self, slots, positions, bases, rows) -> None:
        """Each position alone, over its taps inside the input."""
        b, cp, xa = self.b, self.cp, self.cp.xa
        steps = [axis.dilation * step for axis, step in zip(cp.axes, xa.spatial)]
        _, w_channel, w_taps = weight_steps(cp)
        for p, (coords, base) in enumerate(zip(positions, bases)):
            ranges = [axis.taps(b, o) for axis, o in zip(cp.axes, coords)]
            with for_range(b, cp.in_group, name="ci") as ci:
                with range_nest(b, ranges) as ks:
                    x_at = affine(b, 0, (base, 1), (ci, xa.channel), *zip(ks, steps))
                    w_at = affine(b, 0, (ci, w_channel), *zip(ks, w_taps))
                    self.dot.single([slots[p]], [x_at], [b.add(row, w_at) for row in rows])

    def sums(self, batch: Value, group: Value, rows: list[Value], positions: list[list[Value]]) -> list[list[Value]]:
        """acc[p][c]: the convolution's sums at ``positions`` (output coordinates) for the block's weight rows (of
        halfwords: the pair's one row, summing A0 and T, then A0 and A1: integer_halves.py)."""
        b, cp, acc, red = self.b, self.cp, self.acc, self.red
        xa = cp.xa
        slots = [[entry_alloca(b, acc) for _ in range(2 if cp.halves else len(rows))] for _ in positions]
        for row in slots:
            for slot in row:
                b.store(ir.Constant(acc, 0), slot)
        lanes = None
        if self.dot.vector and red.run > 1:
            vector = ir.VectorType(acc, red.run)
            lanes = [[entry_alloca(b, vector) for _ in rows] for _ in positions]
            for row in lanes:
                for slot in row:
                    b.store(ir.Constant(vector, None), slot)
        origins = [[axis.origin(b, o) for axis, o in zip(cp.axes, coords)] for coords in positions]
        x_group = affine(b, 0, (batch, xa.batch), (group, cp.in_group * xa.channel))
        bases = [affine(b, 0, (x_group, 1), *zip(origin, xa.spatial)) for origin in origins]
        inside = None
        for coords in positions:
            ok = window_inside(b, [coords[i] for i in self.checked], [self.limits[i] for i in self.checked])
            inside = ok if inside is None else b.and_(inside, ok)
        if inside is None:
            self._interior(slots, lanes, bases, rows)
        else:
            with b.if_else(inside, likely=True) as (then, otherwise):
                with then:
                    self._interior(slots, lanes, bases, rows)
                with otherwise:
                    self._border(slots, positions, bases, rows)
        totals = [[b.load(slot) for slot in row] for row in slots]
        if cp.halves:
            by_row = integer_halves.unpair(b, [list(row) for row in zip(*totals)])    # [A0 per position, A1 ...]
            return [list(cells) for cells in zip(*by_row)]
        return totals

    def _window_max(self, batch, group, rows, chans, biases, best, pool_coords) -> None:
        """Into ``best`` (one slot per channel): the max over the pooling window at ``pool_coords``."""
        b, pair, width = self.b, self.pair, len(chans)
        ranges = [axis.taps(b, o) for axis, o in zip(self.pool_axes, pool_coords)]
        starts = [axis.origin(b, o) for axis, o in zip(self.pool_axes, pool_coords)]
        *outer, (lo, hi) = ranges
        with range_nest(b, outer) as outer_taps:
            count = b.udiv(b.add(b.sub(hi, lo), const(pair - 1)), const(pair)) if pair > 1 else b.sub(hi, lo)
            with for_range(b, count, name="pair") as index:
                first = affine(b, 0, (lo, 1), (index, pair))
                taps = [affine(b, j, (first, 1)) for j in range(pair)]
                positions = [[affine(b, 0, (start, 1), (t, axis.dilation)) for start, t, axis in
                              zip(starts, [*outer_taps, tap], self.pool_axes)] for tap in taps]
                totals = self.sums(batch, group, rows, positions)
                cells = [(p, c) for p in range(len(taps)) for c in range(width)]
                values = ([totals[p][c] for p, c in cells] if self.raw_max
                          else self.rq.many(b, [(totals[p][c], chans[c], biases[c]) for p, c in cells]))
                if pair > 1:    # a last tap past the window's: its value is the first's
                    ok = b.icmp_signed("<", taps[1], hi)
                    values = values[:width] + [b.select(ok, v, values[c]) for c, v in enumerate(values[width:])]
                for (_, c), value in zip(cells, values):
                    current = b.load(best[c])
                    larger = (b.icmp_signed(">", value, current) if self.signed or self.raw_max
                              else b.icmp_unsigned(">", value, current))
                    b.store(b.select(larger, value, current), best[c])

    def block(self, batch: Value, group: Value, local0: Value, width: int) -> None:
        """Output channels ``local0`` .. + ``width`` of ``group``: every pooled output, max then requantised."""
        b, cp, acc = self.b, self.cp, self.acc
        chans = [affine(b, c, (group, cp.out_group), (local0, 1)) for c in range(width)]
        rows = [b.mul(_place(b, chan, self.paired), const(weight_steps(cp)[0])) for chan in chans]
        if cp.halves:       # a pair of channels (even ones first: an even count, blocks of BLOCK = 2) in one row
            rows = [b.mul(b.lshr(chans[0], const(1)), const(weight_steps(cp)[0]))]
        biases = [None if cp.bias is None else cp.bias.load(b, chan) for chan in chans]
        with loop_nest(b, [axis.out for axis in self.pool_axes], names="abcdefgh") as pool_coords:
            best = [entry_alloca(b, acc if self.raw_max else self.out) for _ in chans]
            start = ir.Constant(acc, -(1 << (acc.width - 1))) if self.raw_max else ir.Constant(self.out, self.lowest)
            for slot in best:
                b.store(start, slot)
            self._window_max(batch, group, rows, chans, biases, best, pool_coords)
            y_at = affine(b, 0, (batch, self.pooled.strides[0]), *zip(pool_coords, self.y_spatial))
            results = [b.load(slot) for slot in best]
            if self.raw_max:
                results = self.rq.many(b, list(zip(results, chans, biases)))
            for chan, result in zip(chans, results):
                self.pooled.store(b, result, affine(b, 0, (y_at, 1), (chan, self.y_channel)))


@implementation("QConv+group", "QConv+group", family="fused", params=pooled_params)
def qconv_pool(k: KernelContext) -> None:
    """A QConv and its MaxPool (module docstring); ``k.outputs`` is the pooling's output."""
    layer = _PooledConv(k)
    with loop_nest(k.builder, [layer.cp.x.shape[0], layer.cp.group], names="ng") as (batch, group):
        for_tiles(k.builder, 0, layer.cp.out_group, BLOCK,
                  lambda local0, width: layer.block(batch, group, local0, width))


@packer("QConv+group")
def pack_pooled_halves(query: Query, choice: Choice) -> dict[int, np.ndarray]:
    """A QConv fused with its MaxPool: channels last, its weights as the channels-last kernels read them
    (integer_conv_weights.py ``pack_weights``); channels first on a CPU with the DSP extension, its weights (M, C, k...)
    as halfword pairs of rows (integer_halves.py: per pair of channels, one SMLAD sums A0 and T = 256 A1 + A0 over
    a word of two halfwords, one more A0 over their SXTB16'd low bytes) in the order ``Dot`` reads each row of
    the window (``integer_halves.run_order``), as int16 (M / 2, C, k...): where the windows never cross the
    padding (none), with dilation 1 and rows shorter than the input's (the runs are the kernel's rows), else
    the bytes stay."""
    node, pooled, layout = query.node, query.layer.pool is not None, choice.param("weights")
    if node.attrs.channels_last:
        return pack_weights(node, query.graph, query.target, pooled, layout, choice.param("table"))
    return pooled_halves(node, query.graph, query.target, pooled) if layout == HALVES else {}


def pooled_halves(node: Node, graph: Graph, target, pooled: bool) -> dict[int, np.ndarray]:
    """The channels-first weights of ``pack_pooled_halves`` for a layer that ends with a pooling (``pooled``)."""
    info = CPUS.get(getattr(target, "cpu", ""))
    attrs, x = node.attrs, graph.type_of(node.inputs[0])
    if not (info is not None and info.has_dsp and target.is_cortex_m and graph.tensors[node.inputs[1]].is_constant
            and pooled):
        return {}
    w = graph.value_of(node.inputs[1])
    if (attrs.group != 1 or x.dtype.itemsize != 1 or any(attrs.pads) or any(d != 1 for d in attrs.dilations or ())
            or w.ndim < 3 or x.shape[-1] <= w.shape[-1]):
        return {}
    if len(node.inputs) < 3 or not node.inputs[2] or not graph.tensors[node.inputs[2]].is_constant:
        return {}
    rows = w.reshape(w.shape[0], -1)
    # the input's zero point folds into the bias: b - zx Σ w (the sums then take the inputs as they are)
    bias = graph.value_of(node.inputs[2]).astype(np.int64) - attrs.x_zero_point * rows.astype(np.int64).sum(axis=1)
    if graph.type_of(node.inputs[2]).dtype is not DType.INT32 or np.abs(bias).max(initial=0) >= 1 << 31:
        return {}
    if not integer_halves.halves_rows(rows, None, Operand(x.dtype, 0).magnitude, attrs.w_zero_point,
                                      whole_groups=False):
        return {}
    halves = integer_halves.halfwords(rows)[:, integer_halves.run_order(rows.shape[1], w.shape[-1])]
    return {1: np.ascontiguousarray(halves).reshape((w.shape[0] // 2,) + w.shape[1:]), 2: bias.astype(np.int32)}


def _place(b: ir.IRBuilder, chan: Value, paired: bool) -> Value:
    """Where output channel ``chan``'s weights lie among the channels: in order, or — weights stored as 16-bit
    pairs (integer_conv_weights.spread_pairs) — each group of four as w0 w2 w1 w3."""
    if not paired:
        return chan
    j = b.and_(chan, const(3))
    return b.or_(b.sub(chan, j), b.or_(b.shl(b.and_(j, const(1)), const(1)), b.lshr(j, const(1))))
