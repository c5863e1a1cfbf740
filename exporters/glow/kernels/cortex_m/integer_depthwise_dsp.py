"""Depthwise QConv, channels last, on Cortex-M with the DSP extension (8-bit operands, multiplier 1, i32
sums, a multiple of four channels): blocks of up to four output positions along a row, two channels at a
time.

Why this shape. A tap's four channels are one word of inputs, and SMLABB/SMLATT multiply one channel
each, so the products cost one instruction per MAC whatever the blocking; what a blocking saves is the
rest: loading and centring the inputs, loading the weights, requantising. Adjacent positions share most of
their input columns (a 3x3 window at stride 1 reads 6 columns for four positions, not 12): each column is
loaded and centred once for every tap that reads it, each tap's weights once per kernel row for the block.
Thumb-2's registers decide the rest: the four channels of a word are taken as two pairs, (x0, x2) then
(x1, x3) — SXTAB16 without and with its rotation, sign- or zero-extending and adding ``-zx`` in one
instruction — so a pass keeps 8 sums (in r2-r9), the kernel row's weight words, an input, the two pointers
and the ``-zx`` constant in registers (the 16 sums of all four channels cannot). The weights are the pairs
(w0, w2), (w1, w3) (stored so at export, integer_conv_weights.spread_pairs, or spread by SXTB16 from bytes).
Each channel's requantisation parameters are read once for the block's positions.

The code is unrolled with constant offsets: per kernel row, its weights, then its columns in order (an
empty inline-assembly statement between columns takes the sums in fixed registers: LLVM neither hoists
loads nor sinks products across it, and keeps each sum in one register across the branches). A kernel row
that reads the padding for some output row is tested per row; a column that reads it for some block is
tested per block, and when enough blocks read no padding they run a copy without those tests
(``SPLIT_TESTS``). Blocks of four or three positions (``block_positions``), a shorter last one where
neither divides the row. Cortex-M7, int8 3x3 (instructions per MAC, requantisation included; the
single-position kernel before in brackets): DS-CNN 64 channels of 25x5 2.86 (3.65), MobileNetV1 0.25 8
channels of 48x48 3.11 (4.28), 32 of 24x24 3.09 (3.82), 64 of 12x12 2.98 (3.59), 128 of 6x6 2.96 (3.76),
256 of 3x3 2.34 (3.39), its stride-2 layers 2.76-3.26 (3.44-3.69). The products take 1 per MAC, centring
and weights about 0.6, the requantisation (doubling, SMMULR, shift, rounding, SSAT, store: 6 per output)
0.75. Under TFLite's rounding with a fused ReLU the layer's bias is replaced by a table of (2 b, K, M, t + 1)
per channel and its weights are stored doubled (integer_conv_weights.depthwise_table): the sums start at 2 b and
each output is SMMLAR, ASR, SSAT and the store, 4 instructions (MobileNetV1 0.25's depthwise layers 2.9 -> 2.6
instructions per MAC).

Streaming (integer_conv.py ``qconv_stream``; memory_plan.overlap_bytes: the output may start ``delta``
bytes below its dying input, delta >= (p + 1 - first(p)) * C for every output position p, first(p) the
first input position its window and later ones read, C bytes per position on both sides): the blocks go
along each row in order; a block writes its first two positions pass by pass, each after the pass has read
its channels of the block's windows, and keeps the others on the stack until its channel loop ends
(``deferred``). Output byte (p + 1) * C + c, written while channels of p's window are still unread, lies
over an input byte of p's window of channel c or lower: below every channel still to read, but for c0 + 1,
which the second pass of a block of four channels reads after the first wrote c0 + 2 — one byte lower,
which would need delta = 1 (mod 4), where delta is a multiple of 64. Position p + 2 written early would
need a delta larger by a position (tests/exporters/test_depthwise_dsp.py shows its wrong bytes).

The select stage chooses this kernel as implementation ``qconv.depthwise_dsp`` (``dsp_applies``: where
``qconv.depthwise_last`` applies, integer_depthwise.uses_dsp holds for the weights as the pack stage lays them,
and the channels come in whole blocks), with the weights, tables, packer and stream of integer_conv.py.
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_conv import (
    depthwise_last_applies,
    depthwise_stream,
    pack_qconv,
    qconv_params,
)
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import (
    DEPTHWISE,
    PAIRS,
    ConvPlan,
    conv_plan,
    depthwise_layout,
    doubles,
)
from pegasus.exporters.glow.kernels.integer.integer_depthwise import dsp_operands, uses_dsp
from pegasus.exporters.glow.kernels.integer.integer_dot import Mac, Operand, Requant, acc_bound, dsp, seeds_bias
from pegasus.exporters.glow.kernels.registry import packer, streams
from pegasus.exporters.glow.kernels.strategy import Query, Verdict, implementation
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.exporters.glow.llvm.types import I8, I32, I64
from pegasus.ir.dtypes import DType
from pegasus.ops.spatial import prod

Value = ir.Value

#: channels of a block (one word of 8-bit inputs); most output positions of a block along the last axis (8
#: sums, in r2-r9)
LANES, POSITIONS = 4, 4
#: most bytes of the positions a block keeps on the stack until its windows are read (its third and fourth;
#: more channels: fewer positions per block; the stack budget is 512 B)
DEFERRED_BYTES = 256
#: least (blocks that read no padding) x (columns tested) per row for which such blocks get a copy without
#: the tests: MobileNetV1's rows of 48 (+1.7 KB of code, 7% fewer instructions), not its rows of 24 (8)
SPLIT_TESTS = 12


def handles(cp: ConvPlan) -> bool:
    """Whether the layer's channels come in whole blocks (the DSP conditions are integer_depthwise's)."""
    return cp.ya.channels % LANES == 0


def block_columns(axis, count: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """The input columns ``count`` adjacent outputs of ``axis`` read, as offsets from the first one's window
    origin, each with the (position, tap) pairs reading it, in order."""
    uses: dict[int, list[tuple[int, int]]] = {}
    for p in range(count):
        for kk in range(axis.kernel):
            uses.setdefault(p * axis.stride + kk * axis.dilation, []).append((p, kk))
    return sorted(uses.items())


def tested_columns(axis, count: int, start: int) -> set[int]:
    """The columns (``block_columns`` offsets) of the block starting at output ``start`` that read the
    padding."""
    return {offset for offset, _ in block_columns(axis, count)
            if not 0 <= start * axis.stride - axis.pad + offset < axis.size}


def deferred(count: int) -> int:
    """How many of a block's ``count`` positions wait on the stack until its windows are read: all but the
    first two (module docstring: a third position written early may overwrite them)."""
    return max(0, count - 2)


def block_positions(out: int, channels: int) -> int:
    """Positions per block along a row of ``out`` outputs: four or three, whichever divides the row (one block
    of code; MobileNetV1's rows of 6: 3 + 3, not 4 + 2), else four, or three where four would leave a last
    block of one (DS-CNN's rows of 5: 3 + 2, not 4 + 1); fewer while the positions kept on the stack would
    pass ``DEFERRED_BYTES``."""
    dividing = [count for count in (POSITIONS, 3) if out % count == 0]
    count = dividing[0] if dividing else 3 if out % POSITIONS == 1 and out % 3 != 1 else POSITIONS
    while count > 2 and deferred(count) * channels > DEFERRED_BYTES:
        count -= 1
    return min(count, out)


def qconv_depthwise_dsp(k: KernelContext, cp: ConvPlan) -> None:
    """A channels-last depthwise QConv on a DSP Cortex-M (module docstring)."""
    _Kernel(k, cp).emit()


NAME = "qconv.depthwise_dsp"


def dsp_applies(query: Query) -> Verdict:
    """A channels-last depthwise layer on a Cortex-M whose plan, with its weights laid as the choice says
    (integer_conv_plan.conv_plan: 16-bit pairs bounded by 255, or 510 doubled, else the imported bytes), takes
    the DSP path (integer_depthwise.dsp_operands) in whole blocks of channels (``handles``)."""
    verdict = depthwise_last_applies(query)
    if verdict is not True:
        return verdict
    if not getattr(query.target, "is_cortex_m", False):
        return "not a Cortex-M"
    node, attrs, params = query.node, query.node.attrs, qconv_params(query)
    x, w, y = (query.type_of(node.inputs[0]), query.type_of(node.inputs[1]), query.type_of(node.outputs[0]))
    paired = params["weights"] == PAIRS
    doubled = paired and doubles(attrs) and params["table"] == DEPTHWISE
    w_side = Operand(DType.INT16, 0, 255 * (1 + doubled)) if paired else Operand(w.dtype, int(attrs.w_zero_point))
    mac = Mac(Operand(x.dtype, int(attrs.x_zero_point)), w_side, prod(w.shape[2:]))
    channels = y.shape[-1]
    if not dsp_operands(mac, query.target, channels // attrs.group, x.dtype.itemsize, w.dtype.itemsize, paired):
        return "not 8-bit operands of multiplier 1 and i32 sums on a DSP CPU"
    return True if channels % LANES == 0 else f"channels not a multiple of {LANES}"


packer(NAME)(pack_qconv)
streams(NAME)(depthwise_stream)


@implementation(NAME, "QConv", family="cortex_m", priority=30, when=dsp_applies, params=qconv_params)
def depthwise_dsp(k: KernelContext) -> None:
    """A channels-last depthwise QConv of 8-bit operands on a DSP Cortex-M: blocks of positions along a row."""
    cp = conv_plan(k)
    if not (uses_dsp(k, cp) and handles(cp)):
        raise AssertionError(f"{NAME} chosen for '{k.node.name}', which its kernel does not compute")
    qconv_depthwise_dsp(k, cp)


class _Kernel:
    """The emitter's state: the layer's plan, its requantisation, its steps in the input and the weights."""

    def __init__(self, k: KernelContext, cp: ConvPlan):
        self.b, self.cp = k.builder, cp
        # a layer whose bias was replaced by its table (integer_conv_weights.depthwise_table) reads its requantisation
        # there: no tables of Requant's own
        self.table = depthwise_layout(cp)
        self.rq = (Requant(lambda values, ty: None, k.attrs, cp.y, acc_bound(cp.sums, None)) if self.table
                   else Requant(k.table, k.attrs, cp.y, acc_bound(cp.mac, cp.bias)))
        *self.outer, self.last = cp.axes
        kernel = tuple(axis.kernel for axis in cp.axes)
        self.w_steps = [stride * cp.ya.channels // (2 if cp.paired else 1) for stride in strides_of(kernel)]
        self.x_steps = [axis.dilation * stride for axis, stride in zip(cp.axes, cp.xa.spatial)]
        self.seeded = self.table or seeds_bias(cp.mac, cp.bias)
        self.taps = _Taps(self.b, cp, self.table)

    def emit(self) -> None:
        b, cp, last = self.b, self.cp, self.last
        xa, ya = cp.xa, cp.ya
        count = block_positions(last.out, ya.channels)
        full, rest = divmod(last.out, count)
        self.stack = None       # one buffer for every block (the others keep fewer positions)
        if deferred(count):
            self.stack = entry_alloca(b, ir.ArrayType(I8, deferred(count) * ya.channels))
            self.stack.align = 8
        starts = [i * count for i in range(full)]
        tested = set().union(*(tested_columns(last, count, start) for start in starts))
        plain = [start for start in starts if not tested_columns(last, count, start)]
        split = (full > 1 and len(plain) * len(tested) >= SPLIT_TESTS
                 and plain == list(range(plain[0], plain[-1] + 1, count)))
        with loop_nest(b, [cp.x.shape[0], *(axis.out for axis in self.outer)], names="nabcdefg") as (batch, *coords):
            origins = [axis.origin(b, o) for axis, o in zip(self.outer, coords)]
            x_row = affine(b, 0, (batch, xa.batch), *zip(origins, xa.spatial))
            y_row = affine(b, 0, (batch, ya.batch), *zip(coords, ya.spatial))
            row = (x_row, y_row, self.row_tests(origins))
            if full == 1:
                self.block(row, const(0), count, starts)
            else:
                with for_range(b, full, name="block") as index:
                    start = affine(b, 0, (index, count))
                    if not split:
                        self.block(row, start, count, starts)
                    else:       # in order: a block over the padding, or one of the plain ones in between
                        within = b.icmp_unsigned("<", b.sub(start, const(plain[0])), const(plain[-1] - plain[0] + 1))
                        with b.if_else(within, likely=True) as (then, otherwise):
                            with then:
                                self.block(row, start, count, plain)
                            with otherwise:
                                self.block(row, start, count, [s for s in starts if s not in plain])
            if rest:
                self.block(row, const(full * count), rest, [full * count])

    def row_tests(self, origins: list[Value]) -> dict[tuple[int, ...], Value | None]:
        """Per kernel row (taps along every axis but the last): whether it reads inside the input, None when it
        does for every output row."""
        b, tests = self.b, {}
        for ks in itertools.product(*(range(axis.kernel) for axis in self.outer)):
            test = None
            for axis, origin, kk in zip(self.outer, origins, ks):
                if all(0 <= o * axis.stride - axis.pad + kk * axis.dilation < axis.size for o in range(axis.out)):
                    continue
                inside = b.icmp_unsigned("<", affine(b, kk * axis.dilation, (origin, 1)), const(axis.size))
                test = inside if test is None else b.and_(test, inside)
            tests[ks] = test
        return tests

    def block(self, row, start: Value, count: int, starts: list[int]) -> None:
        """Outputs start..start+count-1 of a row, every channel (``starts``: the values start may take)."""
        b, cp, last = self.b, self.cp, self.last
        x_row, y_row, rows = row
        xa, ya = cp.xa, cp.ya
        origin = last.origin(b, start)
        tested = set().union(*(tested_columns(last, count, s) for s in starts))
        columns = []
        for offset, uses in block_columns(last, count):
            if all(offset in tested_columns(last, count, s) for s in starts):
                continue        # in the padding for every block
            test = b.icmp_unsigned("<", affine(b, offset, (origin, 1)), const(last.size)) if offset in tested else None
            columns.append((offset, uses, test))
        x_block = affine(b, 0, (x_row, 1), (origin, xa.spatial[-1]))
        y_block = affine(b, 0, (y_row, 1), (start, ya.spatial[-1]))
        kept, stack = deferred(count), self.stack
        with for_range(b, ya.channels // LANES, name="chan") as chan:
            c0 = affine(b, 0, (chan, LANES))
            xp = opaque(b, cp.x.address(b, affine(b, 0, (x_block, 1), (c0, 1))))
            wp = opaque(b, cp.w.address(b, b.lshr(c0, const(1)) if cp.paired else c0))

            def place(p: int, channel: int) -> Value:
                if p >= count - kept:
                    return b.gep(stack, [const(0), affine(b, (p - count + kept) * ya.channels + channel, (c0, 1))])
                return cp.y.address(b, affine(b, p * ya.spatial[-1] + channel, (y_block, 1), (c0, 1)))

            for half in (0, 1):
                self.channel_pair(rows, columns, half, c0, xp, wp, count, place)
        # copied out by LDRD/STRD (buffers are aligned, MEM_ALIGN), or words; volatile: LLVM would make the
        # copy a call to memcpy
        unit = I64 if ya.channels % 8 == 0 else I32
        size = unit.width // 8
        for p in range(count - kept, count):
            source = b.gep(b.bitcast(stack, unit.as_pointer()), [const((p - count + kept) * ya.channels // size)])
            target = b.bitcast(cp.y.address(b, affine(b, p * ya.spatial[-1], (y_block, 1))), unit.as_pointer())
            with for_range(b, ya.channels // size, name="copy") as i:
                b.store(volatile_load(b, b.gep(source, [i]), size), b.gep(target, [i]), align=4)

    def channel_pair(self, rows, columns, half: int, c0: Value, xp: Value, wp: Value, count: int, place) -> None:
        """Channels c0 + half and c0 + half + 2 at the block's ``count`` positions (``place(p, c)``: where
        position p's channel c0 + c goes)."""
        b, cp, taps = self.b, self.cp, self.taps
        x_steps, w_steps = self.x_steps, self.w_steps
        channels = [affine(b, half + 2 * high, (c0, 1)) for high in (0, 1)]
        slots = [[entry_alloca(b, I32) for _ in channels] for _ in range(count)]
        every = [slot for pair in slots for slot in pair]
        for high, channel in enumerate(channels):
            seed = taps.seed(channel) if self.seeded else const(0)
            for pair in slots:
                b.store(seed, pair[high])
        # the sums a fence pins: those of the positions some MAC reached so far (a prefix of ``every``, the
        # positions starting in order); a sum still at its seed is not copied into its register before its first MAC
        started = 0
        for ks, row_test in rows.items():
            x_row = sum(kk * step for kk, step in zip(ks, x_steps))
            w_row = sum(kk * step for kk, step in zip(ks, w_steps)) + half
            with b.if_then(row_test) if row_test is not None else nullcontext():
                weights = {}
                for offset, uses, test in columns:
                    _fence(b, every[:started])
                    started = max(started, *(2 * (p + 1) for p, _ in uses))
                    for _, kk in uses:      # before the test: later columns use them too
                        if kk not in weights:
                            weights[kk] = taps.weight(wp, w_row + kk * w_steps[-1], half)
                    with b.if_then(test) if test is not None else nullcontext():
                        xs = taps.inputs(b.gep(xp, [const(x_row + offset * cp.xa.spatial[-1])]), half)
                        for p, kk in uses:
                            taps.mac(slots[p], xs, weights[kk])
        _fence(b, every)
        for high, channel in enumerate(channels):     # a channel's parameters read once for its positions
            _fence(b)
            if self.table:      # 2 (acc + bias) from doubled weights and seeds; (K, M, t + 1) after the seed
                k, multiplier, shift = self.taps.parameters(channel)
                values = self.rq.many(b, [(b.load(pair[high]), None, None) for pair in slots], doubled=True,
                                      parameters=[(multiplier, shift, k)] * len(slots))
            else:
                bias = None if cp.bias is None or self.seeded else cp.bias.load(b, channel)
                values = self.rq.many(b, [(b.load(pair[high]), channel, bias) for pair in slots])
            for p, value in enumerate(values):
                b.store(value, place(p, half + 2 * high))


def _fence(b: ir.IRBuilder, slots: list[Value] = ()) -> None:
    """An empty inline assembly statement with side effects that takes and gives back the values in
    ``slots``, in r2, r3, ...: LLVM moves no load across it, every instruction computing those values stays
    before it, so the code keeps the order it is written in, and each sum keeps one register across the
    tests' branches (left to choose, LLVM moved them around at every join: DS-CNN's layer took 3.07
    instructions per MAC instead of 2.86)."""
    values = [b.load(slot) for slot in slots]
    if not values:
        b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "", side_effect=True), [])
        return
    struct = ir.LiteralStructType([I32] * len(values))
    registers = [f"r{2 + i}" for i in range(len(values))]
    constraints = ",".join([f"={{{r}}}" for r in registers] + [f"{{{r}}}" for r in registers])
    out = b.call(ir.InlineAsm(ir.FunctionType(struct, [I32] * len(values)), "", constraints, side_effect=True),
                 values)
    for i, slot in enumerate(slots):
        b.store(b.extract_value(out, i), slot)


class _Taps:
    """The DSP arithmetic of a tap for a channel pair: centred inputs by SXTAB16, weight pairs (stored so at
    export or spread by SXTB16), SMLABB/SMLATT."""

    def __init__(self, b: ir.IRBuilder, cp: ConvPlan, table: bool):
        self.b, self.cp, self.table = b, cp, table
        module, mac = b.module, cp.mac
        self.xtab = dsp(module, "sxtab16" if mac.x.signed else "uxtab16", 2)
        self.xtb = dsp(module, "sxtb16" if mac.w.signed else "uxtb16", 1)
        self.smlabb, self.smlatt = dsp(module, "smlabb", 3), dsp(module, "smlatt", 3)
        self.minus_zx = ir.Constant(I32, (-mac.x.zero_point & 0xFFFF) * 0x10001)

    def _rotated(self, word: Value, half: int) -> Value:
        b = self.b
        return word if not half else b.or_(b.lshr(word, const(8)), b.shl(word, const(24)))

    def seed(self, channel: Value) -> Value:
        """The bias of ``channel`` (the sums start at it): 2 b from a ``depthwise_table``."""
        b = self.b
        return self.cp.bias.load(b, b.shl(channel, const(2)) if self.table else channel)

    def parameters(self, channel: Value) -> list[Value]:
        """(K, M, t + 1) of ``channel`` from its ``depthwise_table`` row (2 b, K, M, t + 1): an LDR and an LDRD
        (a volatile 64-bit load, which LLVM keeps whole)."""
        b, bias = self.b, self.cp.bias
        row = b.shl(channel, const(2))
        k = bias.load(b, b.add(row, const(1)))
        both = volatile_load(b, b.bitcast(bias.address(b, b.add(row, const(2))), I64.as_pointer()), 4)
        return [k, b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]

    def inputs(self, pointer: Value, half: int) -> Value:
        """(x_half - zx, x_half+2 - zx) of the four input bytes at ``pointer`` (volatile: loaded where written,
        not hoisted)."""
        b = self.b
        word = volatile_load(b, b.bitcast(pointer, I32.as_pointer()), 1)
        return b.call(self.xtab, [self.minus_zx, self._rotated(word, half)])

    def weight(self, pointer: Value, offset: int, half: int) -> Value:
        """(w_half, w_half+2), centred, of the tap ``offset`` elements past ``pointer`` (for weights stored as
        bytes, the word of its four channels starts at ``offset - half``)."""
        b, cp = self.b, self.cp
        if cp.paired:        # spread and centred at export
            return b.load(b.gep(pointer, [const(offset)]))
        word = b.load(b.bitcast(b.gep(pointer, [const(offset - half)]), I32.as_pointer()), align=1)
        w = b.call(self.xtb, [self._rotated(word, half)])
        if cp.mac.w.zero_point:
            zw = ir.Constant(I32, (cp.mac.w.zero_point & 0xFFFF) * 0x10001)
            w = b.call(dsp(b.module, "ssub16", 2), [w, zw])
        return w

    def mac(self, pair: list[Value], xs: Value, w: Value) -> None:
        """pair[0] += xs.lo * w.lo, pair[1] += xs.hi * w.hi."""
        b = self.b
        b.store(b.call(self.smlabb, [xs, w, b.load(pair[0])]), pair[0])
        b.store(b.call(self.smlatt, [xs, w, b.load(pair[1])]), pair[1])
