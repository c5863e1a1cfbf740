"""``--dump-graph-DAG``: the exported graph as Graphviz dot, each tensor labelled with its type and
where the memory plan put it (region + offset)."""

from __future__ import annotations

import json
from pathlib import Path

from pegasus.exporters.glow.memory_plan import MemoryPlan
from pegasus.fileio import atomic_write
from pegasus.ir.graph import Graph


def render_dot(graph: Graph, plan: MemoryPlan) -> str:
    quote = json.dumps
    lines = ["digraph bundle {", "  rankdir=TB;", "  node [fontname=Helvetica, fontsize=10];"]
    for name in graph.inputs + graph.outputs:
        loc = plan.locations.get(name)
        where = f"\\n{loc.region}@{loc.offset}" if loc else ""
        lines.append(f"  {quote('t:' + name)} [shape=box, style=rounded, label={quote(name + where)}];")
    for node in graph.nodes:
        lines.append(f"  {quote('n:' + node.name)} [shape=record, label={quote(node.op + ' | ' + node.name)}];")
    producers = {out: node for node in graph.nodes for out in node.outputs}
    for node in graph.nodes:
        for name in node.present_inputs():
            if graph.tensors[name].is_constant:
                continue
            source = quote("n:" + producers[name].name) if name in producers else quote("t:" + name)
            loc = plan.locations.get(name)
            label = f"{graph.type_of(name)}" + (f"\\n{loc.region}@{loc.offset}" if loc else "")
            lines.append(f"  {source} -> {quote('n:' + node.name)} [label={quote(label)}];")
    for name in graph.outputs:
        if name in producers:
            lines.append(f"  {quote('n:' + producers[name].name)} -> {quote('t:' + name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(graph: Graph, plan: MemoryPlan, path: Path) -> None:
    atomic_write(path, render_dot(graph, plan))
