"""Constant folding: every layer whose inputs are all known at compile time is evaluated once with
the reference kernel and replaced by its result (shape-only ops such as Shape always fold).

The builder already folds while importing; this pass catches what other passes expose later. Each result is
held to the tensor budget before the kernel runs (its type is the one the shape rule gave, checked the same way).
"""

from __future__ import annotations

import numpy as np

from pegasus.ir.builder import check_outputs, evaluate, fold_arguments
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import Tensor
from pegasus.ops.registry import get_op


def fold_constants(graph: Graph) -> bool:
    folded = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        args = fold_arguments(graph, opdef, node.inputs)
        if args is None:
            continue
        check_outputs(opdef, [graph.type_of(out) for out in node.outputs if out], node.name)
        for out, value in zip(node.outputs, evaluate(opdef, node.attrs, args, node.name)):
            if out:
                value = np.asarray(value).astype(graph.type_of(out).dtype.numpy, copy=False)
                graph.tensors[out] = Tensor.constant(out, value)
        folded.append(node)
    graph.remove_nodes(folded)
    return bool(folded)
