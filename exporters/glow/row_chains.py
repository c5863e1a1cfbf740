"""Line-buffered residual blocks and downsampling pairs: a few layers computed a few rows at a time, so that
their inner tensors never exist whole in RAM.

Why: layer by layer, a residual block keeps its input X alive while its convolutions write full tensors,
so its RAM floor is two or three activations: ResNet-8's first block holds X and the first convolution's
output, 2 x 16 KB, above half of TFLite Micro's arena for the whole model. Computed row by row, the block
holds X, a few rows of each inner tensor (a convolution of k rows needs its input's last k rows: a "line
buffer"), and writes its output over X's rows once nothing reads them any more.

A ``RowChain`` is such a block: the nodes of two branches leaving the same tensor X — chains of
channels-last integer convolutions (``ROW_CONVS``), one of them possibly empty (the identity) — and the
element-wise node joining them (an Add), every tensor inside read by exactly one node of the block, X by
nothing outside it (``chain_rows`` finds them). Its stages run on demand: output row r of the last stage
needs rows ``reads(r)`` of each input; a stage's input produced inside the block is computed up to the last
row needed, one row at a time, into a window of the rows its reader still needs (``RowChain.windows``,
the rows in order, the oldest dropped by moving the others down). Rows of X are read where X lies.

A plain pair is chained too (``_downsampling_pairs``): a convolution A whose output T is read only by a
convolution B strided along the rows, when X, B's output and T's window take fewer bytes than T alone (the
floor of any layer-by-layer plan at A and B): MobileNetV1 0.25's 1x1 8 -> 16 layer on 48x48 (T 36,864 B)
and the stride-2 depthwise layer after it. The convolution expanding B's output joins them when its output
fits in X (``_expanding_reader``): layer by layer it would lie beside B's output, which takes X's first
bytes, since a streaming layer writes over its input only from below. In such a chain a convolution reading
a window has its padding rows in the window too, filled with its input's zero point (``Stage.filled``:
the products of those rows are 0, as the padding's), so it needs one function for all its rows.

Each stage's row is its own node's kernel on a one-row output: the node with its input cut to the rows
read and its top/bottom padding made explicit (``Stage.variant``: a handful of distinct shapes per stage,
the interior rows all one). The sums are the same integers as the whole layer's, so the block's output is
bit for bit the unfused layers' (exporters/glow/row_emit.py generates the code).

Whether the output may take X's bytes is decided by playing the schedule (``schedule``): every output
row must be written only after the last read of the X rows whose bytes it covers (an element-wise last
stage may read X at the very bytes it writes, element by element). The memory planner then writes the
block's output over X when X dies there (memory/plan.py, ``Layer.writes_over``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from pegasus.exporters.glow.fuse import Layer
from pegasus.exporters.glow.kernels.context import piece
from pegasus.exporters.glow.kernels.registry import sizing_context
from pegasus.exporters.glow.kernels.strategy import Choice, Query, choose, run_hook
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv
from pegasus.ops.layout import first_shape
from pegasus.ops.registry import get_op
from pegasus.ops.spatial import Window

#: the convolutions a block's branches may hold: channels-last kernels that take any padding
ROW_CONVS = ("QConv",)


@dataclass(frozen=True)
class Stage:
    """One node of a block: its activation inputs (X or tensors of the block), the geometry of its rows."""

    node: Node
    sources: tuple[str, ...]
    window: Window | None     # a convolution's (rows first); None: element-wise, row j reads row j
    rows: int                 # output rows
    in_rows: int              # rows of its inputs
    filled: bool = False      # its padding rows lie in its input's window, filled with the zero point

    @property
    def out(self) -> str:
        return self.node.outputs[0]

    def _span(self, row: int) -> tuple[int, int]:
        if self.window is None:
            return row, row + 1
        w = self.window
        start = row * w.strides[0] - w.pads_begin[0]
        return start, start + (w.kernel[0] - 1) * w.dilations[0] + 1

    def reads(self, row: int) -> tuple[int, int]:
        """The input rows [lo, hi) output row ``row`` reads (the padding rows too where they are ``filled``)."""
        start, end = self._span(row)
        return (start, end) if self.filled else (max(0, start), min(self.in_rows, end))

    def pads(self, row: int) -> tuple[int, int]:
        """The (top, bottom) padding rows of output row ``row``'s window the kernel adds itself."""
        start, end = self._span(row)
        return (0, 0) if self.filled else (max(0, -start), max(0, end - self.in_rows))

    def variant(self, graph: Graph, pads: tuple[int, int]) -> tuple[Node, list[TensorType], list[TensorType]]:
        """The node computing one output row whose window has ``pads`` rows of padding, with the types of its
        inputs (the activations cut to the rows read) and output."""
        node = self.node
        out = graph.type_of(self.out)
        one = replace(out, shape=(out.shape[0], 1) + out.shape[2:])
        if self.window is None:
            types = [replace(graph.type_of(n), shape=one.shape) if n in self.sources else graph.type_of(n)
                     for n in node.inputs if n]
            return node, types, [one]
        w = self.window
        extent = (w.kernel[0] - 1) * w.dilations[0] + 1
        attrs = replace(node.attrs, auto_pad="NOTSET",
                        pads=(pads[0], w.pads_begin[1], pads[1], w.pads_end[1]))
        x = graph.type_of(node.inputs[0])
        cut = replace(x, shape=(x.shape[0], extent - pads[0] - pads[1]) + x.shape[2:])
        types = [cut] + [graph.type_of(n) for n in node.inputs[1:] if n]
        return Node(node.name, node.op, attrs, list(node.inputs), list(node.outputs)), types, [one]

    def variants(self) -> dict[tuple[int, int], list[int]]:
        """The rows of each padding (the interior rows: (0, 0))."""
        found: dict[tuple[int, int], list[int]] = {}
        for row in range(self.rows):
            found.setdefault(self.pads(row), []).append(row)
        return found


@dataclass
class RowChain(Layer):
    """A residual block computed row by row (module docstring). ``nodes`` in graph order, the last the join."""

    source: str = ""
    stages: list[Stage] = field(default_factory=list)
    windows: dict[str, int] = field(default_factory=dict)   # rows kept of each tensor inside the block
    first_rows: dict[str, int] = field(default_factory=dict)   # each one's first row (< 0: a padding row)
    over_source: bool = False    # the schedule lets the output take X's bytes

    @property
    def inputs(self) -> list[str]:
        constants = [n for node in self.nodes for n in node.inputs if n and n != self.source
                     and all(n != stage.out for stage in self.stages)]
        return [self.source] + list(dict.fromkeys(constants))

    @property
    def outputs(self) -> list[str]:
        return [self.stages[-1].out]

    @property
    def op(self) -> str:
        return "rows_" + "_".join(node.op for node in self.nodes)

    @property
    def kind(self) -> str:
        return "RowChain"

    @property
    def writes_over(self) -> str | None:
        return self.source if self.over_source else None

    def producer(self, tensor: str) -> Stage | None:
        return next((stage for stage in self.stages if stage.out == tensor), None)

    def workspace_layout(self, graph: Graph, target, chosen: dict[str, Choice]) -> tuple[dict[str, int], int, int]:
        """({inner tensor: offset of its window}, offset of the stages' own workspace, total bytes); ``chosen``: the
        implementations the select stage recorded for the block's stages, by node name (``stage_query``)."""
        offsets, used = {}, 0
        for tensor, rows in self.windows.items():
            offsets[tensor] = used
            used = piece(used + rows * row_bytes(graph, tensor))
        kernel = max((stage_workspace(graph, *stage.variant(graph, pads), target, chosen.get(stage.node.name))
                      for stage in self.stages
                      for pads in stage.variants()), default=0)
        return offsets, used, used + kernel if kernel else used


def stage_query(graph: Graph, node: Node, types_in: list[TensorType | None], types_out: list[TensorType | None],
                target, chosen: Choice | None = None) -> tuple[Query, Choice]:
    """(the query of a stage's node computing a band of rows — its tensors of those types — and its implementation:
    ``chosen``, the one the select stage recorded for the block, whose weights were laid for it before the stage
    is emitted, else the one the select stage's rule gives it there)."""
    inputs = node.inputs if len(types_in) == len(node.inputs) else [n for n in node.inputs if n]
    names = [*inputs, *node.outputs]
    types = tuple((name, ttype) for name, ttype in zip(names, [*types_in, *types_out]) if name and ttype is not None)
    query = Query(graph, Layer([node]), target, types)
    return query, chosen if chosen is not None else choose(query)


def stage_workspace(graph: Graph, node: Node, types_in: list[TensorType | None], types_out: list[TensorType | None],
                    target, chosen: Choice | None = None) -> int:
    """The scratch bytes a stage's implementation takes for a band of rows."""
    query, choice = stage_query(graph, node, types_in, types_out, target, chosen)
    return run_hook(choice.impl, "workspace", 0, sizing_context(query, choice))


def row_bytes(graph: Graph, tensor: str) -> int:
    t = graph.type_of(tensor)
    return t.nbytes // t.shape[1]


def _window(graph: Graph, node: Node) -> Window:
    """A channels-last convolution's window (grouping sees the weights as the registry lays them: (M, C/group, k...);
    the pack stage re-lays them later)."""
    x, w = graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1])
    return Conv.geometry(node.attrs, first_shape(x.shape, True), w.shape)


def _row_conv(graph: Graph, layer: Layer) -> bool:
    if layer.fused or layer.nodes[0].op not in ROW_CONVS:
        return False
    node = layer.nodes[0]
    x, y = graph.type_of(node.inputs[0]), graph.type_of(node.outputs[0])
    return (bool(getattr(node.attrs, "channels_last", False)) and len(x.shape) == 4 and x.shape[0] == 1
            and len(y.shape) == 4 and all(graph.tensors[n].is_constant for n in node.inputs[1:] if n))


def _join(graph: Graph, layer: Layer) -> bool:
    """An element-wise node of several same-shaped 4-D integer activations (no broadcasting, no constant)."""
    if layer.fused or not get_op(layer.nodes[0].op).elementwise or len(layer.outputs) != 1:
        return False
    node = layer.nodes[0]
    y = graph.type_of(node.outputs[0])
    present = [n for n in node.inputs if n]
    return (len(present) >= 2 and len(y.shape) == 4 and y.shape[0] == 1 and y.dtype.is_integer
            and all(graph.type_of(n).shape == y.shape and not graph.tensors[n].is_constant for n in present))


def chain_rows(graph: Graph, layers: list[Layer]) -> list[Layer]:
    """``layers`` with each residual block that can run row by row as one ``RowChain``, placed at its join."""
    readers = Counter(n for layer in layers for n in layer.present_inputs())
    producer = {out: layer for layer in layers for out in layer.outputs if out}
    outputs = set(graph.outputs)
    chains = {}
    for join in layers:
        if not _join(graph, join):
            continue
        branches, roots = [], set()
        for tensor in [n for n in join.inputs if n and not graph.tensors[n].is_constant]:
            branch = []
            while (tensor in producer and readers[tensor] == 1 and tensor not in outputs
                   and _row_conv(graph, producer[tensor]) and id(producer[tensor]) not in chains):
                branch.insert(0, producer[tensor])
                tensor = producer[tensor].inputs[0]
            branches.append(branch)
            roots.add(tensor)
        members = [layer for branch in branches for layer in branch] + [join]
        if len(roots) != 1 or not any(branches):
            continue
        source = roots.pop()
        if len(graph.type_of(source).shape) != 4 or readers[source] != sum(
                layer.present_inputs().count(source) for layer in members):
            continue
        order = {id(layer): i for i, layer in enumerate(layers)}
        members.sort(key=lambda layer: order[id(layer)])
        chain = _make_chain(graph, source, [layer.nodes[0] for layer in members])
        if chain is not None:
            for layer in members:
                chains[id(layer)] = chain
    _downsampling_pairs(graph, layers, chains, readers, producer, outputs)
    result = []
    for layer in layers:
        chain = chains.get(id(layer))
        if chain is None:
            result.append(layer)
        elif layer.nodes[0] is chain.nodes[-1]:
            result.append(chain)
    return result


def _downsampling_pairs(graph: Graph, layers: list[Layer], chains: dict[int, RowChain], readers: Counter,
                        producer: dict[str, Layer], outputs: set[str]) -> None:
    """Add to ``chains`` each plain pair of convolutions A -> T -> B, B strided along the rows, T read by B
    only, whose rows (X, Y and T's window; Y on X's bytes where the schedule allows) take fewer bytes than T
    alone, the floor of any layer-by-layer plan there: MobileNetV1's 1x1 8 -> 16 layer on 48x48 and the
    stride-2 depthwise layer reading it (module docstring)."""
    for second in layers:
        tensor = second.inputs[0] if second.inputs else ""
        first = producer.get(tensor)
        if (first is None or id(first) in chains or id(second) in chains or readers[tensor] != 1
                or tensor in outputs or not _row_conv(graph, first) or not _row_conv(graph, second)
                or _window(graph, second.nodes[0]).strides[0] < 2 or len(graph.type_of(first.inputs[0]).shape) != 4):
            continue
        chain = _make_chain(graph, first.inputs[0], [first.nodes[0], second.nodes[0]], fill=True)
        if chain is None or _chain_bytes(graph, chain) >= graph.type_of(tensor).nbytes:
            continue
        members = [first, second]
        third = _expanding_reader(graph, chain, readers, outputs, [layer for layer in layers if
                                                                   layer.present_inputs()[:1] == chain.outputs])
        if third is not None and id(third) not in chains:
            longer = _make_chain(graph, chain.source, [first.nodes[0], second.nodes[0], third.nodes[0]], fill=True)
            if longer is not None and longer.over_source:
                chain, members = longer, members + [third]
        for layer in members:
            chains[id(layer)] = chain


def _expanding_reader(graph: Graph, chain: RowChain, readers: Counter, outputs: set[str],
                      candidates: list[Layer]) -> Layer | None:
    """The convolution reading a pair's output alone, if its output is larger: layer by layer it would lie
    beside the pair's output, which takes X's first bytes (a streaming layer writes over its input from below
    only), so it joins the chain, whose output then takes X's bytes (MobileNetV1's 1x1 16 -> 32 on 24x24)."""
    y = chain.outputs[0]
    if len(candidates) != 1 or readers[y] != 1 or y in outputs or not _row_conv(graph, candidates[0]):
        return None
    third = candidates[0]
    grows = graph.type_of(third.outputs[0]).nbytes > graph.type_of(y).nbytes
    return third if grows and graph.type_of(third.outputs[0]).nbytes <= graph.type_of(chain.source).nbytes else None


def _chain_bytes(graph: Graph, chain: RowChain) -> int:
    """The bytes a chain holds while it runs, but its stages' scratch: X, Y unless on X's bytes, the windows."""
    x, y = (graph.type_of(name).nbytes for name in (chain.source, chain.outputs[0]))
    rows = sum(count * row_bytes(graph, tensor) for tensor, count in chain.windows.items())
    return (max(x, y) if chain.over_source else x + y) + rows


def _make_chain(graph: Graph, source: str, nodes: list[Node], fill: bool = False) -> RowChain | None:
    stages = []
    for node in nodes:
        sources = tuple(n for n in node.inputs if n and not graph.tensors[n].is_constant)
        x, y = graph.type_of(sources[0]), graph.type_of(node.outputs[0])
        window = _window(graph, node) if node.op in ROW_CONVS else None
        if window is not None and (len(window.kernel) != 2 or window.out[0] != y.shape[1]):
            return None
        inner = all(any(earlier.out == name for earlier in stages) for name in sources)
        padded = window is not None and window.pads_begin[0] + window.pads_end[0] > 0
        stage = Stage(node, sources, window, y.shape[1], x.shape[1], filled=fill and padded and inner)
        if any(lo >= hi for lo, hi in map(stage.reads, range(stage.rows))):   # a window all padding
            return None
        stages.append(stage)
    chain = RowChain(nodes, source=source, stages=stages)
    chain.windows = {stage.out: 0 for stage in stages[:-1]}
    chain.first_rows = {stage.out: 0 for stage in stages[:-1]}
    for stage in stages:
        for tensor in stage.sources:
            if tensor != source:
                chain.first_rows[tensor] = min(chain.first_rows[tensor], stage.reads(0)[0])
    for stage, row, done in schedule(chain):
        for tensor in stage.sources:
            if tensor != source:
                lo, hi = stage.reads(row)
                chain.windows[tensor] = max(chain.windows[tensor], hi - lo)
                if done[tensor] != hi - 1:   # the window would not end at the row read last: keep the layers
                    return None
    x_bytes = graph.type_of(source).nbytes
    # a graph output smaller than X would take X's whole buffer to the caller's output (memory_plan)
    smaller_output = stages[-1].out in graph.outputs and graph.type_of(stages[-1].out).nbytes < x_bytes
    chain.over_source = not smaller_output and _may_overwrite(graph, chain)
    return chain


def schedule(chain: RowChain):
    """The (stage, row, {inner tensor: last row computed}) steps of the block in the order its code runs them:
    each output row of the last stage, each stage's inner inputs computed up to the last row it reads, first."""
    done = {tensor: first - 1 for tensor, first in chain.first_rows.items()}

    def compute(stage: Stage, row: int):
        if not 0 <= row < stage.rows:   # a padding row of its reader's: the window's slot is filled
            return
        lo, hi = stage.reads(row)
        for tensor in stage.sources:
            producer = chain.producer(tensor)
            while producer is not None and done[tensor] < hi - 1:
                # a compacted window's reader striding past it skips rows: they are not computed
                following = max(done[tensor] + 1, lo) if strided_reader(stage) else done[tensor] + 1
                yield from compute(producer, following)
                done[tensor] = following
        yield stage, row, dict(done)

    last = chain.stages[-1]
    for row in range(last.rows):
        yield from compute(last, row)


def strided_reader(reader: Stage) -> bool:
    """Whether ``reader`` steps more than one row (its input's window is compacted: row_emit.compacted)."""
    return reader.window is not None and reader.window.strides[0] > 1


def _may_overwrite(graph: Graph, chain: RowChain) -> bool:
    """Whether every output row is written after the last read of the X bytes it covers (module docstring)."""
    source, last = chain.source, chain.stages[-1]
    x_row, y_row = row_bytes(graph, source), row_bytes(graph, last.out)
    if graph.type_of(last.out).nbytes > graph.type_of(source).nbytes:
        return False
    last_read: dict[int, tuple[int, bool]] = {}   # X row -> (step, read by the last stage at its own bytes)
    written = []
    for step, (stage, row, _) in enumerate(schedule(chain)):
        if source in stage.sources:
            lo, hi = stage.reads(row)
            for x in range(lo, hi):
                own = stage is last and stage.window is None and x == row and x_row == y_row
                last_read[x] = (step, own)
        if stage is last:
            written.append((step, row))
    for step, row in written:
        first, end = row * y_row, (row + 1) * y_row
        for x in range(first // x_row, min(-(-end // x_row), graph.type_of(source).shape[1])):
            when, own = last_read.get(x, (-1, False))
            if when > step or (when == step and not own):
                return False
    return True
