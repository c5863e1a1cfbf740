"""Folds inference-mode BatchNormalization into the Conv, Gemm or MatMul that feeds it.

BN(y) = k * (y - mean) + beta with k = scale / sqrt(var + eps), per channel (axis 1). When y is
produced by a linear layer with constant weights and nothing else reads y:
    Conv:   W'[c] = W[c] * k[c];           bias' = (bias - mean) * k + beta
    Gemm:   B' = B scaled per output column; C' = (beta_g * C - mean) * k + beta, beta_g' = 1
    MatMul: W' = W * k (columns);           then one Add of (-mean * k + beta)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ops.normalization import BatchNormalization
from pegasus.ops.registry import make_attrs


def _bn_coefficients(graph: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    params = [graph.value_of(n) for n in bn.inputs[1:5]]
    if any(p is None for p in params):
        return None
    with np.errstate(all="ignore"):  # parameters from the file: a negative variance or NaN is not folded
        slope, shift = BatchNormalization.affine(bn.attrs, *params)
    if not (np.isfinite(slope).all() and np.isfinite(shift).all()):
        return None
    return slope, shift


def _replace_constant(graph: Graph, node: Node, index: int, value: np.ndarray, dtype: np.dtype) -> None:
    """Point input ``index`` of ``node`` at a new constant (the old one may be shared)."""
    node.inputs += [""] * (index + 1 - len(node.inputs))
    node.inputs[index] = graph.add_constant(f"{node.name}_folded_{index}", value.astype(dtype))


def _fold_into_conv(graph: Graph, conv: Node, k: np.ndarray, shift: np.ndarray) -> bool:
    if conv.attrs.channels_last:   # BN's axis 1 is then a spatial axis, not the output channels
        return False
    weight = graph.value_of(conv.inputs[1])
    if weight is None or weight.shape[0] != k.size:
        return False
    bias = graph.value_of(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(k.size)
    if bias is None:
        return False
    dtype = weight.dtype
    _replace_constant(graph, conv, 1, weight * k.reshape((-1,) + (1,) * (weight.ndim - 1)), dtype)
    _replace_constant(graph, conv, 2, bias * k + shift, dtype)
    return True


def _fold_into_gemm(graph: Graph, gemm: Node, k: np.ndarray, shift: np.ndarray) -> bool:
    weight = graph.value_of(gemm.inputs[1])
    c_name = gemm.inputs[2] if len(gemm.inputs) > 2 else ""
    c = graph.value_of(c_name) if c_name else np.zeros(k.size)
    if weight is None or c is None or weight.ndim != 2:
        return False
    scaled = weight * (k[:, None] if gemm.attrs.transB else k[None, :])
    dtype = weight.dtype
    new_c = float(gemm.attrs.beta) * np.broadcast_to(c, k.shape) * k + shift
    _replace_constant(graph, gemm, 1, scaled, dtype)
    _replace_constant(graph, gemm, 2, new_c, dtype)
    gemm.attrs = dataclasses.replace(gemm.attrs, beta=1.0)
    return True


def _fold_into_matmul(graph: Graph, matmul: Node, k: np.ndarray, shift: np.ndarray) -> bool:
    weight = graph.value_of(matmul.inputs[1])
    if weight is None or weight.ndim != 2 or graph.type_of(matmul.outputs[0]).rank != 2:
        return False
    _replace_constant(graph, matmul, 1, weight * k[None, :], weight.dtype)
    product = graph.unique_tensor_name(f"{matmul.outputs[0]}_scaled")
    result = matmul.outputs[0]
    graph.tensors[product] = Tensor(product, graph.type_of(result))
    matmul.outputs = [product]
    offset = graph.add_constant(f"{matmul.name}_bn_shift", shift.astype(weight.dtype))
    index = graph.nodes.index(matmul)
    graph.nodes.insert(index + 1, Node(graph.unique_node_name(f"{matmul.name}_bn_add"), "Add", make_attrs("Add"),
                                       [product, offset], [result]))
    return True


FOLDERS: dict[str, Callable[[Graph, Node, np.ndarray, np.ndarray], bool]] = {
    "Conv": _fold_into_conv,
    "Gemm": _fold_into_gemm,
    "MatMul": _fold_into_matmul,
}


def fold_batchnorm(graph: Graph) -> bool:
    changed = False
    producers = graph.producers()
    consumers = graph.consumers()
    for bn in [n for n in graph.nodes if n.op == "BatchNormalization"]:
        source = bn.inputs[0]
        producer = producers.get(source)
        extra_outputs = [o for o in bn.outputs[1:] if o]
        if (producer is None or producer.op not in FOLDERS or len(consumers.get(source, [])) != 1
                or source in graph.outputs or extra_outputs or getattr(bn.attrs, "training_mode", 0)):
            continue
        coefficients = _bn_coefficients(graph, bn)
        if coefficients is None or not graph.type_of(source).dtype.is_float:
            continue
        weight = graph.value_of(producer.inputs[1]) if len(producer.inputs) > 1 else None
        if weight is None or weight.dtype.kind != "f":  # integer weights are not scaled by a float affine
            continue
        with np.errstate(over="ignore", invalid="ignore"):  # huge or non-finite weights from the file
            folded = FOLDERS[producer.op](graph, producer, *coefficients)
        if folded:
            # tensor `source` now holds BN's result: its producer takes over BN's output name
            result = bn.outputs[0]
            graph.remove_nodes([bn])
            graph.producers()[source].outputs[0] = result
            graph.tensors[result] = Tensor(result, graph.type_of(source))
            del graph.tensors[source]
            producers = graph.producers()
            consumers = graph.consumers()
            changed = True
    if changed:
        graph.prune()
    return changed
