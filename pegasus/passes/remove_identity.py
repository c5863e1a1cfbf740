"""Removes Identity layers (Identity, inference-time Dropout) by rewiring their readers.

An Identity whose output is a graph output keeps that name: its input is renamed instead, unless the
input is itself a graph input or output, in which case the layer stays (a copy is then needed).
"""

from __future__ import annotations

from pegasus.ir.graph import Graph


def remove_identity(graph: Graph) -> bool:
    changed = False
    for node in [n for n in graph.nodes if n.op == "Identity"]:
        source, result = node.inputs[0], node.outputs[0]
        if result not in graph.outputs:
            graph.remove_nodes([node])
            graph.rename_uses(result, source)
            changed = True
        elif source not in graph.inputs and source not in graph.outputs and not graph.tensors[source].is_constant:
            graph.remove_nodes([node])
            graph.rename_tensor(source, result)
            changed = True
    if changed:
        graph.prune()
    return changed

