"""The dot products of integer_im2col.py on Cortex-M CPUs with the DSP extension (M4/M7/M33/M55): SMLAD, two
16-bit MACs per instruction, between the centred 16-bit pairs the im2col copy writes and the weights.

The buffer holds each group of four taps of a tile's positions as, per position, the two words of pairs
(x0, x2) and (x1, x3) (integer_conv_plan.ConvPlan.slot): what SXTB16/UXTB16 makes of a weight word of
four bytes, (w0, w2) and (w1, w3), and what 8-bit weights stored as pairs hold (integer_conv_weights.spread_pairs,
the rows of each pair of output channels interleaved word by word). A block of 2 output channels x 2
positions over pairs takes per group one LDM of the positions' four words, one LDM of the rows' four and
8 SMLAD: 10 instructions per 16 MACs (``_group_runs``). LLVM forms LDM only from loads into ascending
registers, which its register allocator picks by chance: an empty inline-assembly statement asks for the
loaded words in r4-r7 and r8-r11, and the function is scheduled as a Cortex-M4 (M33 on Armv8-M), whose
schedule keeps the loads together (Cortex-M7's and M55's interleave them with the SMLADs, and the
allocator then spills). The four accumulators and two pointers take the six registers left; a long
reduction loops, its end reloaded from the stack.

With i32 accumulators the groups run in a function of their own (``_helper``), shared by every layer of the
same depth and block: its loop gets the registers to itself and reads the buffer afresh. Inlined into the
layer, LLVM spilled accumulators around a long loop whenever the code after it changed, and forwarded the
values im2col had just stored into a short one, keeping them all live across the block loop.

``dot_dual`` is the flavour ``smlad.dot`` (integer_flavours.py) the im2col kernel looks up.
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.kernels.cortex_m import integer_halves
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import ConvPlan
from pegasus.exporters.glow.kernels.integer.integer_dot import dsp
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.loops import const, no_unroll
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.types import I16, I32, I64

Value = ir.Value
#: The CPU a helper is scheduled as, by architecture (module docstring).
TUNING = {"thumbv7em": "cortex-m4", "thumbv8m.main": "cortex-m33", "thumbv8.1m.main": "cortex-m33"}
#: The registers four loaded words of the buffer and of the weights are asked for (ascending: one LDM each).
LDM_REGISTERS = (("r4", "r5", "r6", "r7"), ("r8", "r9", "r10", "r11"))
#: Most groups of four taps per loop iteration over paired weights: a loop's end, reloaded from the stack, costs
#: 3 instructions per iteration; unrolled, code grows by about 40 bytes a group. Cortex-M7 instructions / code
#: at 16, 36 and 72: MobileNetV1 9.085 / 8.974 / 8.964 M, 23.8 / 25.7 / 27.6 KB; ResNet-8 10.353 / 10.096 /
#: 10.037 M, 32.9 / 37.3 / 38.2 KB.
UNROLL = 72
#: Most groups per loop iteration of a paired block of one row or one position.
ODD_UNROLL = 8
#: Groups from which a reduction over unpaired weights (bytes: dense layers, --compact-weights) stays rolled.
LONG_REDUCTION = 16
#: Most groups per loop iteration over weights stored as halfword pairs of rows (integer_halves.py).
HALVES_UNROLL = 4


class _TunedFor(ir.values.FunctionAttributes):
    """A function's attributes with ``"target-cpu"`` (llvmlite's attribute sets know no string attributes)."""

    def __init__(self, cpu: str, names):
        super().__init__(names)
        self.cpu = cpu

    def _to_list(self, ret_type):
        return [*super()._to_list(ret_type), f'"target-cpu"="{self.cpu}"']


def internal_helper(module: ir.Module, function_type: ir.FunctionType, name: str) -> ir.Function:
    """A new internal, never-inlined helper function of the module (its registers allocated on its own),
    scheduled for the core TUNING names for the module's architecture."""
    function = ir.Function(module, function_type, name=name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")
    return tuned(function)


def tuned(function: ir.Function) -> ir.Function:
    """``function`` scheduled for the core TUNING names for its module's architecture (none elsewhere)."""
    tuning = TUNING.get(str(function.module.triple).split("-")[0])
    if tuning and not isinstance(function.attributes, _TunedFor):
        function.attributes = _TunedFor(tuning, function.attributes)
    return function


def pinned(b: ir.IRBuilder, values: list[Value], registers: tuple[str, ...]) -> list[Value]:
    """``values`` through an empty inline-assembly statement that takes them in ``registers``: LLVM loads them
    there, and its load/store optimiser merges loads of consecutive words into ascending registers into one
    LDM."""
    struct = ir.LiteralStructType([I32] * len(values))
    constraints = ",".join([f"={{{r}}}" for r in registers] + [f"{{{r}}}" for r in registers])
    pin = ir.InlineAsm(ir.FunctionType(struct, [I32] * len(values)), "", constraints, side_effect=False)
    out = b.call(pin, values)
    return [b.extract_value(out, i) for i in range(len(values))]


@flavour("smlad.dot")
def dot_dual(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int,
             seeds: list[Value] | None = None, base: Value | None = None) -> list[list[Value]]:
    """acc[c][p] = Σ_k buffer[p][k] * W[row c][k] for ``count`` positions and the channels ``w_rows`` (the
    first value of each row; consecutive channels: byte or int16 rows follow each other, ``depth`` values
    apart; rows of 16-bit pairs come as one interleaved pair or a lone row) with SMLAD (SMLALD into i64)
    over groups of four taps, single MACs for the last depth % 4 of unpaired weights; the sums start at
    ``seeds`` (per row) when given. ``base``: the first row's address instead (pairs: an i16*)."""
    acc = cp.mac.acc
    rows = len(w_rows)
    words = b.bitcast(buffer, I32.as_pointer())
    if base is not None:
        pass
    elif cp.paired:    # 16-bit pairs (integer_conv_weights.spread_pairs): w_rows count 16-bit values
        base = b.gep(b.bitcast(cp.w.ptr, I16.as_pointer()), [w_rows[0]], inbounds=True)
    elif cp.halves:       # halfwords of two rows (integer_halves.py): a pair of rows takes the bytes of two
        base = b.bitcast(b.gep(b.bitcast(cp.w.ptr, ir.IntType(8).as_pointer()), [w_rows[0]], inbounds=True),
                         I16.as_pointer())
    else:
        base = cp.w.address(b, w_rows[0])
    groups = cp.mac.depth // 4
    if cp.halves and seeds is not None:
        seeds = integer_halves.seeds_of(b, seeds)
    if groups and acc is I32:
        function = _helper(b.module, cp, count, base.type, rows, groups, seeds is not None)
        result = b.call(function, [words, base, *(seeds or [])])
        totals = [[b.extract_value(result, c * count + p) for p in range(count)] for c in range(rows)]
    else:
        totals = _groups(b, cp, words, base, rows, count, groups, seeds)
    if cp.halves:       # whole groups only
        return integer_halves.unpair(b, totals)
    for kk in range(groups * 4, cp.mac.depth):      # not paired: paired rows have whole groups
        xs = [widen(b, b.load(b.gep(buffer, [cp.slot(b, p, kk)], inbounds=True)), I32, True)
              for p in range(count)]
        for c in range(rows):
            weight = widen(b, b.load(b.gep(base, [const(c * cp.mac.depth + kk)], inbounds=True)), I32,
                           cp.mac.w.signed)
            for p in range(count):   # 16 x 16 bits: exact
                totals[c][p] = b.add(totals[c][p], widen(b, b.mul(xs[p], weight), acc, True))
    return totals


def _helper(module: ir.Module, cp: ConvPlan, count: int, row_type: ir.Type, rows: int, groups: int,
            seeded: bool) -> ir.Function:
    """``{acc[c][p]} = helper(buffer words, first weight row[, seeds])``: ``_groups`` as an internal function,
    one per (block, depth, buffer stride, weight layout). Rows of bytes or unpaired int16 lie ``depth`` apart,
    which the name then carries: two layers of as many groups but other depths (27 and 24 taps: 6 groups) shared
    one helper, the second reading its weight rows at the first's stride."""
    kind = "h16" if cp.halves else f"{'s' if cp.mac.w.signed else 'u'}{row_type.pointee.width}"
    stride = "" if cp.paired or cp.halves else f"_d{cp.mac.depth}"
    name = f"pegasus_smlad_{rows}x{count}_{groups}_{cp.positions}_{kind}{stride}{'_seeded' if seeded else ''}"
    if name in module.globals:
        return module.globals[name]
    result = ir.LiteralStructType([I32] * (rows * count))
    seeds = [I32] * rows if seeded else []
    function = internal_helper(module, ir.FunctionType(result, [I32.as_pointer(), row_type, *seeds]), name)
    for arg in function.args[:2]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(function.append_basic_block("entry"))
    totals = _groups(b, cp, function.args[0], function.args[1], rows, count, groups,
                     list(function.args[2:]) if seeded else None)
    value = ir.Constant(result, None)
    for i, total in enumerate(t for row in totals for t in row):
        value = b.insert_value(value, total, i)
    b.ret(value)
    return function


def _groups(b: ir.IRBuilder, cp: ConvPlan, words: Value, base: Value, rows: int, count: int, groups: int,
            seeds: list[Value] | None = None) -> list[list[Value]]:
    """acc[c][p] over the first 4 * ``groups`` taps: per group, each position's two buffer words (pairs x0 x2,
    x1 x3) and each row's two weight words — pairs as stored, a word of bytes spread by SXTB16/UXTB16, or two
    words of int16 weights — 4 SMLAD per row and position."""
    module = b.module
    acc = cp.mac.acc
    dual = dsp(module, "smlad", 3) if acc is I32 else intrinsic(module, "llvm.arm.smlald", I64, [I32, I32, I64])
    byte_weights = base.type.pointee.width == 8
    unpack = dsp(module, "sxtb16" if cp.mac.w.signed else "uxtb16", 1)
    x_step = 2 * cp.positions

    def weights(at: Value) -> list[list[Value]]:
        """Per row, its pairs (w0, w2), (w1, w3) of the group at ``at``."""
        if cp.paired:
            loaded = load_words(b, at, 2 * rows, 1 if acc is I32 else None)
            return [[loaded[c], loaded[rows + c]] for c in range(rows)]
        if byte_weights:
            pairs = []
            for c in range(rows):
                word = b.load(b.bitcast(b.gep(at, [const(c * cp.mac.depth)], inbounds=True), I32.as_pointer()),
                              align=1)
                rotated = b.or_(b.lshr(word, ir.Constant(I32, 8)), b.shl(word, ir.Constant(I32, 24)))
                pairs.append([b.call(unpack, [word]), b.call(unpack, [rotated])])
            return pairs
        return [[b.load(b.bitcast(b.gep(at, [const(c * cp.mac.depth + 2 * j)], inbounds=True), I32.as_pointer()),
                        align=2) for j in range(2)] for c in range(rows)]

    def group(x_at: Value, w_at: Value, sums: list[list[Value]]) -> list[list[Value]]:
        xs = load_words(b, x_at, 2 * count, 0 if acc is I32 else None)
        if cp.halves:     # rows 2i, 2i + 1: A0 and T (integer_halves.py)
            return integer_halves.halves_sums(b, dual, unpack, xs, load_words(b, w_at, rows, 1), sums)
        ws = weights(w_at)
        for half in range(2):
            sums = [[b.call(dual, [xs[2 * p + half], ws[c][half], sums[c][p]]) for p in range(count)]
                    for c in range(rows)]
        return sums

    start = [[seeds[c] if seeds else ir.Constant(acc, 0) for _ in range(count)] for c in range(rows)]
    if not groups:
        return start
    w_step = 2 * rows if cp.paired else rows if cp.halves else 4
    w_base = b.bitcast(base, I32.as_pointer()) if cp.paired or cp.halves else base
    # unpaired weights (dense layers, --compact-weights) unroll a short reduction only, and blocks of one row or
    # position (an odd last channel or tile: rare) a few groups: code over speed
    most = (UNROLL if rows * count == 4 else ODD_UNROLL) if cp.paired else HALVES_UNROLL if cp.halves \
        else groups if groups < LONG_REDUCTION else 1
    unroll = max(d for d in range(1, min(groups, most) + 1) if groups % d == 0)

    def run(x_at: Value, w_at: Value, sums: list[list[Value]]) -> tuple[Value, Value, list[list[Value]]]:
        """``unroll`` groups from (x_at, w_at); the pointers after them, laundered so that LLVM keeps each
        load at offset 0 of its pointer (LDM takes none) and bumps the pointer (LDM's writeback)."""
        for _ in range(unroll):
            sums = group(x_at, w_at, sums)
            x_at, w_at = (opaque(b, b.gep(at, [const(step)], inbounds=True))
                          for at, step in ((x_at, x_step), (w_at, w_step)))
        return x_at, w_at, sums

    if unroll == groups:
        return run(words, w_base, start)[2]
    entry = b.block
    end = b.gep(w_base, [const(w_step * groups)], inbounds=True)
    body, after = b.append_basic_block("groups.body"), b.append_basic_block("groups.end")
    b.branch(body)
    b.position_at_end(body)
    x_at, w_at = b.phi(words.type), b.phi(w_base.type)
    sums = [[b.phi(acc) for _ in range(count)] for _ in range(rows)]
    x_next, w_next, updated = run(x_at, w_at, sums)
    for phi, first, last in ((x_at, words, x_next), (w_at, w_base, w_next),
                             *((sums[c][p], start[c][p], updated[c][p]) for c in range(rows) for p in range(count))):
        phi.add_incoming(first, entry)
        phi.add_incoming(last, b.block)
    latch = b.cbranch(b.icmp_unsigned("!=", w_next, end), body, after)
    latch.set_metadata("llvm.loop", no_unroll(b.module))
    b.position_at_end(after)
    return updated


def load_words(b: ir.IRBuilder, at: Value, count: int, pin: int | None) -> list[Value]:
    """``count`` consecutive words at ``at`` (an i32*): four as one LDM into ``LDM_REGISTERS[pin]`` (None: not
    pinned, for i64 sums, whose registers these would take), two as one LDRD (a volatile i64 load, which LLVM
    keeps whole), one as an LDR."""
    if count == 4 and pin is not None:
        return pinned(b, [b.load(b.gep(at, [const(j)], inbounds=True)) for j in range(4)], LDM_REGISTERS[pin])
    values = []
    for j in range(0, count - 1, 2):
        both = volatile_load(b, b.bitcast(b.gep(at, [const(j)], inbounds=True), I64.as_pointer()), 4)
        values += [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]
    if count % 2:
        values.append(b.load(b.gep(at, [const(count - 1)], inbounds=True)))
    return values
