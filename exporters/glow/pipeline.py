"""The export pipeline, in named stages: lower → group → select → pack → plan (then emit and compile,
exporters/glow/export.py).

- **lower** (lower.py): target-independent rewrites of a copy of the graph (float folds, common
  subexpressions, dense layers as 1x1 convolutions, channels-last layers no implementation computes wrapped in
  transposes, explicit output copies).
- **group** (fuse.py, row_chains.py, pooled_pair.py): which nodes one layer function computes — convolutions
  with their element-wise and pooling readers, residual blocks row by row, pairs of pooled convolutions.
- **select** (schedule/select.py): one implementation per layer, an immutable ``Choice``.
- **pack**: each layer's weights re-laid as its implementation reads them (its ``pack`` hook), so
  NAME.weights.bin holds exactly what the code reads.
- **plan** (memory/plan.py): every tensor's and workspace's place in the three buffers.

``--explain`` prints the ``Selection`` of each layer (``explain``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pegasus.exporters.glow.codegen import check_emitters, layer_streams, layer_workspaces
from pegasus.exporters.glow.fuse import Layer, fuse_layers, single_layers
from pegasus.exporters.glow.kernels.registry import Stream, sizing_context
from pegasus.exporters.glow.kernels.strategy import Choice, Query, choose, run_hook
from pegasus.exporters.glow.lower import lower_for_export, relay_inputs
from pegasus.exporters.glow.memory.plan import MemoryPlan, check_limits, plan_memory
from pegasus.exporters.glow.pooled_pair import pair_layers
from pegasus.exporters.glow.row_chains import chain_rows
from pegasus.exporters.glow.schedule.select import Selection, select_layers
from pegasus.exporters.glow.target import Target
from pegasus.ir.graph import Graph


@dataclass
class Schedule:
    """A graph as it is compiled: lowered and packed, its layers, each layer's selection and the memory plan."""

    graph: Graph
    layers: list[Layer]
    selections: list[Selection]
    plan: MemoryPlan
    streams: dict[int, Stream]

    @property
    def choices(self) -> list[Choice]:
        return [selection.choice for selection in self.selections]


def group(graph: Graph, target: Target, reuse_input_memory: bool = False) -> list[Layer]:
    """The layers of a lowered graph: convolutions fused with their consumers, blocks chained row by row and
    pooled pairs formed, unless ``target.fused`` is False (one layer per node)."""
    grouped = chain_rows(graph, fuse_layers(graph, target)) if target.fused else single_layers(graph)
    return pair_layers(graph, grouped, target, reuse_input_memory)


def pack(graph: Graph, layers: list[Layer], choices: list[Choice], target: Target) -> None:
    """Each layer's weights replaced by new constants laid as its implementation reads them (in place)."""
    for layer, choice in zip(layers, choices):
        laid = run_hook(choice.impl, "pack", [], Query(graph, layer, target), choice)
        nodes = {node.name: node for node in layer.nodes}
        for name, arrays, suffix in laid:
            relay_inputs(graph, nodes[name], arrays, suffix)


def schedule(graph: Graph, target: Target, reuse_input_memory: bool = False) -> Schedule:
    """Every stage up to the memory plan for ``graph`` on ``target``; a graph with an op no implementation
    computes, or a tensor the code cannot address, is refused here."""
    graph = lower_for_export(graph, target)
    check_emitters(graph)
    layers = group(graph, target, reuse_input_memory)
    selections = select_layers(graph, layers, target)
    choices = [selection.choice for selection in selections]
    pack(graph, layers, choices, target)
    streams = layer_streams(graph, layers, target, choices)
    plan = plan_memory(graph, layers, layer_workspaces(graph, layers, target, choices), streams,
                       reuse_input_memory, concat_in_place=not target.is_cortex_m)
    check_limits(graph, plan, target.address_bits)
    return Schedule(graph, layers, selections, plan, streams)


def _verdict(chosen: str, name: str, verdict) -> str:
    if name == chosen:
        return "chosen"
    if verdict is True:
        return "eligible, lower priority"
    return f"not eligible: {verdict}" if isinstance(verdict, str) else "not eligible"


def explain(scheduled: Schedule) -> str:
    """Per layer (in call order): its nodes, the implementation chosen and its family and parameters, its workspace
    and stream, and every candidate of its kind with why it was or was not taken (``--explain``)."""
    lines = []
    for index, (layer, selection) in enumerate(zip(scheduled.layers, scheduled.selections)):
        choice = selection.choice
        impl = selection.implementation
        workspace = scheduled.plan.workspace_of(layer)
        stream = scheduled.streams.get(index)
        facts = [f"workspace {workspace.size:,} B" if workspace else "no workspace"]
        if stream is not None:
            facts.append(f"streams ({stream.in_bytes} B in, {stream.out_bytes} B out per position)")
        params = ", ".join(f"{key}={value}" for key, value in choice.params)
        lines.append(f"layer {index} '{layer.nodes[0].name}' ({selection.kind}: {' '.join(n.op for n in layer.nodes)})"
                     f" -> {choice.impl} [{impl.family}]{' (' + params + ')' if params else ''}; {'; '.join(facts)}")
        for name, family, verdict in selection.verdicts:
            lines.append(f"    {name} [{family}]: {_verdict(choice.impl, name, verdict)}")
    return "\n".join(lines)


def stream_of(graph: Graph, node_name: str, target: Target) -> Stream | None:
    """The ``Stream`` of the layer of node ``node_name`` alone in ``graph`` as compiled (``Schedule.graph``): its
    implementation's ``stream`` hook, None when it does not stream."""
    node = next(n for n in graph.nodes if n.name == node_name)
    query = Query(graph, Layer([node]), target)
    choice = choose(query)
    return run_hook(choice.impl, "stream", None, sizing_context(query, choice))
