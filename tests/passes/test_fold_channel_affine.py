"""The per-channel affine fold (pegasus/passes/fold_channel_affine.py): a channels-last Conv/ConvTranspose or a
Gemm followed by Mul/Add/Sub of constants along the last axis becomes one layer, and computes what onnxruntime
computes for the same layers channels first (the constants reshaped to (C, 1, 1)); constants along another
axis, or a layer output read twice, are left alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes
from pegasus.runtime.interpreter import run

RNG = np.random.default_rng(3)


def _onnxruntime(nodes, x, initializers, out="y"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _graph(x_shape):
    graph = Graph("g")
    builder = GraphBuilder(graph)
    builder.add_input("x", TensorType(x_shape, DType.FLOAT32))
    return graph, builder


def _vector(n):
    return RNG.uniform(0.5, 1.5, n).astype(np.float32)


def test_conv_bias_then_batchnorm_fold_into_one_conv():
    x = RNG.standard_normal((2, 6, 7, 3)).astype(np.float32)      # NHWC
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias, scale, shift = _vector(4), _vector(4), _vector(4) - 1
    graph, b = _graph(x.shape)
    conv = b.emit("Conv", ["x", b.add_constant("w", w)], {"channels_last": True, "auto_pad": "SAME_UPPER"},
                  name="conv")[0]
    biased = b.emit("Add", [conv, b.add_constant("bias", bias)], name="bias_add")[0]
    scaled = b.emit("Mul", [b.add_constant("scale", scale.reshape(1, 1, 1, 4)), biased], name="bn_mul")[0]
    b.emit("Sub", [scaled, b.add_constant("shift", shift)], name="bn_sub", outputs=["y"])
    graph.outputs = ["y"]
    run_import_passes(graph)
    assert [n.op for n in graph.nodes] == ["Conv"] and graph.nodes[0].outputs == ["y"]

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "bias"], ["b"]), helper.make_node("Mul", ["b", "scale"], ["m"]),
             helper.make_node("Sub", ["m", "shift"], ["y"])]
    per_channel = {k: v.reshape(4, 1, 1) for k, v in (("bias", bias), ("scale", scale), ("shift", shift))}
    want = _onnxruntime(nodes, x.transpose(0, 3, 1, 2).copy(), {"w": w, **per_channel}).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_grouped_conv_transpose_scale_folds():
    x = RNG.standard_normal((1, 4, 5, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)      # (C, M/group, kh, kw), group 2 -> M = 6
    scale, shift = _vector(6), _vector(6)
    graph, b = _graph(x.shape)
    deconv = b.emit("ConvTranspose", ["x", b.add_constant("w", w)], {"channels_last": True, "group": 2,
                                                                      "strides": (2, 2)}, name="deconv")[0]
    scaled = b.emit("Mul", [deconv, b.add_constant("scale", scale)], name="mul")[0]
    b.emit("Add", [scaled, b.add_constant("shift", shift)], name="add", outputs=["y"])
    graph.outputs = ["y"]
    run_import_passes(graph)
    assert [n.op for n in graph.nodes] == ["ConvTranspose"]

    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=2, strides=[2, 2]),
             helper.make_node("Mul", ["c", "scale"], ["m"]), helper.make_node("Add", ["m", "shift"], ["y"])]
    inits = {"w": w, "scale": scale.reshape(6, 1, 1), "shift": shift.reshape(6, 1, 1)}
    want = _onnxruntime(nodes, x.transpose(0, 3, 1, 2).copy(), inits).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_gemm_shift_and_scale_fold():
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    w = RNG.standard_normal((4, 5)).astype(np.float32)
    c, scale, shift = _vector(4), _vector(4), _vector(4)
    graph, b = _graph(x.shape)
    y = b.emit("Gemm", ["x", b.add_constant("w", w), b.add_constant("c", c)], {"transB": 1, "beta": 0.5},
               name="fc")[0]
    y = b.emit("Add", [b.add_constant("shift", shift), y], name="add")[0]
    b.emit("Mul", [y, b.add_constant("scale", scale)], name="mul", outputs=["y"])
    graph.outputs = ["y"]
    run_import_passes(graph)
    assert [n.op for n in graph.nodes] == ["Gemm"]
    want = (0.5 * c + x @ w.T + shift) * scale
    np.testing.assert_allclose(run(graph, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_not_folded_off_the_last_axis_or_when_read_twice():
    x = RNG.standard_normal((1, 4, 4, 2)).astype(np.float32)
    w = RNG.standard_normal((2, 2, 1, 1)).astype(np.float32)
    graph, b = _graph(x.shape)
    conv = b.emit("Conv", ["x", b.add_constant("w", w)], {"channels_last": True}, name="conv")[0]
    across_rows = b.emit("Mul", [conv, b.add_constant("rows", _vector(4).reshape(4, 1, 1))], name="rows")[0]
    conv2 = b.emit("Conv", [across_rows, b.add_constant("w2", w)], {"channels_last": True}, name="conv2")[0]
    shifted = b.emit("Add", [conv2, b.add_constant("shift", _vector(2))], name="shift")[0]
    b.emit("Mul", [shifted, conv2], name="square", outputs=["y"])
    graph.outputs = ["y"]
    run_import_passes(graph)
    assert [n.op for n in graph.nodes] == ["Conv", "Mul", "Conv", "Add", "Mul"]
