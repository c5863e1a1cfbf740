"""Hybrid precision (Acuity guide §3.5): the graph with ``DtypeConverter`` layers at every place where
a tensor crosses from one precision to another, written as NAME.quantize.json.

A layer's precision is its entry in customized_quantize_layers (float32 or dynamic_fixed_point-i16)
or else the model's scheme; graph inputs have the model's. Each tensor read by a layer of another
precision than its producer's gets one converter per target precision, so a connected subgraph set
to float32 stays float inside and converts only at its borders.
"""

from __future__ import annotations

import copy

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ops.registry import make_attrs
from pegasus.quantizers.schemes import Scheme


def precision_name(scheme: Scheme | None) -> str:
    if scheme is None:
        return "float32"
    if scheme.quantizer == "dynamic_fixed_point" and scheme.qtype == "i16":
        return "dynamic_fixed_point-i16"
    return f"{scheme.quantizer}-{scheme.qtype}"


def insert_converters(graph: Graph, model: Scheme, custom: dict[str, str]) -> Graph:
    """A copy of ``graph`` (without earlier converters) with converters at the precision boundaries."""
    hybrid = copy.deepcopy(graph)
    _remove_converters(hybrid)
    default = precision_name(model)

    def precision_of(node: Node | None) -> str:
        return default if node is None else custom.get(node.name, default)

    producers = hybrid.producers()
    converted: dict[tuple[str, str], str] = {}
    nodes: list[Node] = []
    for node in hybrid.nodes:
        target = precision_of(node)
        for index, name in enumerate(node.inputs):
            if not name or hybrid.value_of(name) is not None:
                continue
            source = precision_of(producers.get(name))
            if source == target:
                continue
            key = (name, target)
            if key not in converted:
                out = hybrid.unique_tensor_name(f"{name}_to_{target.replace('-', '_')}")
                hybrid.tensors[out] = Tensor(out, hybrid.type_of(name))
                layer = hybrid.unique_node_name(f"dtype_converter_{name}_{target.replace('-', '_')}")
                nodes.append(Node(layer, "DtypeConverter",
                                  make_attrs("DtypeConverter", from_precision=source, to_precision=target),
                                  [name], [out]))
                converted[key] = out
            node.inputs[index] = converted[key]
        nodes.append(node)
    hybrid.nodes = nodes
    return hybrid


def without_converters(graph: Graph) -> Graph:
    """A copy of ``graph`` without DtypeConverter layers: the model a hybrid graph was made from (NAME.json)."""
    clean = copy.deepcopy(graph)
    _remove_converters(clean)
    return clean


def converted_tensor(name: str) -> str:
    """The tensor a converter's output (named ``TENSOR_to_PRECISION`` above) converts; '' for other names."""
    return name.rpartition("_to_")[0]


def _remove_converters(graph: Graph) -> None:
    for node in [n for n in graph.nodes if n.op == "DtypeConverter"]:
        graph.rename_uses(node.outputs[0], node.inputs[0])
        graph.nodes.remove(node)
        graph.tensors.pop(node.outputs[0], None)
