"""Prepares an imported graph for code generation (on a copy; the user's model is not changed).

- every graph output must be written by a layer: an output that is a constant, a graph input or
  another output gets an explicit Identity copy (the bundle fills the output placeholder itself).
  A constant output keeps its name as the placeholder; the others get a ``_copy`` suffix.
"""

from __future__ import annotations

import copy

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ops.registry import make_attrs


def materialize_outputs(graph: Graph) -> bool:
    produced = {out for node in graph.nodes for out in node.outputs}
    changed = False
    seen: set[str] = set()
    for position, name in enumerate(list(graph.outputs)):
        needs_copy = name not in produced or name in graph.inputs or name in seen
        seen.add(name)
        if not needs_copy:
            continue
        tensor = graph.tensors[name]
        if tensor.is_constant and name not in graph.outputs[:position]:
            # the placeholder keeps the output's name; the constant moves aside
            source = graph.unique_tensor_name(f"{name}_value")
            graph.tensors[source] = Tensor.constant(source, tensor.data)
            for node in graph.nodes:
                node.inputs = [source if n == name else n for n in node.inputs]
            target = name
        else:
            source, target = name, graph.unique_tensor_name(f"{name}_copy")
            graph.outputs[position] = target
        graph.tensors[target] = Tensor(target, tensor.type)
        graph.nodes.append(Node(graph.unique_node_name(f"{target}_output_copy"), "Identity", make_attrs("Identity"),
                                [source], [target]))
        changed = True
    return changed


def lower_for_export(graph: Graph) -> Graph:
    lowered = copy.deepcopy(graph)
    materialize_outputs(lowered)
    return lowered
