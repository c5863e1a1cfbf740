"""QConv as im2col + dot products, the kernel of every convolution that integer_conv.py sends no other way.

The receptive fields of a tile of output positions are copied, centred, into a scratch buffer (zeros for
the padding; windows inside the input read through a constant table of tap offsets, windows crossing the
padding test every tap), then each block of output channels takes dot products of its contiguous weight
rows with the buffer's rows — loops of constant trip count over a contiguous reduction axis, which LLVM
vectorises on the host. On Cortex-M CPUs with the DSP extension (M4/M7/M33/M55) the dot products use
SMLAD, two 16-bit MACs per instruction: a weight word of four int8/uint8 is spread by SXTB16/UXTB16 into
the pairs (w0, w2) and (w1, w3), so the copy stores each group of four taps of the tile's positions side
by side in the order x0 x2 x1 x3, and a tile of 2 positions x 2 channels takes 8 SMLAD, 4 SXTB16 and 6
loads per 16 MACs (int16 weights are already pairs). Weights stored as interleaved pairs of rows (8-bit
layers of a multiple of four input channels, integer_conv_plan.spread_pairs) take 8 SMLAD and two LDM
per 16 MACs (``_ldm_runs``). The buffer takes ``positions * depth`` 16-bit values
(32-bit when ``x - zx`` needs them) of the layer's workspace in the activations region: 2 positions on
Cortex-M, 4 elsewhere, fewer if that would pass 16 KB.

Channels last, a weight row is (k..., C/group) (integer_conv_plan.py), so each tap of a window is one
contiguous run of C/group inputs, copied run by run — on the SMLAD path a word of four 8-bit inputs at a
time, SXTAB16/UXTAB16 centring the pairs (x0, x2) and (x1, x3) in one instruction each (Cortex-M7, int8
3x3 16 -> 16 channels on 32x32: 1.69 instructions per MAC, 1.86 channels first). A 1x1 convolution takes
the same route: reading each pixel's channels straight from the input instead would unpack every input
word once per pair of output channels rather than once, and measured no faster (32 -> 64 channels on
16x16, Cortex-M7: 1.70 instructions per MAC either way).

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

from pegasus.exporters.glow.kernels.elementwise import intrinsic
from pegasus.exporters.glow.kernels.integer_conv_plan import (
    ConvPlan,
    paired,
    tap_at,
    tap_index,
    tap_offsets,
    window_inside,
)
from pegasus.exporters.glow.kernels.integer_dot import (
    Requant,
    acc_bound,
    accumulate,
    centered,
    dsp,
    finish,
    load_word,
    seeds_bias,
    zeroed,
)
from pegasus.exporters.glow.kernels.integer_madd import load_lanes, madd, padded, reduce_all
from pegasus.exporters.glow.kernels.linear import affine, for_tiles
from pegasus.exporters.glow.kernels.parameters import load_channel
from pegasus.exporters.glow.kernels.registry import KernelContext, entry_alloca, strides_of
from pegasus.exporters.glow.kernels.requant import I16, I32, I64, widen
from pegasus.exporters.glow.kernels.shape_ops import constant_table
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest, no_unroll
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


def im2col(b: ir.IRBuilder, cp: ConvPlan, taps: Taps, batch: Value, group: Value, first: Value, count: int,
           buffer: Value, sums: Value | None) -> None:
    """Rows 0..count-1 of the buffer: the centred receptive fields of output positions first.., zeros where
    they cross the padding; sums[p] = Σ of row p when the weights have a zero point. A window inside the
    input is read through a constant table of tap offsets, in groups of four taps (every store's place in
    the buffer a constant), or channels last run by run (``runs``); a window crossing the padding tests
    each tap."""
    axes, xa = cp.axes, cp.xa
    out_strides = strides_of(tuple(axis.out for axis in axes))
    depth = cp.mac.depth
    limits = [axis.interior() for axis in axes]
    acc = cp.mac.acc
    kernel = [axis.kernel for axis in axes]
    spatial = [sum(kk * axis.dilation * stride for kk, axis, stride in zip(ks, axes, xa.spatial))
               for ks in itertools.product(*(range(n) for n in kernel))]
    if not cp.channels_last or len(spatial) > UNROLLED_TAPS:
        spatial = []
    words = (bool(spatial) and cp.dual and cp.in_group % 4 == 0 and cp.x.type.dtype.itemsize == 1
             and cp.swapped and acc is I32)
    if words:
        centre = dsp(b.module, "sxtab16" if cp.mac.x.signed else "uxtab16", 2)
        smlad = dsp(b.module, "smlad", 3)
        minus_zx = const((-cp.mac.x.zero_point & 0xFFFF) * 0x10001)
        pairs = b.bitcast(buffer, I32.as_pointer())

    with for_range(b, count, name="p") as p:
        position = b.add(first, p)
        coords = []
        for i, (axis, stride) in enumerate(zip(axes, out_strides)):
            o = b.udiv(position, const(stride)) if stride != 1 else position
            coords.append(b.urem(o, const(axis.out)) if i else o)
        origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
        running = zeroed(b, acc) if sums is not None else None

        def put(value: Value, slot: Value) -> None:
            b.store(widen(b, value, cp.element, True), b.gep(buffer, [slot], inbounds=True))
            if running is not None:
                accumulate(b, running, widen(b, value, acc, True))

        def interior() -> None:
            base = affine(b, 0, (batch, xa.batch), (group, cp.in_group * xa.channel), *zip(origins, xa.spatial))
            if depth >= 4:
                with for_range(b, depth // 4, name="q") as q:
                    for j in range(4):
                        offset = widen(b, load_channel(b, taps.table, affine(b, j, (q, 4))), I32, True)
                        put(centered(b, cp.x, b.add(base, offset), cp.mac.x), cp.group_slot(b, p, q, j))
            for k in range(depth // 4 * 4, depth):
                put(centered(b, cp.x, affine(b, taps.offsets[k], (base, 1)), cp.mac.x), cp.slot(b, p, k))

        def runs() -> None:
            """Channels last: each tap's C/group channels are one contiguous run of X and of the row (the
            weights' order): copied run by run, a word of four 8-bit inputs at a time on the SMLAD path
            (SXTAB16/UXTAB16 centre the pairs (x0, x2), (x1, x3) that the buffer holds), else element by
            element (LLVM vectorises the loop)."""
            base = affine(b, 0, (batch, xa.batch), (group, cp.in_group), *zip(origins, xa.spatial))
            for s, offset in enumerate(spatial):
                if words:
                    with for_range(b, cp.in_group // 4, name="g") as g:
                        word = load_word(b, cp.x, affine(b, offset, (base, 1), (g, 4)))
                        slot = b.lshr(cp.group_slot(b, p, affine(b, s * cp.in_group // 4, (g, 1)), 0), const(1))
                        for half, value in enumerate((word, b.or_(b.lshr(word, const(8)), b.shl(word, const(24))))):
                            pair = b.call(centre, [minus_zx, value])
                            b.store(pair, b.gep(pairs, [affine(b, half * cp.positions, (slot, 1))], inbounds=True))
                            if running is not None:
                                b.store(b.call(smlad, [pair, const(0x10001), b.load(running)]), running)
                    continue
                with for_range(b, cp.in_group, name="ci") as ci:
                    put(centered(b, cp.x, affine(b, offset, (base, 1), (ci, 1)), cp.mac.x),
                        cp.slot(b, p, affine(b, s * cp.in_group, (ci, 1))))

        def border() -> None:
            kernel = [axis.kernel for axis in axes]
            with for_range(b, cp.in_group, name="ci") as ci:
                x_chan = affine(b, 0, (batch, xa.batch), (group, cp.in_group * xa.channel), (ci, xa.channel))
                with loop_nest(b, kernel, names="abcdefgh") as ks:
                    flat, inside = tap_at(b, axes, origins, ks, xa.spatial, x_chan)
                    value = b.select(inside, centered(b, cp.x, flat, cp.mac.x), const(0))
                    put(value, cp.slot(b, p, tap_index(b, cp, ci, ks)))

        whole = runs if spatial else interior
        checked = [(o, limit) for o, limit, axis in zip(coords, limits, axes) if limit != (0, axis.out)]
        inside = window_inside(b, [o for o, _ in checked], [limit for _, limit in checked])
        if inside is None:
            whole()
        else:
            with b.if_else(inside) as (then, otherwise):
                with then:
                    whole()
                with otherwise:
                    border()
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


#: Groups of four taps from which the SMLAD loop stays rolled (measured on Cortex-M7: a 1x1 64 -> 64 conv
#: takes 1.69 instructions per MAC rolled, 1.84 unrolled; a 10x4 conv of 40 taps 1.70 unrolled, 1.96 rolled).
LONG_REDUCTION = 16
#: Most steps (words of pairs) of ``_paired_runs`` per loop iteration (blocks of one row or one position; the
#: 2 x 2 blocks take ``_ldm_runs``), measured when it took every block: MobileNetV1 on Cortex-M4 / M7 took
#: 11.54 / 11.34 M instructions at 8, 10.82 / 10.84 M at 32, 10.63 / 10.72 M at 64, 10.60 / 10.69 M at 128 (its
#: deepest layers whole, 52.5 KB of code instead of 45.6 KB); DS-CNN 3.88 M at 8, 3.48 M from 32 on (Cortex-M4)
UNROLLED_STEPS = 128


def _dot_dual(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int,
              seeds: list[Value] | None = None) -> list[list[Value]]:
    """The same dot products with SMLAD (SMLALD into i64) over groups of four taps, single MACs for the
    last depth % 4. With i32 accumulators the groups run in a function of its own (``_dual_helper``), shared
    by every layer of the same depth and block: its loop gets the registers to itself and reads the buffer
    afresh. Inlined into the layer, LLVM spilled accumulators around a long loop whenever the code after it
    changed, and forwarded the values im2col had just stored into a short one, keeping them all live across
    the block loop (a 1x1 8 -> 16 conv of MobileNet on Cortex-M4: 26 instructions per output, 20 now).
    ``w_rows`` are consecutive channels: byte or int16 rows follow each other, ``depth`` values apart; rows of
    16-bit pairs come as one interleaved pair or a lone row (integer_conv_plan.interleave_rows)."""
    acc = cp.mac.acc
    rows = len(w_rows)
    words = b.bitcast(buffer, I32.as_pointer())
    if paired(cp.w):    # 16-bit pairs (integer_conv_plan.spread_pairs): w_rows count 16-bit values
        base = b.gep(b.bitcast(cp.w.ptr, I16.as_pointer()), [w_rows[0]], inbounds=True)
    else:
        base = cp.w.address(b, w_rows[0])
    groups = cp.mac.depth // 4
    if groups and acc is I32:
        helper = _dual_helper(b.module, cp, count, base.type, rows, groups, seeds is not None)
        result = b.call(helper, [words, base, *(seeds or [])])
        totals = [[b.extract_value(result, c * count + p) for p in range(count)] for c in range(rows)]
    else:
        totals = _dual_groups(b, cp, words, base, rows, count, groups, seeds)
    for kk in range(groups * 4, cp.mac.depth):      # not paired: paired rows have whole groups
        xs = [widen(b, b.load(b.gep(buffer, [cp.slot(b, p, kk)], inbounds=True)), I32, True)
              for p in range(count)]
        for c in range(rows):
            weight = widen(b, b.load(b.gep(base, [const(c * cp.mac.depth + kk)], inbounds=True)), I32,
                           cp.mac.w.signed)
            for p in range(count):   # 16 x 16 bits: exact
                totals[c][p] = b.add(totals[c][p], widen(b, b.mul(xs[p], weight), acc, True))
    return totals


def _dual_helper(module: ir.Module, cp: ConvPlan, count: int, row_type: ir.Type, rows: int,
                 groups: int, seeded: bool) -> ir.Function:
    """``{acc[c][p]} = helper(buffer words, first weight row[, seeds])``: the SMLAD loop of ``_dual_groups`` as
    an internal function, one per (block, depth, buffer stride, weight layout)."""
    kind = f"{'s' if cp.mac.w.signed else 'u'}{row_type.pointee.width}"
    name = f"pegasus_smlad_{rows}x{count}_{groups}_{cp.positions}_{kind}{'_seeded' if seeded else ''}"
    if name in module.globals:
        return module.globals[name]
    result = ir.LiteralStructType([I32] * (rows * count))
    seeds = [I32] * rows if seeded else []
    function = ir.Function(module, ir.FunctionType(result, [I32.as_pointer(), row_type, *seeds]), name=name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")
    for arg in function.args[:2]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(function.append_basic_block("entry"))
    totals = _dual_groups(b, cp, function.args[0], function.args[1], rows, count, groups,
                          list(function.args[2:]) if seeded else None, pinned=True)
    tuning = LDM_TUNING.get(module.triple.split("-")[0])
    if tuning:
        function.attributes = _TunedFor(tuning, function.attributes)
    value = ir.Constant(result, None)
    for i, total in enumerate(t for row in totals for t in row):
        value = b.insert_value(value, total, i)
    b.ret(value)
    return function


def _dual_groups(b: ir.IRBuilder, cp: ConvPlan, words: Value, base: Value, rows: int, count: int,
                 groups: int, seeds: list[Value] | None = None, pinned: bool = False) -> list[list[Value]]:
    """acc[c][p] over the first 4 * ``groups`` taps: per group, each position's two buffer words (pairs x0 x2,
    x1 x3) and each row's weight word spread by SXTB16/UXTB16 (or its two words of int16 weights), 4 SMLAD.
    The rows are constant offsets from one pointer: a register saved. Weights stored as pairs take
    ``_paired_runs``."""
    module = b.module
    acc = cp.mac.acc
    dual = dsp(module, "smlad", 3) if acc is I32 else intrinsic(module, "llvm.arm.smlald", I64, [I32, I32, I64])
    if paired(cp.w):
        return _paired_runs(b, cp, words, base, rows, count, groups, dual, seeds, pinned)
    unpack = dsp(module, "sxtb16" if cp.mac.w.signed else "uxtb16", 1)
    byte_weights = base.type.pointee.width == 8
    slots = [[entry_alloca(b, acc) for _ in range(count)] for _ in range(rows)]
    for c, row in enumerate(slots):     # the sums start at the biases (``seeds``) or at 0
        for slot in row:
            b.store(seeds[c] if seeds else ir.Constant(acc, 0), slot)
    # fully unrolled, a long reduction's loads are hoisted past the 14 registers and spilled
    with for_range(b, groups, name="q", unroll=groups < LONG_REDUCTION) as q:
        pairs = [[None, None] for _ in range(count)]
        for j in range(2):      # the positions' words of pair j side by side: LDRD by two
            for p in range(0, count, 2):
                first = affine(b, j * cp.positions + p, (q, 2 * cp.positions))
                if p + 1 < count:
                    both = b.load(b.bitcast(b.gep(words, [first], inbounds=True), I64.as_pointer()), align=4)
                    pairs[p][j], pairs[p + 1][j] = b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)
                else:
                    pairs[p][j] = b.load(b.gep(words, [first], inbounds=True))
        for c in range(rows):
            start = affine(b, c * cp.mac.depth, (q, 4))
            if byte_weights:
                word = b.load(b.bitcast(b.gep(base, [start], inbounds=True), I32.as_pointer()), align=1)
                rotated = b.or_(b.lshr(word, ir.Constant(I32, 8)), b.shl(word, ir.Constant(I32, 24)))
                weights = [b.call(unpack, [word]), b.call(unpack, [rotated])]
            else:
                weights = [b.load(b.bitcast(b.gep(base, [affine(b, 2 * j, (start, 1))], inbounds=True),
                                            I32.as_pointer()), align=2) for j in range(2)]
            for p in range(count):
                total = b.load(slots[c][p])
                for j in range(2):
                    total = b.call(dual, [pairs[p][j], weights[j], total])
                b.store(total, slots[c][p])
    return [[b.load(slot) for slot in row] for row in slots]


def _paired_runs(b: ir.IRBuilder, cp: ConvPlan, words: Value, base: Value, rows: int, count: int, groups: int,
                 dual: ir.Function, seeds: list[Value] | None = None, pinned: bool = False) -> list[list[Value]]:
    """``_dual_groups`` for weights stored as pairs, a block of one row or of an interleaved pair of rows (the
    plan's blocks of paired weights never hold more, ``conv_plan``): a loop
    over the 2 * groups words of pairs, walking two pointers — per step one LDRD of the positions' words
    (the buffer's run) and one of the rows' (interleave_rows), 4 SMLAD, unrolled here by up to
    ``UNROLLED_STEPS`` steps with constant offsets: 6 instructions per 8 MACs. The loads are volatile, which
    LLVM's Arm backend keeps as one LDRD each: plain, LLVM's Cortex-M7 tuning split them into LDRs and its
    own unrolling re-indexed the pointers (1.1 instructions per MAC on M7; MobileNetV1: 12.7 -> 11.0 M
    instructions on M7, 11.7 -> 11.0 M on M4)."""
    assert rows <= 2, rows
    if pinned and rows == 2 and count == 2 and cp.positions == 2:
        return _ldm_runs(b, cp, words, base, groups, dual, seeds)
    entry = b.block
    weights = b.bitcast(base, I32.as_pointer())
    steps = 2 * groups
    unroll = min(UNROLLED_STEPS, steps & -steps)     # the largest power of two that divides the steps
    end = b.gep(weights, [const(steps * rows)], inbounds=True)
    body, after = b.append_basic_block("pairs.body"), b.append_basic_block("pairs.end")
    b.branch(body)
    b.position_at_end(body)
    x_at, w_at = b.phi(words.type), b.phi(weights.type)
    x_at.add_incoming(words, entry)
    w_at.add_incoming(weights, entry)
    sums = [[b.phi(cp.mac.acc) for _ in range(count)] for _ in range(rows)]
    for c, row in enumerate(sums):
        for total in row:
            total.add_incoming(seeds[c] if seeds else ir.Constant(cp.mac.acc, 0), entry)

    def run(pointer: Value, length: int) -> list[Value]:
        if length == 1:
            return [b.load(pointer, align=4)]
        pointer = b.bitcast(pointer, I64.as_pointer())
        both = volatile_load(b, pointer, 8)
        return [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]

    updated = [list(row) for row in sums]
    for k in range(unroll):
        xs = run(b.gep(x_at, [const(k * cp.positions)], inbounds=True), count)
        ws = run(b.gep(w_at, [const(k * rows)], inbounds=True), rows)
        updated = [[b.call(dual, [xs[p], ws[c], updated[c][p]]) for p in range(count)] for c in range(rows)]
    x_next = b.gep(x_at, [const(unroll * cp.positions)], inbounds=True)
    w_next = b.gep(w_at, [const(unroll * rows)], inbounds=True)
    x_at.add_incoming(x_next, body)
    w_at.add_incoming(w_next, body)
    for row, new_row in zip(sums, updated):
        for total, value in zip(row, new_row):
            total.add_incoming(value, body)
    latch = b.cbranch(b.icmp_unsigned("!=", w_next, end), body, after)
    latch.set_metadata("llvm.loop", no_unroll(b.module))
    b.position_at_end(after)
    return updated


#: The CPU whose scheduling keeps ``_ldm_runs``' pinned loads together (Cortex-M7's and M55's interleave them
#: with the SMLADs, and the register allocator then spills), by architecture.
LDM_TUNING = {"thumbv7em": "cortex-m4", "thumbv8m.main": "cortex-m33", "thumbv8.1m.main": "cortex-m33"}
#: The x and weight registers of ``_ldm_runs``: each four consecutive words, loaded in ascending registers.
LDM_REGISTERS = (("r4", "r5", "r6", "r7"), ("r8", "r9", "r10", "r11"))
#: Most groups of four taps per loop iteration of ``_ldm_runs``.
LDM_UNROLL = 16


class _TunedFor(ir.values.FunctionAttributes):
    """A function's attributes with ``"target-cpu"`` (llvmlite's attribute sets know no string attributes)."""

    def __init__(self, cpu: str, names):
        super().__init__(names)
        self.cpu = cpu

    def _to_list(self, ret_type):
        return [*super()._to_list(ret_type), f'"target-cpu"="{self.cpu}"']


def _pinned(b: ir.IRBuilder, values: list[Value], registers: tuple[str, ...]) -> list[Value]:
    """``values`` through an empty inline assembly statement that takes them in ``registers``: LLVM loads
    them there, and its load/store optimiser merges loads of consecutive words into ascending registers
    into one LDM."""
    struct = ir.LiteralStructType([I32] * len(values))
    constraints = ",".join([f"={{{r}}}" for r in registers] + [f"{{{r}}}" for r in registers])
    pin = ir.InlineAsm(ir.FunctionType(struct, [I32] * len(values)), "", constraints, side_effect=False)
    out = b.call(pin, values)
    return [b.extract_value(out, i) for i in range(len(values))]


def _ldm_runs(b: ir.IRBuilder, cp: ConvPlan, words: Value, base: Value, groups: int, dual: ir.Function,
              seeds: list[Value] | None) -> list[list[Value]]:
    """A 2 x 2 block over weights stored as interleaved pairs of rows: per group of four taps, one LDM of the
    positions' four words (x0 x2 and x1 x3 of both), one LDM of the rows' four, 8 SMLAD — 10 instructions
    per 16 MACs. The four accumulators and two pointers take the six registers the eight loaded words leave;
    a reduction of more than ``LDM_UNROLL`` groups loops, its end reloaded from the stack."""
    weights = b.bitcast(base, I32.as_pointer())
    unroll = max(d for d in range(1, min(groups, LDM_UNROLL) + 1) if groups % d == 0)
    start = [[seeds[c] if seeds else ir.Constant(I32, 0) for _ in range(2)] for c in range(2)]

    def run(x_at: Value, w_at: Value, sums: list[list[Value]]) -> tuple[Value, Value, list[list[Value]]]:
        for _ in range(unroll):
            xs, ws = (_pinned(b, [b.load(b.gep(at, [const(j)], inbounds=True)) for j in range(4)], registers)
                      for at, registers in zip((x_at, w_at), LDM_REGISTERS))
            x_at, w_at = (opaque(b, b.gep(at, [const(4)], inbounds=True)) for at in (x_at, w_at))
            for half in range(2):
                sums = [[b.call(dual, [xs[2 * half + p], ws[2 * half + c], sums[c][p]]) for p in range(2)]
                        for c in range(2)]
        return x_at, w_at, sums

    if unroll == groups:
        return run(words, weights, start)[2]
    entry = b.block
    end = b.gep(weights, [const(4 * groups)], inbounds=True)
    body, after = b.append_basic_block("ldm.body"), b.append_basic_block("ldm.end")
    b.branch(body)
    b.position_at_end(body)
    x_at, w_at = b.phi(words.type), b.phi(weights.type)
    sums = [[b.phi(I32) for _ in range(2)] for _ in range(2)]
    x_next, w_next, updated = run(x_at, w_at, sums)
    for phi, first, last in ((x_at, words, x_next), (w_at, weights, w_next),
                             *((sums[c][p], start[c][p], updated[c][p]) for c in range(2) for p in range(2))):
        phi.add_incoming(first, entry)
        phi.add_incoming(last, b.block)
    latch = b.cbranch(b.icmp_unsigned("!=", w_next, end), body, after)
    latch.set_metadata("llvm.loop", no_unroll(b.module))
    b.position_at_end(after)
    return updated


def qconv_im2col(k: KernelContext, cp: ConvPlan) -> None:
    """QConv as tiles of output positions: their receptive fields copied into the workspace (``im2col``),
    then dot products with blocks of output channels, each output finished and requantised."""
    b = k.builder
    taps = Taps.of(k.module, cp)
    rq = Requant(k.table, k.attrs, cp.y, acc_bound(cp.mac, cp.bias))
    positions = prod([axis.out for axis in cp.axes])
    words = cp.buffer_bytes // 4
    buffer = b.bitcast(k.scratch(ir.ArrayType(I32, words), cp.buffer_bytes), cp.element.as_pointer())
    sums = entry_alloca(b, ir.ArrayType(cp.mac.acc, cp.positions)) if cp.mac.fold else None
    dot = _dot_dual if cp.dual else _dot_madd if cp.madd else _dot_plain
    ya = cp.ya
    # the fold of asymmetric weights, subtracted after the seeded sums, wraps back exactly
    seeded = cp.dual and seeds_bias(cp.mac, cp.bias)

    def channels(batch: Value, group: Value, first: Value, count: int, local0: Value, width: int,
                 buffer: Value) -> None:
        chans = [affine(b, c, (group, cp.out_group), (local0, 1)) for c in range(width)]
        w_rows = [b.mul(chan, const(cp.mac.depth)) for chan in chans]
        if seeded:      # the SMLAD sums start at the biases: no add per output after them
            acc = _dot_dual(b, cp, buffer, w_rows, count, [cp.bias.load(b, chan) for chan in chans])
        else:
            acc = dot(b, cp, buffer, w_rows, count)
        sum_xs = [b.load(b.gep(sums, [const(0), const(p)], inbounds=True)) if sums is not None else None
                  for p in range(count)]
        cells = [(c, p) for c in range(width) for p in range(count)]
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
        for_tiles(b, 0, cp.out_group, cp.block,
                  lambda local0, width: channels(batch, group, first, count, local0, width, rows))

    with loop_nest(b, [cp.x.shape[0], cp.group]) as (batch, group):
        for_tiles(b, 0, positions, cp.positions, lambda first, count: tile(batch, group, first, count))
