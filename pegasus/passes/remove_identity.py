"""Removes Identity layers (Identity, inference-time Dropout) by rewiring their readers.

An Identity whose output is a graph output keeps that name: its input is renamed instead, unless the
input is itself a graph input or output, in which case the layer stays (a copy is then needed).

Linear in the graph: the layers are visited once, each removal only records which name stands for which
(``alias``, followed to its end), and one sweep (``Graph.rename_mentions``) rewires everything at the end, as
renaming after every removal would have done (that was quadratic: 16,384 Identities took 92 s).
"""

from __future__ import annotations

from dataclasses import replace

from pegasus.ir.graph import Graph


def remove_identity(graph: Graph) -> bool:
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    alias: dict[str, str] = {}   # a name that goes -> the name that stands for it

    def resolve(name: str) -> str:
        path = []
        while name in alias:
            path.append(name)
            name = alias[name]
        for step in path:          # shorten every chain walked: each name is walked once more at most
            alias[step] = name
        return name

    doomed = []
    for node in [n for n in graph.nodes if n.op == "Identity"]:
        source, result = resolve(node.inputs[0]), node.outputs[0]
        if result not in outputs:
            alias[result] = source
        elif source not in inputs and source not in outputs and not graph.tensors[source].is_constant:
            alias[source] = result    # the source takes the output's name, its tensor entry too
            graph.tensors[result] = replace(graph.tensors.pop(source), name=result)
        else:
            continue
        doomed.append(node)
    if not doomed:
        return False
    graph.remove_nodes(doomed)
    graph.rename_mentions({name: resolve(name) for name in list(alias)})
    graph.prune()
    return True
