"""``--dump-graph-DAG``: the exported graph as Graphviz dot, each tensor labelled with its type and
where the memory plan put it (region + offset). Names are written through generated_text.py's ``dot_text``
(no name can end a string or split a record label)."""

from __future__ import annotations

from pathlib import Path

from pegasus.exporters.glow.generated_text import dot_string, dot_text
from pegasus.exporters.glow.memory.plan import MemoryPlan
from pegasus.fileio import atomic_write
from pegasus.ir.graph import Graph


def render_dot(graph: Graph, plan: MemoryPlan) -> str:
    quote = dot_string
    lines = ["digraph bundle {", "  rankdir=TB;", "  node [fontname=Helvetica, fontsize=10];"]
    for name in graph.inputs + graph.outputs:
        loc = plan.locations.get(name)
        where = f"\\n{loc.region}@{loc.offset}" if loc else ""
        lines.append(f'  {quote("t:" + name)} [shape=box, style=rounded, label="{dot_text(name)}{where}"];')
    for node in graph.nodes:
        label = f"{dot_text(node.op)} | {dot_text(node.name)}"
        lines.append(f'  {quote("n:" + node.name)} [shape=record, label="{label}"];')
    producers = {out: node for node in graph.nodes for out in node.outputs}
    for node in graph.nodes:
        for name in node.present_inputs():
            if graph.tensors[name].is_constant:
                continue
            source = quote("n:" + producers[name].name) if name in producers else quote("t:" + name)
            loc = plan.locations.get(name)
            label = dot_text(str(graph.type_of(name))) + (f"\\n{loc.region}@{loc.offset}" if loc else "")
            lines.append(f'  {source} -> {quote("n:" + node.name)} [label="{label}"];')
    for name in graph.outputs:
        if name in producers:
            lines.append(f"  {quote('n:' + producers[name].name)} -> {quote('t:' + name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(graph: Graph, plan: MemoryPlan, path: Path) -> None:
    atomic_write(path, render_dot(graph, plan))
