"""Code of a row chain (row_chains.py: a residual block, a downsampling pair): its layer function runs its
stages a row at a time, each row by a function of the stage's own kernel made for a one-row output.

For each stage and each padding its rows see (``Stage.variants``: typically the top row, the interior rows,
the bottom row), the node's emitter generates an internal function on the cut shapes — the same kernel
a whole layer would run, so the row's integers are the layer's. Functions of the same text are shared
(``codegen._shared``): a block whose two convolutions have one shape compiles one interior function.
Their per-channel tables go into the block's parameter block, each function's tables once.

The layer function is the schedule of ``row_chains.schedule`` as loops: for each output row of the last stage,
each inner input is computed up to the last row the row reads — ``while done < hi - 1``, which in turn
computes that stage's inputs —, the new row written at the end of its window after the window's rows moved
down by one. A window read by a stage stepping s > 1 rows is compacted instead (``compacted``): its rows are
written in order in its slots, and when the next one is past the last slot the rows its reader still reads (W
- s of them once running) move to the first slots — a stride-2 3x3 window moves one row per output row where
sliding would move four. A reader striding past its window (a 1x1 stride-2 layer) skips rows: they are not
computed at all (row_chains.schedule, the same rule). A padding row of a ``filled`` stage is the zero point
written in its slot. A stage's inputs are passed as pointers to the first row it reads: in X where X lies, in
a window at that row's place. ``done`` (and ``base``, the row in a compacted window's first slot) of each
inner tensor is a local counter: the code is re-entrant and writes nothing but its output and its workspace
(the windows and the stages' own scratch).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.parameters import TABLE_ALIGN, LayerParameters
from pegasus.exporters.glow.kernels.registry import sizing_context
from pegasus.exporters.glow.kernels.strategy import Choice, get_implementation, run_hook
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.exporters.glow.llvm.tensors import TensorRef, constant_bounds
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.exporters.glow.row_chains import RowChain, Stage, row_bytes, stage_query, strided_reader
from pegasus.ir.graph import Graph

I32 = ir.IntType(32)
BYTE_PTR = ir.IntType(8).as_pointer()


class _Block:
    """What the block's layer function has at hand while it emits the schedule."""

    def __init__(self, b: ir.IRBuilder, graph: Graph, chain: RowChain, refs: dict[str, TensorRef],
                 windows: dict[str, ir.Value], kernel_workspace: ir.Value | None):
        self.b, self.graph, self.chain, self.refs = b, graph, chain, refs
        self.windows = windows
        self.kernel_workspace = kernel_workspace
        self.done, self.base = {}, {}
        for tensor in chain.windows:
            self.done[tensor] = entry_alloca(b, I32)
            b.store(const(chain.first_rows[tensor] - 1), self.done[tensor])
            if compacted(chain, tensor):
                self.base[tensor] = entry_alloca(b, I32)
                b.store(const(chain.first_rows[tensor]), self.base[tensor])
        self.calls: dict[tuple[int, tuple[int, int]], tuple[ir.Function, ir.Value, bool]] = {}

    def elements(self, tensor: str) -> int:
        return self.graph.type_of(tensor).size // self.graph.type_of(tensor).shape[1]

    def row_pointer(self, tensor: str, row: ir.Value) -> ir.Value:
        """A pointer to row ``row`` of ``tensor``: in X or the output where they lie, else in its window."""
        b = self.b
        if tensor not in self.windows:
            return b.gep(self.refs[tensor].ptr, [b.mul(row, const(self.elements(tensor)))])
        if tensor in self.base:
            slot = b.sub(row, b.load(self.base[tensor]))
            return b.gep(self.windows[tensor], [b.mul(slot, const(self.elements(tensor)))])
        oldest = b.sub(b.load(self.done[tensor]), const(self.chain.windows[tensor] - 1))
        return b.gep(self.windows[tensor], [b.mul(b.sub(row, oldest), const(self.elements(tensor)))])

    def slide(self, tensor: str) -> None:
        """Move the window's rows down by one (the oldest is dropped; the newest slot is then free)."""
        rows = self.chain.windows[tensor]
        if rows < 2:
            return
        size = (rows - 1) * row_bytes(self.graph, tensor)
        word = 4 if size % 4 == 0 else 1
        b = self.b
        typ = ir.IntType(8 * word).as_pointer()
        base = b.bitcast(self.windows[tensor], typ)
        step = row_bytes(self.graph, tensor) // word
        with for_range(b, size // word, name="slide") as i:
            b.store(b.load(b.gep(base, [b.add(i, const(step))])), b.gep(base, [i]))

    def newest(self, tensor: str) -> ir.Value:
        """The last slot of a sliding window (where its new row goes once the others moved down)."""
        return self.b.gep(self.windows[tensor], [const((self.chain.windows[tensor] - 1) * self.elements(tensor))])

    def make_room(self, tensor: str, keep: ir.Value, row: ir.Value) -> None:
        """Before row ``row`` is written: when its slot is past the window's end, rows [keep, row) (the ones
        its reader still reads) move to the window's first slots."""
        b, rows = self.b, self.chain.windows[tensor]
        full, move, end = (b.append_basic_block(f"room.{part}") for part in ("full", "move", "end"))
        b.branch(full)
        b.position_at_end(full)
        b.cbranch(b.icmp_signed(">=", b.sub(row, b.load(self.base[tensor])), const(rows)), move, end)
        b.position_at_end(move)
        size = row_bytes(self.graph, tensor)
        word = 4 if size % 4 == 0 else 1
        typ = ir.IntType(8 * word).as_pointer()
        base = b.bitcast(self.windows[tensor], typ)
        source = b.bitcast(self.row_pointer(tensor, keep), typ)
        with for_range(b, b.mul(b.sub(row, keep), const(size // word)), name="move") as i:
            b.store(b.load(b.gep(source, [i])), b.gep(base, [i]))
        b.store(keep, self.base[tensor])
        b.branch(end)
        b.position_at_end(end)

    def compute(self, index: int, row: ir.Value, out: ir.Value | None = None) -> None:
        """Code computing row ``row`` of stage ``index`` into ``out`` (the last stage: its output's row), its
        inner inputs first, each new row written in its window's next slot."""
        b, stage = self.b, self.chain.stages[index]
        lo, hi = _reads(b, stage, row)
        for tensor in stage.sources:
            producer = self.chain.producer(tensor)
            if producer is None:
                continue
            slot = self.done[tensor]
            head, body, end = (b.append_basic_block(f"need.{tensor[:12]}.{part}") for part in ("head", "body", "end"))
            b.branch(head)
            b.position_at_end(head)
            b.cbranch(b.icmp_signed("<", b.load(slot), b.sub(hi, const(1))), body, end)
            b.position_at_end(body)
            following = b.add(b.load(slot), const(1))
            at = None
            if tensor in self.base:   # rows a reader striding past its window skips are never computed
                following = b.select(b.icmp_signed("<", following, lo), lo, following)
                self.make_room(tensor, lo, following)
                at = self.row_pointer(tensor, following)
            if stage.filled:   # its padding rows: the producer's slot filled with the zero point
                self.fill_or_compute(producer, stage, following, at)
            else:
                self.compute(self.chain.stages.index(producer), following, at)
            b.store(following, slot)
            b.branch(head)
            b.position_at_end(end)
        args = []
        for name in stage.node.inputs:
            if not name:
                continue
            args.append(self.row_pointer(name, lo) if name in stage.sources else self.refs[name].ptr)
        if index == len(self.chain.stages) - 1:
            out = self.row_pointer(stage.out, row)
        elif out is None:
            self.slide(stage.out)
            out = self.newest(stage.out)
        args.append(out)
        self._dispatch(index, row, args)

    def fill_or_compute(self, producer: Stage, reader: Stage, row: ir.Value, out: ir.Value | None) -> None:
        """Row ``row`` of ``producer``'s output into ``out``: computed, or outside the tensor (a padding row of
        ``reader``'s) the zero point its reader subtracts, whose products are then 0 as the padding's."""
        b = self.b
        if out is None:
            self.slide(producer.out)
            out = self.newest(producer.out)
        inside = b.icmp_unsigned("<", row, const(producer.rows))
        compute, fill, end = (b.append_basic_block(f"pad.{part}") for part in ("compute", "fill", "end"))
        b.cbranch(inside, compute, fill)
        b.position_at_end(compute)
        self.compute(self.chain.stages.index(producer), row, out)
        b.branch(end)
        b.position_at_end(fill)
        zero = ir.Constant(out.type.pointee, reader.node.attrs.x_zero_point)
        with for_range(b, self.elements(producer.out), name="fill", unroll=False) as i:
            b.store(zero, b.gep(out, [i]))
        b.branch(end)
        b.position_at_end(end)

    def _dispatch(self, index: int, row: ir.Value, args: list[ir.Value]) -> None:
        """Call the function of ``row``'s padding: a switch over the rows of the edges, the interior the default."""
        b, stage = self.b, self.chain.stages[index]
        variants = stage.variants()
        default = (0, 0) if (0, 0) in variants else max(variants, key=lambda pads: len(variants[pads]))
        end = b.append_basic_block("row.end")
        blocks = {pads: b.append_basic_block(f"row.{pads[0]}.{pads[1]}") for pads in variants}
        switch = b.switch(row, blocks[default])
        for pads, rows in variants.items():
            if pads != default:
                for value in rows:
                    switch.add_case(const(value), blocks[pads])
        for pads, block in blocks.items():
            b.position_at_end(block)
            function, parameters, scratch = self.calls[(index, pads)]
            b.call(function, args + ([self.kernel_workspace] if scratch else []) + [parameters])
            b.branch(end)
        b.position_at_end(end)


def compacted(chain: RowChain, tensor: str) -> bool:
    """Whether ``tensor``'s window is compacted rather than slid: its reader steps more than one row, so only the
    rows it reads again move (module docstring)."""
    return strided_reader(next(stage for stage in chain.stages if tensor in stage.sources))


def _reads(b: ir.IRBuilder, stage: Stage, row: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(lo, hi) of ``Stage.reads`` at run time."""
    if stage.window is None:
        return row, b.add(row, const(1))
    w = stage.window
    start = b.sub(b.mul(row, const(w.strides[0])), const(w.pads_begin[0]))
    end = b.add(start, const((w.kernel[0] - 1) * w.dilations[0] + 1))
    if stage.filled:
        return start, end
    lo = b.select(b.icmp_signed("<", start, const(0)), const(0), start)
    hi = b.select(b.icmp_signed(">", end, const(stage.in_rows)), const(stage.in_rows), end)
    return lo, hi


def emit_row_chain(function: ir.Function, b: ir.IRBuilder, graph: Graph, chain: RowChain,
                   refs: dict[str, TensorRef], math, target, workspace: ir.Value | None,
                   parameters: LayerParameters, share: Callable[[ir.Function], ir.Function],
                   chosen: dict[str, Choice]) -> None:
    """The body of ``chain``'s layer function (module docstring); ``share`` is codegen's ``_shared``, ``chosen``
    the stages' implementations the select stage recorded (row_chains.py ``stage_query``)."""
    offsets, kernel_at, total = chain.workspace_layout(graph, target, chosen)
    windows = {}
    for tensor, offset in offsets.items():
        raw = b.gep(workspace, [const(offset)], inbounds=True)
        windows[tensor] = b.bitcast(raw, llvm_type(graph.type_of(tensor).dtype).as_pointer())
    scratch = b.gep(workspace, [const(kernel_at)], inbounds=True) if total > kernel_at else None
    block = _Block(b, graph, chain, refs, windows, scratch)
    blocks: dict[bytes, int] = {}
    for index, stage in enumerate(chain.stages):
        for pads in stage.variants():
            sub, data, needs = _stage_function(function, graph, chain, index, stage, pads, math, target, chosen)
            if data:
                if bytes(data) not in blocks:
                    offset = -(-len(parameters.data) // TABLE_ALIGN) * TABLE_ALIGN
                    parameters.data += bytes(offset - len(parameters.data)) + data
                    blocks[bytes(data)] = offset
                pointer = b.gep(function.args[-1], [const(blocks[bytes(data)])], inbounds=True)
            else:
                pointer = ir.Constant(BYTE_PTR, ir.Undefined)
            block.calls[(index, pads)] = (share(sub), pointer, needs)
    last = len(chain.stages) - 1
    with for_range(b, chain.stages[last].rows, name="row", unroll=False) as row:
        block.compute(last, row)


def _stage_function(function: ir.Function, graph: Graph, chain: RowChain, index: int, stage: Stage,
                    pads: tuple[int, int], math, target,
                    chosen: dict[str, Choice]) -> tuple[ir.Function, bytearray, bool]:
    """The function computing one row of ``stage`` with ``pads``, its parameter bytes, whether it takes the
    workspace. Its pointers are ``noalias`` but where the block's output takes X's bytes and the stage reads X."""
    node, types_in, types_out = stage.variant(graph, pads)
    names = [n for n in node.inputs if n]
    query, choice = stage_query(graph, node, types_in, types_out, target, chosen.get(node.name))
    scratch = run_hook(choice.impl, "workspace", 0, sizing_context(query, choice))
    arg_types = [llvm_type(t.dtype).as_pointer() for t in types_in + types_out]
    arg_types += [BYTE_PTR] * (2 if scratch else 1)
    module = function.module
    sub = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types),
                      name=module.get_unique_name(f"{function.name}_s{index}_{pads[0]}_{pads[1]}"))
    sub.linkage = "internal"
    sub.attributes.add("nounwind")
    sub.attributes.add("noinline")
    shares_x = chain.over_source and index == len(chain.stages) - 1 and chain.source in stage.sources
    for arg, name in zip(sub.args, names + [stage.out]):
        if not (shares_x and name in (chain.source, stage.out)):
            arg.add_attribute("noalias")
    for arg in sub.args[len(names) + 1:]:
        arg.add_attribute("noalias")
    builder = ir.IRBuilder(sub.append_basic_block("entry"))
    refs = [TensorRef(arg, t, chain_bound(graph, name))
            for arg, t, name in zip(sub.args, types_in, names)]
    out = TensorRef(sub.args[len(names)], types_out[0])
    parameters = LayerParameters(sub.args[-1])
    k = KernelContext(node, node.attrs, builder, refs, [out], math, target,
                      sub.args[-2] if scratch else None, scratch, parameters=parameters, layer=query.layer,
                      choice=choice, graph=graph)
    get_implementation(choice.impl).emit(k)
    builder.ret_void()
    return sub, parameters.data, bool(scratch)


def chain_bound(graph: Graph, name: str) -> tuple[int, int] | None:
    """(min, max) of an integer constant input (llvm/tensors.py ``constant_bounds``)."""
    return constant_bounds(graph, name)
