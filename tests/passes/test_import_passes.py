"""Import passes checked against onnxruntime: constant folding of shape chains, BatchNormalization
folded into Conv/Gemm/MatMul, Identity/Dropout removed, and subgraph cuts with --inputs/--outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter
from tests.support.onnx_passes import check_against_onnxruntime, make_model, onnxruntime_outputs

RNG = np.random.default_rng(0)


def test_shape_chain_folds_into_one_reshape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    inits = [("zero", np.array(0, np.int64)), ("axes0", np.array([0], np.int64)),
             ("minus1", np.array([-1], np.int64))]
    model = make_model(nodes, [x], [y], inits)
    feeds = {"x": RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)}
    graph = check_against_onnxruntime(model, feeds, symbols={"N": 2})
    assert [n.op for n in graph.nodes] == ["Reshape", "Relu"]
    assert graph.nodes[0].attrs.shape == (2, 48)


@pytest.mark.parametrize("producer", ["Conv", "Gemm", "MatMul"])
def test_batchnorm_folds_into_linear_layer(producer):
    channels = 4
    bn_inits = [("scale", RNG.uniform(0.5, 2, channels).astype(np.float32)),
                ("bias", RNG.standard_normal(channels).astype(np.float32)),
                ("mean", RNG.standard_normal(channels).astype(np.float32)),
                ("var", RNG.uniform(0.1, 2, channels).astype(np.float32))]
    if producer == "Conv":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])
        inits = [("w", RNG.standard_normal((channels, 3, 3, 3)).astype(np.float32)),
                 ("b", RNG.standard_normal(channels).astype(np.float32))]
        first = helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1])
        feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    elif producer == "Gemm":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
        inits = [("w", RNG.standard_normal((channels, 5)).astype(np.float32)),
                 ("b", RNG.standard_normal(channels).astype(np.float32))]
        first = helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, beta=0.5)
        feeds = {"x": RNG.standard_normal((2, 5)).astype(np.float32)}
    else:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
        inits = [("w", RNG.standard_normal((5, channels)).astype(np.float32))]
        first = helper.make_node("MatMul", ["x", "w"], ["h"])
        feeds = {"x": RNG.standard_normal((2, 5)).astype(np.float32)}
    nodes = [first, helper.make_node("BatchNormalization", ["h", "scale", "bias", "mean", "var"], ["bn"],
                                     epsilon=1e-3),
             helper.make_node("Relu", ["bn"], ["y"])]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = check_against_onnxruntime(make_model(nodes, [x], [y], inits + bn_inits), feeds)
    assert "BatchNormalization" not in [n.op for n in graph.nodes]


def test_identity_and_dropout_are_removed():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Dropout", ["b"], ["c"]), helper.make_node("Sigmoid", ["c"], ["d"]),
             helper.make_node("Identity", ["d"], ["y"])]
    feeds = {"x": RNG.standard_normal((1, 8)).astype(np.float32)}
    graph = check_against_onnxruntime(make_model(nodes, [x], [y]), feeds)
    assert [n.op for n in graph.nodes] == ["Relu", "Sigmoid"]
    assert graph.outputs == ["y"] and graph.nodes[-1].outputs == ["y"]


def test_cut_subgraph_between_inputs_and_outputs(demo_onnx):
    model = onnx.load(str(demo_onnx))
    names = [n.output[0] for n in model.graph.node]
    pool1, relu = names[1], [n.output[0] for n in model.graph.node if n.op_type == "Relu"][0]
    full = onnx.load(str(demo_onnx))
    full.graph.output.extend([helper.make_tensor_value_info(pool1, TensorProto.FLOAT, None),
                              helper.make_tensor_value_info(relu, TensorProto.FLOAT, None)])
    image = RNG.uniform(0, 1, (1, 1, 28, 28)).astype(np.float32)
    _, pooled, expected = onnxruntime_outputs(full, {"data": image})
    graph = import_onnx(model, inputs=[pool1], outputs=[relu], input_shapes=[(1, 20, 12, 12)])
    assert [n.op for n in graph.nodes] == ["Conv", "MaxPool", "Flatten", "Gemm", "Relu"]
    np.testing.assert_allclose(interpreter.run(graph, {pool1: pooled})[relu], expected, rtol=1e-5, atol=1e-5)
