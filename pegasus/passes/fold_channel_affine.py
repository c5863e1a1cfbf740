"""Folds a per-channel affine on the last axis into the layer before it: a channels-last Conv or
ConvTranspose, or a Gemm (whose output channels are its last axis too).

The channels-last frameworks write a layer's bias and its inference-mode BatchNormalization as element-wise
ops after the layer (TensorFlow's BiasAdd and FusedBatchNorm, Keras' BatchNormalization as
``x * k + (beta - mean * k)``), which import as a Mul by and an Add of constants broadcast along the last
axis. Folding them leaves one layer (one kernel, one quantized tensor), as the ONNX BatchNormalization fold
(fold_batchnorm.py) does for channels-first graphs:
    y = layer(x) * s  ->  the weights of output channel m scaled by s[m], bias' = bias * s
    y = layer(x) + t  ->  bias' = bias + t          (Add in either operand order)
    y = layer(x) - t  ->  bias' = bias - t
``s`` and ``t`` are float constants that vary along the last axis only ((C,), (1, ..., 1, C) or one value).
The layer needs constant weights (and bias, if any), and nothing else may read its output, which must not
be a graph output. Folds repeat until none applies, so a bias followed by a batch norm folds whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ops.facts import has_fact, op_facts


def _channel_vector(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """``value`` as a (channels,) vector when it broadcasts along the last axis of a rank-``rank`` tensor
    only (so the result keeps the layer's shape), else None."""
    if value.ndim > rank or any(d != 1 for d in value.shape[:-1]):
        return None
    if value.size == 1:
        return np.full(channels, value.reshape(()), dtype=np.float64)
    if value.shape[-1] != channels:
        return None
    return value.reshape(channels).astype(np.float64)


def _weights_and_bias(graph: Graph, layer: Node, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    weight = graph.value_of(layer.inputs[1])
    bias_name = layer.inputs[2] if len(layer.inputs) > 2 else ""
    bias = graph.value_of(bias_name) if bias_name else np.zeros(channels, np.float64)
    if weight is None or bias is None or weight.dtype.kind != "f":  # integer weights take no float scale
        return None
    return weight, bias


def set_input(graph: Graph, layer: Node, index: int, value: np.ndarray, dtype: np.dtype) -> None:
    """Point input ``index`` of ``layer`` at a new constant (the old one may be shared)."""
    layer.inputs += [""] * (index + 1 - len(layer.inputs))
    layer.inputs[index] = graph.add_constant(f"{layer.name}_folded_{index}", value.astype(dtype))


def scale_per_output(weight: np.ndarray, layer: Node, s: np.ndarray) -> np.ndarray | None:
    """``weight`` with every output channel m scaled by s[m], for the layer's weight layout."""
    if layer.op == "Conv":                      # (M, C/group, k...)
        return weight * s.reshape((-1,) + (1,) * (weight.ndim - 1))
    if layer.op == "ConvTranspose":             # (C, M/group, k...): row c feeds group c // (C/group)
        group = layer.attrs.group
        rows, per_group = weight.shape[0], weight.shape[1]
        factors = s.reshape(group, per_group)[np.arange(rows) // (rows // group)]   # (C, M/group)
        return weight * factors.reshape(factors.shape + (1,) * (weight.ndim - 2))
    # Gemm: output column n is column n of B' (row n of B when transB)
    return weight * (s[:, None] if layer.attrs.transB else s[None, :])


def _fold_into_conv(graph: Graph, layer: Node, kind: str, v: np.ndarray) -> bool:
    if not layer.attrs.channels_last:
        return False
    found = _weights_and_bias(graph, layer, v.size)
    if found is None:
        return False
    weight, bias = found
    if kind == "scale":
        set_input(graph, layer, 1, scale_per_output(weight.astype(np.float64), layer, v), weight.dtype)
        set_input(graph, layer, 2, bias * v, weight.dtype)
    else:
        set_input(graph, layer, 2, bias + (v if kind == "shift" else -v), weight.dtype)
    return True


def _fold_into_gemm(graph: Graph, layer: Node, kind: str, v: np.ndarray) -> bool:
    found = _weights_and_bias(graph, layer, v.size)
    if found is None or found[0].ndim != 2:
        return False
    weight, c = found
    c = float(layer.attrs.beta) * np.asarray(c, np.float64)
    if kind == "scale":
        set_input(graph, layer, 1, scale_per_output(weight.astype(np.float64), layer, v), weight.dtype)
        c = c * v
    else:
        c = c + (v if kind == "shift" else -v)
    set_input(graph, layer, 2, c, weight.dtype)
    layer.attrs = dataclasses.replace(layer.attrs, beta=1.0)
    return True


FOLDERS: dict[str, Callable[[Graph, Node, str, np.ndarray], bool]] = {
    "Conv": _fold_into_conv,
    "ConvTranspose": _fold_into_conv,
    "Gemm": _fold_into_gemm,
}


def _fold_one(graph: Graph, affine: Node, producers: dict[str, Node], consumers: dict[str, list[Node]]) -> bool:
    positions, kind = op_facts(affine.op).channel_affine   # Mul, Add, Sub (OpDef.channel_affine)
    for position in positions:
        source, other = affine.inputs[position], affine.inputs[1 - position]
        layer = producers.get(source)
        constant = graph.value_of(other)
        if (layer is None or layer.op not in FOLDERS or constant is None or len(consumers.get(source, [])) != 1
                or source in graph.outputs or not graph.type_of(source).dtype.is_float
                or not np.issubdtype(constant.dtype, np.floating)):
            continue
        ttype = graph.type_of(source)
        vector = _channel_vector(constant, ttype.shape[-1], ttype.rank)
        if vector is None or graph.type_of(affine.outputs[0]).shape != ttype.shape:
            continue
        with np.errstate(over="ignore", invalid="ignore"):  # huge or non-finite weights from a file fold to
            folded = FOLDERS[layer.op](graph, layer, kind, vector)  # inf/NaN, what the unfolded graph computes
        if folded:
            # the layer now computes the affine's result: it takes over the affine's output name
            result = affine.outputs[0]
            graph.remove_nodes([affine])
            layer.outputs[0] = result
            graph.tensors[result] = Tensor(result, ttype)
            del graph.tensors[source]
            return True
    return False


def fold_channel_affine(graph: Graph) -> bool:
    changed = False
    progress = True
    while progress:
        progress = False
        producers, consumers = graph.producers(), graph.consumers()
        for affine in [n for n in graph.nodes if has_fact(n.op, "channel_affine") and len(n.inputs) == 2]:
            if _fold_one(graph, affine, producers, consumers):
                progress = changed = True
                break
    if changed:
        graph.prune()
    return changed
