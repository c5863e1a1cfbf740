"""Common-subexpression elimination: a layer that applies the same op, with the same attributes, to the same
inputs as an earlier layer computes the same tensors, so its readers read the earlier layer's and it goes.

Exporters give branches that read one tensor their own copies of the same layer (Inception-v2 as exported in
the ONNX test data: the 1x1 reductions of several branches of a block are the same convolution on the same
input, 12 of its 69 convolutions), and onnxruntime merges them before it runs. Constant inputs compare by
value (dtype, shape and bytes), since each copy carries its own weights under its own name. Every op in the
registry is a function of its inputs (no random ops; importers turn inference-time Dropout into Identity),
so merging never changes a value. A layer writing a graph output is kept (the output's name is the graph's
interface); attributes that cannot be hashed keep their layer too.
"""

from __future__ import annotations

import hashlib

from pegasus.ir.graph import Graph


def _constant_key(graph: Graph, name: str) -> tuple | None:
    value = graph.value_of(name)
    if value is None:
        return None
    return ("constant", str(value.dtype), value.shape, hashlib.sha1(value.tobytes()).hexdigest())


def eliminate_common_subexpressions(graph: Graph) -> bool:
    """Merge repeated layers (module docstring) in one pass over the layers in order: a merge renames the
    readers as they are reached (``alias``, linear in the graph), so whole repeated chains merge. Merged
    layers write no graph output, so the graph's outputs keep their names. True if any layer went."""
    outputs = set(graph.outputs)
    seen: dict[tuple, list[str]] = {}
    doomed = []
    constants: dict[str, tuple | None] = {}
    alias: dict[str, str] = {}   # output of a merged layer -> the earlier layer's (never itself merged)
    for node in graph.nodes:
        if alias and any(name in alias for name in node.inputs):
            node.inputs = [alias.get(name, name) for name in node.inputs]
        inputs = []
        for name in node.inputs:
            if name not in constants:
                constants[name] = _constant_key(graph, name) if name else None
            inputs.append(constants[name] or name)
        key = (node.op, node.attrs, tuple(inputs))
        try:
            earlier = seen.get(key)
        except TypeError:     # unhashable attributes: not compared
            continue
        if earlier is None:
            seen[key] = node.outputs
            continue
        theirs = earlier + [""] * (len(node.outputs) - len(earlier))
        if outputs & set(node.outputs) or any(mine and not their for mine, their in zip(node.outputs, theirs)):
            continue     # a graph output, or an optional output the earlier layer does not write
        alias.update((mine, their) for mine, their in zip(node.outputs, theirs) if mine)
        doomed.append(node)
    if doomed:
        graph.remove_nodes(doomed)
        graph.prune()
    return bool(doomed)
