"""From calibrated ranges to a quantization table: which scheme each tensor gets.

A tensor takes the scheme of the layer producing it (its customized precision, or the model's);
weights and biases follow the layer reading them. Per-channel weights are quantized along their
output-channel axis (the op's ``weight_axis``, pegasus.ops.facts). Ops that only move values (Reshape,
MaxPool, ...: the ``tied`` fact) give their output the input's grid, so they run on integers unchanged.
Biases are int32 at ``s_in * s_w``, or with ``int8_bias`` (Glow's -quantization-precision-bias=Int8) 8-bit on
their own grid of the layer's 8-bit scheme, which the lowering rescales into the accumulator as Glow does.
"""

from __future__ import annotations

import copy

import numpy as np

from pegasus.ir import serialize
from pegasus.ir.graph import Graph, Node
from pegasus.ops import facts
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.quantizers import schemes
from pegasus.quantizers.schemes import Scheme


def weight_axis(node: Node, graph: Graph, index: int) -> int | None:
    """The output-channel axis of input ``index`` when it is the layer's weight tensor, else None."""
    return facts.weight_axis(node.op, node.attrs, index, graph.type_of(node.inputs[index]).rank)


def is_bias(node: Node, index: int) -> bool:
    return facts.is_bias(node.op, index)


def layer_scheme(node: Node | None, model: Scheme, custom: dict[str, str]) -> Scheme | None:
    """The scheme of a layer: None = float32."""
    if node is None or node.name not in custom:
        return model
    return Scheme.parse_custom(custom[node.name])


def float_entry(lo: float, hi: float) -> TensorQuant:
    return TensorQuant("float32", "float32", "layer", [lo], [hi])


def same_precision(a: TensorQuant, b: TensorQuant) -> bool:
    """Whether two entries put a tensor on the same kind of grid (dtype, qtype, per tensor or per channel)."""
    return (a.dtype, a.qtype, a.method) == (b.dtype, b.qtype, b.method)


def build_table(graph: Graph, ranges: dict[str, tuple[float, float]], model: Scheme, *, algorithm: str,
                digest: str, custom: dict[str, str] | None = None,
                keep: dict[str, TensorQuant] | None = None, int8_bias: bool = False) -> QuantTable:
    """Quantization parameters of every tensor of ``graph``.

    ``ranges`` holds the (min, max) of every activation, and may hold weights' too (a table's, so that
    hand-edited weight ranges count when a weight changes precision). An entry of ``keep`` (an existing
    table) is kept as it is when the tensor's precision is unchanged, else recomputed from the range; a
    bias entry is kept only when its layer's input and weight entries are. ``int8_bias``: the biases of 8-bit
    layers get an 8-bit grid of their own values' range in the layer's scheme instead of int32 at s_in * s_w.
    """
    custom = dict(custom or {})
    keep = keep or {}
    tensors: dict[str, TensorQuant] = {}

    def put(name: str, entry: TensorQuant) -> None:
        old = keep.get(name)
        tensors[name] = old if old is not None and same_precision(old, entry) else entry

    def weight(name: str, value: np.ndarray, scheme: Scheme | None, axis: int | None) -> TensorQuant:
        lo, hi = ranges.get(name, (float(value.min(initial=0)), float(value.max(initial=0))))
        if scheme is None:
            return float_entry(lo, hi)
        entry = scheme.weight(value, axis)
        return scheme.activation(lo, hi) if name in ranges and entry.method == "layer" else entry

    for name in graph.inputs:
        if name in ranges:
            put(name, model.activation(*ranges[name]))
    for node in graph.nodes:
        scheme = layer_scheme(node, model, custom)
        if node.op == "DtypeConverter":
            scheme = Scheme.parse_custom(node.attrs.to_precision) if node.attrs.to_precision in (
                "float32", "dynamic_fixed_point-i16") else model
        for out in node.outputs:
            if not out or out not in ranges:
                continue
            lo, hi = ranges[out]
            source = node.inputs[0] if node.inputs else ""
            if scheme is None:
                put(out, float_entry(lo, hi))
            elif facts.has_fact(node.op, "tied") and source in tensors and tensors[source].is_integer:
                put(out, copy.deepcopy(tensors[source]))
            else:
                put(out, scheme.activation(lo, hi))
        for index, name in enumerate(node.inputs):
            value = graph.value_of(name) if name else None
            if value is None or not value.dtype.kind == "f" or name in tensors:
                continue
            if scheme is not None and is_bias(node, index):
                continue  # after the weights, below
            put(name, weight(name, value, scheme, weight_axis(node, graph, index)))
        if scheme is not None and not scheme.is_float:
            for index, name in enumerate(node.inputs):
                if name and is_bias(node, index) and graph.value_of(name) is not None and name not in tensors:
                    x, w = tensors.get(node.inputs[0]), tensors.get(node.inputs[1])
                    if x is not None and w is not None and x.is_integer and w.is_integer:
                        value = graph.value_of(name)
                        entry = (scheme.activation(float(value.min(initial=0)), float(value.max(initial=0)))
                                 if int8_bias and scheme.bits == 8 else
                                 schemes.bias(value, float(x.scale[0]), np.asarray(w.scale)))
                        sources_kept = x is keep.get(node.inputs[0]) and w is keep.get(node.inputs[1])
                        tensors[name] = keep[name] if sources_kept and name in keep and same_precision(
                            keep[name], entry) else entry
    return QuantTable(quantizer=model.quantizer, qtype=model.qtype, algorithm=algorithm, graph_digest=digest,
                      tensors=tensors, customized_layers=custom, layer_digests=serialize.layer_digests(graph),
                      float_graph_digest=digest)


def refresh_biases(graph: Graph, table: QuantTable) -> None:
    """Recompute bias entries (int32 at s_in * s_w) after input or weight grids changed (e.g. --MLE); an 8-bit
    bias is on a grid of its own values, which does not depend on them."""
    for node in graph.nodes:
        for index, name in enumerate(node.inputs):
            if not (name and is_bias(node, index) and name in table.tensors and graph.value_of(name) is not None):
                continue
            if table.tensors[name].is_integer and table.tensors[name].numpy_dtype in ("int8", "uint8"):
                continue
            x, w = table.tensors.get(node.inputs[0]), table.tensors.get(node.inputs[1])
            if x is not None and w is not None and x.is_integer and w.is_integer:
                table.tensors[name] = schemes.bias(graph.value_of(name), float(x.scale[0]), np.asarray(w.scale))
