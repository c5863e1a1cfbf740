"""Every block of an im2col tile in one function, on Cortex-M CPUs with the DSP extension (M4/M7/M33/M55): the
blocks of two output channels x the tile's positions of a paired layer whose biases were replaced by its
``tile_stream`` (integer_conv_plan.py), requantised and stored where they are computed.

Why. Called once per block (integer_smlad.py's helper), a block of 2 channels x 2 positions spent about 17
instructions besides its SMLADs, LDMs and requantisation: the call and its arguments, the table's four
LDRDs, three pointers and the loop — MobileNetV1's 1x1 layers of 8 to 32 channels a third of their time. Here
one pointer walks the stream: per pair of channels an LDRD of the doubled biases the sums start at, an LDM
of the rows' words per group of four taps (into r8-r11, the tile's positions into r4-r7, as in
integer_smlad.py), an LDM of (M0, t0 + 1, M1, t1 + 1, K0, K1) and of the word that says whether another pair
follows (the loop's test: no end pointer to reload), then SMMLAR, ASR and SSAT per output (integer_dot.Requant,
``fold_constant``). The buffer's pointer walks the groups by LDM's writeback and goes back by one SUB per block
(laundered, so that LLVM keeps no second copy of it); the output pointers wait on the stack while the 14
registers hold the sums, the loaded words and the two pointers.
The groups are unrolled (at most integer_conv_plan.TILE_GROUPS), and the function, internal, is shared by the
layers of one depth, tile and clamp (the output's row is an argument). A tile of one position (the last of an
odd count) keeps integer_im2col.py's blocks, walking the same stream: unrolled for one position, the groups
would cost more code than they save. ``tile_blocks`` is the flavour ``smlad.tile`` (integer_flavours.py).
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.kernels.cortex_m.integer_smlad import internal_helper, load_words, pinned
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import ConvPlan
from pegasus.exporters.glow.kernels.integer.integer_dot import Requant, dsp
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import const, no_unroll
from pegasus.exporters.glow.llvm.types import I32, I64

Value = ir.Value
#: The registers a block's requantisation parameters are loaded into (ascending: one LDM).
PARAMETER_REGISTERS = ("r4", "r5", "r6", "r7", "r8", "r9", "r10")


@flavour("smlad.tile")
def tile_blocks(b: ir.IRBuilder, cp: ConvPlan, rq: Requant, rows: Value, count: int, y_at: Value) -> None:
    """Every pair of output channels of a tile of ``count`` positions (the buffer ``rows``; outputs from
    ``y_at``, the tile's first output)."""
    function = _function(b.module, cp, rq, count, y_at.type)
    stream = b.bitcast(cp.bias.ptr, I32.as_pointer())
    b.call(function, [b.bitcast(rows, I32.as_pointer()), stream, y_at, const(cp.ya.position)])


def _function(module: ir.Module, cp: ConvPlan, rq: Requant, count: int, y_type: ir.Type) -> ir.Function:
    groups = cp.mac.depth // 4
    name = (f"pegasus_tile_2x{count}_{groups}_{cp.positions}_{y_type.pointee.width}"
            f"_{rq.lo}_{rq.hi}".replace("-", "m"))
    if name in module.globals:
        return module.globals[name]
    words = I32.as_pointer()
    function = internal_helper(module, ir.FunctionType(ir.VoidType(), [words, words, y_type, I32]), name)
    for arg in function.args[:3]:
        arg.add_attribute("noalias")
    x0, s0, y0, stride = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    entry = b.block
    body, after = function.append_basic_block("pairs.body"), function.append_basic_block("pairs.end")
    # one output pointer per position (the positions' rows, ``stride`` apart), each bumped by 2 per pair: they
    # wait on the stack, reloaded after an empty statement that clobbers memory (LLVM would rather keep them in
    # registers and spill sums)
    outputs = _Outputs(b, [y0] + [b.gep(y0, [b.mul(stride, const(p))], inbounds=True) for p in range(1, count)])
    b.branch(body)
    b.position_at_end(body)
    x_at, s_at = b.phi(words), b.phi(words)
    x_next, s_next, more = _pair(b, cp, rq, count, groups, x_at, s_at, outputs)
    for phi, first, following in ((x_at, x0, x_next), (s_at, s0, s_next)):
        phi.add_incoming(first, entry)
        phi.add_incoming(following, b.block)
    latch = b.cbranch(b.icmp_unsigned("!=", more, const(0)), body, after)
    latch.set_metadata("llvm.loop", no_unroll(module))
    b.position_at_end(after)
    b.ret_void()
    return function


class _Outputs:
    """The output pointers of a tile's positions in a stack slot, read and written back whole (one LDRD and
    one STRD for two, at SP: a volatile load would first copy SP to a register, an instruction a block)."""

    def __init__(self, b: ir.IRBuilder, pointers: list[Value]):
        self.type, self.count = pointers[0].type, len(pointers)
        self.slot = entry_alloca(b, ir.IntType(32 * self.count))
        self.slot.align = 8
        # the slot's address given to an empty statement once: it escapes, so a statement clobbering memory
        # may write it (``load``)
        escape = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [self.slot.type]), "", "r,~{memory}", side_effect=True)
        b.call(escape, [self.slot])
        self.store(b, pointers)

    def load(self, b: ir.IRBuilder) -> list[Value]:
        # an empty statement that may write the slot (its address an operand, memory clobbered): the load
        # stays, as an LDRD from the stack pointer (a volatile load would first copy SP to a register)
        b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", side_effect=True), [])
        both = b.load(self.slot, align=8)
        return [b.inttoptr(b.trunc(b.lshr(both, ir.Constant(both.type, 32 * p)), I32), self.type)
                for p in range(self.count)]

    def store(self, b: ir.IRBuilder, pointers: list[Value]) -> None:
        wide = ir.IntType(32 * self.count)
        value = ir.Constant(wide, 0)
        for p, pointer in enumerate(pointers):
            value = b.or_(value, b.shl(b.zext(b.ptrtoint(pointer, I32), wide), ir.Constant(wide, 32 * p)))
        b.store(value, self.slot, align=4)     # read back by the volatile load: kept


def _pair(b: ir.IRBuilder, cp: ConvPlan, rq: Requant, count: int, groups: int, x_at: Value, s_at: Value,
          outputs: _Outputs) -> tuple[Value, Value, Value]:
    """One pair of channels: its sums from the seeds at ``s_at``, requantised and stored where ``outputs``
    points (and the pointers bumped); the buffer and stream pointers of the next pair, and the stream's word
    saying whether one follows."""
    smlad = dsp(b.module, "smlad", 3)
    both = volatile_load(b, b.bitcast(s_at, I64.as_pointer()), 4)
    seeds = [b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)]
    sums = [[seeds[c] for _ in range(count)] for c in range(2)]
    w_at = opaque(b, b.gep(s_at, [const(2)], inbounds=True))
    x_step = 2 * cp.positions
    for _ in range(groups):
        xs = load_words(b, x_at, 2 * count, 0)
        ws = load_words(b, w_at, 4, 1)
        for half in range(2):
            sums = [[b.call(smlad, [xs[2 * p + half], ws[2 * half + c], sums[c][p]]) for p in range(count)]
                    for c in range(2)]
        x_at = opaque(b, b.gep(x_at, [const(x_step)], inbounds=True))
        w_at = opaque(b, b.gep(w_at, [const(4)], inbounds=True))
    x_back = opaque(b, b.gep(x_at, [const(-x_step * groups)], inbounds=True))
    loaded = pinned(b, [b.load(b.gep(w_at, [const(j)], inbounds=True)) for j in range(7)], PARAMETER_REGISTERS)
    parameters = [(loaded[0], loaded[1], loaded[4]), (loaded[2], loaded[3], loaded[5])]
    cells = [(c, p) for c in range(2) for p in range(count)]
    values = rq.many(b, [(sums[c][p], None, None) for c, p in cells], doubled=True,
                     parameters=[parameters[c] for c, _ in cells])
    y_at = outputs.load(b)
    for (c, p), value in zip(cells, values):
        b.store(value, b.gep(y_at[p], [const(c)], inbounds=True))
    outputs.store(b, [b.gep(at, [const(2)], inbounds=True) for at in y_at])
    return x_back, opaque(b, b.gep(w_at, [const(7)], inbounds=True)), loaded[6]
