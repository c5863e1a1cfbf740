"""The select stage decides how a QConv's weights are stored and what replaces its biases (integer_conv.py
``qconv_params``, integer_conv_weights.py ``weights_layout``, ``weights_table``); the pack stage lays exactly that
out, and the kernels read the choice instead of guessing from the weights' dtype or the biases' length."""

from __future__ import annotations

import numpy as np

from pegasus.exporters.glow.pipeline import schedule
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ops.registry import make_attrs

RNG = np.random.default_rng(29)
REQUANT = {"multiplier": (1 << 30,), "shift": (44,), "out_zero_point": 0, "out_dtype": "int8", "rounding": "tflite",
           "channels_last": True}


def _constant(graph: Graph, name: str, value: np.ndarray) -> str:
    graph.tensors[name] = Tensor.constant(name, value)
    return name


def network() -> Graph:
    """conv0 (3x3, 8 -> 8) with its 2x2 MaxPool, conv1 (3x3, 8 -> 8), a depthwise dw (3x3 over 8 channels) and
    a dense layer (1x1 over one position), all channels last with int32 biases."""
    graph = Graph("choices")
    graph.tensors["x"] = Tensor("x", TensorType((1, 8, 8, 8), DType.INT8))
    graph.inputs.append("x")
    shapes = {"y0": (1, 8, 8, 8), "p0": (1, 4, 4, 8), "y1": (1, 4, 4, 8), "y2": (1, 4, 4, 8)}
    for name, shape in shapes.items():
        graph.tensors[name] = Tensor(name, TensorType(shape, DType.INT8))
    nodes = []
    for name, source, out, w_shape, attrs in (
            ("conv0", "x", "y0", (8, 8, 3, 3), {"pads": (1, 1, 1, 1)}),
            ("conv1", "p0", "y1", (8, 8, 3, 3), {"pads": (1, 1, 1, 1)}),
            ("dw", "y1", "y2", (8, 1, 3, 3), {"pads": (1, 1, 1, 1), "group": 8})):
        w = _constant(graph, f"{name}_w", RNG.integers(-127, 127, w_shape, endpoint=True).astype(np.int8))
        b = _constant(graph, f"{name}_b", RNG.integers(-300, 300, w_shape[0]).astype(np.int32))
        nodes.append(Node(name, "QConv", make_attrs("QConv", **REQUANT, **attrs), [source, w, b], [out]))
        if name == "conv0":
            nodes.append(Node("pool0", "MaxPool", make_attrs("MaxPool", kernel_shape=(2, 2), strides=(2, 2),
                                                             channels_last=True), ["y0"], ["p0"]))
    graph.nodes = nodes
    graph.outputs = ["y2"]
    return graph


def choices(cpu: str) -> tuple[Graph, dict[str, tuple[str, dict]]]:
    """(the packed graph, per layer's head: its implementation and parameters) on ``cpu``."""
    done = schedule(network(), resolve_target("arm", cpu))
    return done.graph, {layer.nodes[0].name: (choice.impl, dict(choice.params))
                        for layer, choice in zip(done.layers, done.choices)}


def test_choices_on_a_dsp_cpu_say_what_is_laid():
    graph, chosen = choices("cortex-m7")
    assert chosen["conv0"] == ("QConv+group", {"weights": "bytes", "table": None})     # its kernel reads bytes
    impl, params = chosen["conv1"]
    assert impl == "qconv.im2col" and params["weights"] == "pairs"
    node = {n.name: n for n in graph.nodes}
    assert graph.value_of(node["conv1"].inputs[1]).dtype == np.int32                  # 16-bit pairs
    bias = graph.value_of(node["conv1"].inputs[2])
    pairs, depth = 4, 3 * 3 * 8
    want = {"tile": pairs * (depth + 9), "block": 6 * pairs, "folded_block": 8 * pairs}
    assert params["table"] in want and bias.size == want[params["table"]]
    impl, params = chosen["dw"]
    assert impl == "qconv.depthwise_dsp" and params["weights"] == "pairs"
    assert graph.value_of(node["dw"].inputs[1]).dtype == np.int32
    assert graph.value_of(node["dw"].inputs[2]).size == (4 * 8 if params["table"] == "depthwise" else 8)


def test_choices_without_dsp_keep_bytes():
    graph, chosen = choices("cortex-m0")
    assert {name: params for name, (_, params) in chosen.items()} == {
        name: {"weights": "bytes", "table": None} for name in ("conv0", "conv1", "dw")}
    assert all(graph.value_of(n.inputs[1]).dtype == np.int8 for n in graph.nodes if n.op == "QConv")
