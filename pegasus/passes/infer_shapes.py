"""Shape and dtype inference: recomputes every tensor's type from the graph inputs with the registry's
shape rules, so a model file edited by hand (or a pass that changed shapes) ends up consistent."""

from __future__ import annotations

from pegasus.ir.builder import infer_node
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import Tensor
from pegasus.ops.registry import get_op


def infer_shapes(graph: Graph) -> bool:
    changed = False
    for node in graph.nodes:
        types = [graph.type_of(n) if n else None for n in node.inputs]
        for out, ttype in zip(node.outputs, infer_node(get_op(node.op), node.attrs, types, node.name)):
            if not out:
                continue
            old = graph.tensors.get(out)
            if old is None or (old.type.shape, old.type.dtype) != (ttype.shape, ttype.dtype):
                graph.tensors[out] = Tensor(out, ttype)
                changed = True
    return changed
