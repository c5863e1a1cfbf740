"""A 1x1 QConv of four or eight input channels on Cortex-M CPUs with the DSP extension (M4/M7/M33/M55): each
position's inputs held in registers, one LDM per output channel of its whole record.

Why. Each output of such a layer sums only 4 or 8 products (2 or 4 SMLADs), so what a block of the im2col
kernel spends around them — loading the tile's inputs again for every pair of channels, the pointers, the
loop — weighed as much as the products (MobileNetV1 0.25's 8 -> 16 layer: 0.58 MAC per instruction, 0.65 with
integer_smlad_tile.py). Here a position's 8 (4) input bytes are loaded once and centred into 4 (2) words of
pairs (x0, x2), (x1, x3) by SXTAB16/UXTAB16; then per output channel one LDM takes its record — the row's
doubled weights as the pairs SMLAD multiplies, the doubled bias the sum starts at, M, t + 1 and K
(integer_conv_weights.pointwise_records; the requantisation of integer_dot.Requant with ``fold_constant``) —
into r4-r11, and the output is 2 or 4 SMLADs, SMMLAR, ASR, SSAT and a post-incremented STRB: about 10
instructions per output. The inputs, the record and the two walking pointers take the 14 registers; the
input pointer and the ends wait on the stack, and the record pointer goes back by one SUB per position.
Positions are read before they are written, one at a time, as the im2col kernel's tiles are: the output may
stream over its input (integer_conv.qconv_stream). ``qconv_pointwise_dsp`` is the flavour ``smlad.pointwise``
(integer_flavours.py) the im2col kernel looks up for a layer with ``pointwise_records`` (``handles``).
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.cortex_m.integer_smlad import internal_helper, pinned
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import ConvPlan, pointwise_layout
from pegasus.exporters.glow.kernels.integer.integer_dot import Requant, acc_bound, dsp
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import const, no_unroll
from pegasus.exporters.glow.llvm.types import I32, I64

Value = ir.Value
#: The registers a channel's record is loaded into (ascending: one LDM).
RECORD_REGISTERS = ("r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11")
#: Most output channels per iteration of the channel loop (unrolled; each about 40 bytes of code): a loop test
#: costs 3 instructions.
UNROLL = 16


def handles(cp: ConvPlan) -> bool:
    """Whether the layer's biases were replaced by its ``pointwise_records``."""
    return pointwise_layout(cp)


@flavour("smlad.pointwise")
def qconv_pointwise_dsp(k: KernelContext, cp: ConvPlan) -> None:
    """Every position of the layer (batches included: channels last, they follow each other)."""
    b = k.builder
    rq = Requant(lambda values, ty: None, k.attrs, cp.y, acc_bound(cp.sums, None))
    function = _function(k.module, cp, rq)
    positions = cp.x.type.size // cp.in_group
    words = b.bitcast(cp.x.ptr, I32.as_pointer())
    records = b.bitcast(cp.bias.ptr, I32.as_pointer())
    b.call(function, [words, cp.y.ptr, records,
                      b.gep(records, [const(cp.bias.shape[0])], inbounds=True),
                      b.gep(words, [const(positions * cp.in_group // 4)], inbounds=True)])


def _function(module: ir.Module, cp: ConvPlan, rq: Requant) -> ir.Function:
    channels, depth = cp.ya.channels, cp.in_group
    unroll = max(d for d in range(1, min(channels, UNROLL) + 1) if channels % d == 0)
    y_type = cp.y.ptr.type
    signed = "s" if cp.mac.x.signed else "u"
    name = (f"pegasus_pointwise_{depth}_{channels}_{signed}{cp.mac.x.zero_point}_{y_type.pointee.width}"
            f"_{rq.lo}_{rq.hi}".replace("-", "m"))
    if name in module.globals:
        return module.globals[name]
    words = I32.as_pointer()
    function = internal_helper(module, ir.FunctionType(ir.VoidType(), [words, y_type, words, words, words]), name)
    x0, y0, r0, r_end, x_end = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    entry = b.block
    # the input pointer and both ends wait on the stack (volatile loads: LLVM would keep them in registers)
    slots = [entry_alloca(b, words) for _ in range(3)]
    for slot, value in zip(slots, (x0, r_end, x_end)):
        b.store(value, slot)
    position, after = function.append_basic_block("positions"), function.append_basic_block("positions.end")
    b.branch(position)
    b.position_at_end(position)
    y_at, r_at = b.phi(y_type), b.phi(words)
    x_at = volatile_load(b, slots[0], 4)
    pairs = _inputs(b, cp, x_at)
    x_next = b.gep(x_at, [const(depth // 4)], inbounds=True)
    b.store(x_next, slots[0])
    done = function.append_basic_block("channels.end")
    if unroll == channels:      # every channel unrolled: no loop
        y_n, r_n = y_at, r_at
        for _ in range(channels):
            y_n, r_n = _channel(b, cp, rq, pairs, y_n, r_n)
        b.branch(done)
    else:
        body = function.append_basic_block("channels")
        start = b.block
        b.branch(body)
        b.position_at_end(body)
        y_c, r_c = b.phi(y_type), b.phi(words)
        y_n, r_n = y_c, r_c
        for _ in range(unroll):
            y_n, r_n = _channel(b, cp, rq, pairs, y_n, r_n)
        for phi, first, following in ((y_c, y_at, y_n), (r_c, r_at, r_n)):
            phi.add_incoming(first, start)
            phi.add_incoming(following, b.block)
        latch = b.cbranch(b.icmp_unsigned("!=", r_n, volatile_load(b, slots[1], 4)), body, done)
        latch.set_metadata("llvm.loop", no_unroll(module))
    b.position_at_end(done)
    r_back = opaque(b, b.gep(r_n, [const(-channels * (depth // 2 + 4))], inbounds=True))
    for phi, first, following in ((y_at, y0, y_n), (r_at, r0, r_back)):
        phi.add_incoming(first, entry)
        phi.add_incoming(following, done)
    b.cbranch(b.icmp_unsigned("!=", x_next, volatile_load(b, slots[2], 4)), position, after)
    b.position_at_end(after)
    b.ret_void()
    return function


def _inputs(b: ir.IRBuilder, cp: ConvPlan, at: Value) -> list[Value]:
    """The position's inputs centred as the pairs (x0, x2), (x1, x3) of each word (one LDRD for two words)."""
    centre = dsp(b.module, "sxtab16" if cp.mac.x.signed else "uxtab16", 2)
    minus_zx = const((-cp.mac.x.zero_point & 0xFFFF) * 0x10001)
    if cp.in_group == 8:
        both = volatile_load(b, b.bitcast(at, I64.as_pointer()), 4)
        loaded = [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]
    else:
        loaded = [volatile_load(b, at, 4)]
    pairs = []
    for word in loaded:
        rotated = b.or_(b.lshr(word, const(8)), b.shl(word, const(24)))
        pairs += [b.call(centre, [minus_zx, word]), b.call(centre, [minus_zx, rotated])]
    return pairs


def _channel(b: ir.IRBuilder, cp: ConvPlan, rq: Requant, pairs: list[Value], y_at: Value,
             r_at: Value) -> tuple[Value, Value]:
    """One output channel from its record at ``r_at`` (weights, 2 b, M, t + 1, K), stored at ``y_at``; the
    pointers past them."""
    size = len(pairs) + 4
    record = pinned(b, [b.load(b.gep(r_at, [const(j)], inbounds=True)) for j in range(size)],
                    RECORD_REGISTERS[:size])
    smlad = dsp(b.module, "smlad", 3)
    acc = record[len(pairs)]
    for x, w in zip(pairs, record):
        acc = b.call(smlad, [x, w, acc])
    multiplier, shift, k = record[len(pairs) + 1:]
    value = rq.many(b, [(acc, None, None)], doubled=True, parameters=[(multiplier, shift, k)])[0]
    b.store(value, y_at)
    return (b.gep(y_at, [const(1)], inbounds=True),
            opaque(b, b.gep(r_at, [const(size)], inbounds=True)))
