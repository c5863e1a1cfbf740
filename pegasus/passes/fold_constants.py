"""Constant folding: every layer whose inputs are all known at compile time is evaluated once with
the reference kernel and replaced by its result (shape-only ops such as Shape always fold).

The builder already folds while importing; this pass catches what other passes expose later. Each result is
held to the tensor budget before the kernel runs (its type is the one the shape rule gave, checked the same way).
"""

from __future__ import annotations

import numpy as np

from pegasus.ir.builder import evaluate, fold_arguments
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import Tensor
from pegasus.limits import check_tensor
from pegasus.ops.registry import get_op


def fold_constants(graph: Graph) -> bool:
    folded = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        args = fold_arguments(graph, opdef, node.inputs)
        if args is None:
            continue
        for out in node.outputs:
            if out:
                ttype = graph.type_of(out)
                check_tensor(ttype.shape, ttype.dtype.itemsize, f"layer '{node.name}' ({node.op}) output '{out}'")
        for out, value in zip(node.outputs, evaluate(opdef, node.attrs, args, node.name)):
            if out:
                value = np.asarray(value).astype(graph.type_of(out).dtype.numpy, copy=False)
                graph.tensors[out] = Tensor.constant(out, value)
        folded.append(node)
    graph.remove_nodes(folded)
    return bool(folded)
