"""Layers appended to an integer channels-last graph for the Cortex-M DSP depthwise and pointwise tests: a 1x1
QConv and a QConv of given geometry."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ops.registry import get_op, make_attrs

RNG = np.random.default_rng(1717)


def conv1x1(graph: Graph, name: str, x: str, outputs: int) -> str:
    channels = graph.type_of(x).shape[-1]
    w = Tensor.constant(f"{name}_w", RNG.integers(-127, 127, (outputs, channels, 1, 1), endpoint=True).astype(np.int8))
    b = Tensor.constant(f"{name}_b", RNG.integers(-2000, 2000, outputs).astype(np.int32))
    graph.tensors[w.name], graph.tensors[b.name] = w, b
    attrs = make_attrs("QConv", multiplier=(1 << 30,), shift=(40,), out_zero_point=0, out_dtype="int8",
                       rounding="tflite", channels_last=True)
    return append_layer(graph, name, attrs, [x, w.name, b.name])


def append_layer(graph: Graph, name: str, attrs, inputs: list[str]) -> str:
    out = get_op("QConv").infer(attrs, [graph.type_of(n) for n in inputs])[0]
    graph.tensors[f"{name}_y"] = Tensor(f"{name}_y", out)
    graph.nodes.append(Node(name, "QConv", attrs, inputs, [f"{name}_y"]))
    return f"{name}_y"
