"""The light ONNX models and single-op graphs the end-to-end bundle tests run, and the output spec of a
graph for the toolchain harness."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


RNG = np.random.default_rng(7)


def output_spec(graph):
    return {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}


LIGHT = sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))


def single_op(op: str, inputs: dict[str, tuple], attrs: dict | None = None, consts: dict | None = None,
               out_shape=None):
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    inits = [numpy_helper.from_array(v, n) for n, v in (consts or {}).items()]
    node = helper.make_node(op, list(inputs) + list(consts or {}), ["y"], **(attrs or {}))
    graph = helper.make_graph([node], op.lower(), infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                         out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


SINGLE_OPS = {
    "Conv": single_op("Conv", {"x": (1, 3, 9, 9)}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                       {"w": randn(4, 3, 3, 3), "b": randn(4)}),
    "ConvDepthwise": single_op("Conv", {"x": (1, 4, 8, 8)}, {"group": 4}, {"w": randn(4, 1, 3, 3)}),
    "ConvTranspose": single_op("ConvTranspose", {"x": (1, 2, 4, 4)}, {"strides": [2, 2]}, {"w": randn(2, 3, 3, 3)}),
    "Gemm": single_op("Gemm", {"x": (2, 8)}, {"transB": 1}, {"w": randn(5, 8), "b": randn(5)}),
    "MatMul": single_op("MatMul", {"x": (3, 6)}, None, {"w": randn(6, 4)}),
    "MaxPool": single_op("MaxPool", {"x": (1, 2, 7, 7)}, {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "AveragePool": single_op("AveragePool", {"x": (1, 2, 6, 6)}, {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}),
    "GlobalAveragePool": single_op("GlobalAveragePool", {"x": (1, 3, 5, 5)}),
    "Relu": single_op("Relu", {"x": (2, 17)}),
    "Sigmoid": single_op("Sigmoid", {"x": (2, 17)}),
    "Tanh": single_op("Tanh", {"x": (2, 17)}),
    "Exp": single_op("Exp", {"x": (2, 17)}),
    "Erf": single_op("Erf", {"x": (2, 17)}),
    "HardSwish": single_op("HardSwish", {"x": (2, 17)}),
    "LeakyRelu": single_op("LeakyRelu", {"x": (2, 17)}, {"alpha": 0.2}),
    "Add": single_op("Add", {"x": (2, 3, 4)}, None, {"b": randn(3, 1)}),
    "Mul": single_op("Mul", {"x": (2, 3, 4), "z": (2, 3, 4)}),
    "Div": single_op("Div", {"x": (4, 5)}, None, {"d": RNG.uniform(1, 2, (5,)).astype(np.float32)}),
    "Softmax": single_op("Softmax", {"x": (3, 10)}),
    "Transpose": single_op("Transpose", {"x": (2, 3, 4)}, {"perm": [2, 0, 1]}),
    "Concat": single_op("Concat", {"x": (2, 3), "z": (2, 5)}, {"axis": 1}),
    "ReduceMean": single_op("ReduceMean", {"x": (2, 3, 4)}, {"axes": [1], "keepdims": 0}),
    "BatchNormalization": single_op("BatchNormalization", {"x": (1, 3, 4, 4)}, None,
                                     {"s": randn(3), "bias": randn(3), "m": randn(3),
                                      "v": RNG.uniform(0.5, 1, 3).astype(np.float32)}),
    "LayerNormalization": single_op("LayerNormalization", {"x": (2, 6)}, None, {"g": randn(6), "bb": randn(6)}),
    "Resize": single_op("Resize", {"x": (1, 1, 3, 3)}, {"mode": "linear"},
                         {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}),
}
