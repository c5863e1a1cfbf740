"""The float rewrites of the export (exporters/glow/lower.py ``float_rewrites``): a per-channel Mul/Add/Sub
after a channels-first Conv or a BatchNormalization folds into its weights, and an AveragePool without
padding after a 1x1 Conv runs before it; then a BatchNormalization and the unary layers after it are one
fused layer (fuse.py, kernels/reference/normalization.py). The bundles must give what onnxruntime gives for the model
as written (rtol 1e-4 / atol 1e-5), and the cases that must not be rewritten keep their layers (and still
match).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.importers.onnx.loader import import_onnx
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(5)


def _const(name: str, *shape: int):
    return numpy_helper.from_array(RNG.uniform(-1, 1, shape).astype(np.float32), name)


def _model(nodes, inits, shape, output: str):
    graph = helper.make_graph(nodes, "rewrites", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _densenet_like():
    """BatchNormalization -> Mul -> Add -> Relu -> 1x1 Conv -> Mul -> Sub -> Relu -> 3x3 Conv + bias -> Add
    (scalar) -> Relu -> 1x1 Conv + bias -> AveragePool 2x2, as Caffe's DenseNet-121 imports (Scale layers as
    Mul/Add by (C, 1, 1) constants)."""
    inits = [_const("scale", 8), _const("offset", 8), _const("mean", 8),
             numpy_helper.from_array(RNG.uniform(0.5, 2, 8).astype(np.float32), "var"),
             _const("m0", 8, 1, 1), _const("a0", 8, 1, 1), _const("w1", 12, 8, 1, 1), _const("m1", 1, 12, 1, 1),
             _const("s1", 12, 1, 1), _const("w2", 6, 12, 3, 3), _const("b2", 6), _const("a2", 1),
             _const("w3", 4, 6, 1, 1), _const("b3", 4)]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "offset", "mean", "var"], ["n"]),
             helper.make_node("Mul", ["m0", "n"], ["n_m"]), helper.make_node("Add", ["n_m", "a0"], ["n_a"]),
             helper.make_node("Relu", ["n_a"], ["n_r"]),
             helper.make_node("Conv", ["n_r", "w1"], ["c1"]), helper.make_node("Mul", ["c1", "m1"], ["c1_m"]),
             helper.make_node("Sub", ["c1_m", "s1"], ["c1_s"]), helper.make_node("Relu", ["c1_s"], ["c1_r"]),
             helper.make_node("Conv", ["c1_r", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "a2"], ["c2_a"]), helper.make_node("Relu", ["c2_a"], ["c2_r"]),
             helper.make_node("Conv", ["c2_r", "w3", "b3"], ["c3"]),
             helper.make_node("AveragePool", ["c3"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return _model(nodes, inits, (1, 8, 10, 10), "y")


def _kept():
    """What must stay as written: a Mul by a constant varying along a spatial axis, a Sub of the conv's output
    from a constant, a conv output read twice, and AveragePools with padding or after a 3x3 convolution."""
    inits = [_const("w0", 8, 8, 1, 1), _const("row", 1, 1, 10, 1), _const("w1", 8, 8, 1, 1), _const("c", 8, 1, 1),
             _const("w2", 8, 8, 1, 1), _const("k", 8, 1, 1), _const("w3", 8, 8, 1, 1), _const("w4", 8, 8, 3, 3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"]), helper.make_node("Mul", ["c0", "row"], ["m0"]),
             helper.make_node("Conv", ["m0", "w1"], ["c1"]), helper.make_node("Sub", ["c", "c1"], ["s1"]),
             helper.make_node("Conv", ["s1", "w2"], ["c2"]), helper.make_node("Mul", ["c2", "k"], ["m2"]),
             helper.make_node("Add", ["m2", "c2"], ["twice"]),
             helper.make_node("Conv", ["twice", "w3"], ["c3"]),
             helper.make_node("AveragePool", ["c3"], ["p3"], kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                              count_include_pad=1),
             helper.make_node("Conv", ["p3", "w4"], ["c4"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c4"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return _model(nodes, inits, (1, 8, 10, 10), "y")


def _normalized_chains():
    """BatchNormalization -> Sigmoid -> Clip on a (1, 8, 100) tensor (3-D, odd lengths for the vector
    loops), and a BatchNormalization read by a Relu and by the output (not fused)."""
    inits = [_const("scale", 8), _const("offset", 8), _const("mean", 8),
             numpy_helper.from_array(RNG.uniform(0.5, 2, 8).astype(np.float32), "var")]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["x3"]),
             helper.make_node("BatchNormalization", ["x3", "scale", "offset", "mean", "var"], ["n"]),
             helper.make_node("Sigmoid", ["n"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "scale", "offset", "mean", "var"], ["y"]),
             helper.make_node("Relu", ["y"], ["r"])]
    inits += [numpy_helper.from_array(np.array([1, 8, 100], np.int64), "shape"),
              numpy_helper.from_array(np.array(0.55, np.float32), "lo"),
              numpy_helper.from_array(np.array(0.7, np.float32), "hi")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 10, 10))
    graph = helper.make_graph(nodes, "rewrites", [x], [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                                                       for name in ("y", "r")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_batch_normalization_fuses_with_the_unary_layers_after_it(tmp_path):
    graph = import_onnx(_normalized_chains(), name="rewrites")
    assert [layer.op for layer in fuse_layers(lower_for_export(graph))] == [
        "Reshape", "BatchNormalization_Sigmoid_Clip", "BatchNormalization", "Relu"]
    _matches_onnxruntime(_normalized_chains(), tmp_path, ("y", "r"))


def _matches_onnxruntime(model, tmp_path, outputs=("y",)) -> None:
    x = RNG.uniform(-1, 1, (1, 8, 10, 10)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = run_bundle_host(import_onnx(model, name="rewrites"), {"x": x}, workdir=tmp_path)
    for name, expected in zip(outputs, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-5, err_msg=name)


def test_affines_fold_and_the_average_moves_before_the_pointwise_conv():
    lowered = lower_for_export(import_onnx(_densenet_like(), name="rewrites"))
    assert [node.op for node in lowered.nodes] == ["BatchNormalization", "Relu", "Conv", "Relu", "Conv", "Relu",
                                                   "AveragePool", "Conv"]
    pool, conv = lowered.nodes[-2:]
    assert lowered.type_of(pool.outputs[0]).shape == (1, 6, 5, 5) and conv.inputs[0] == pool.outputs[0]
    assert conv.outputs == ["y"]
    assert [layer.op for layer in fuse_layers(lowered)] == ["BatchNormalization_Relu", "Conv_Relu",
                                                             "Conv_Relu_AveragePool", "Conv"]


@pytest.mark.parametrize("make", [_densenet_like, _kept], ids=["folded", "kept"])
def test_rewritten_bundle_matches_onnxruntime(make, tmp_path):
    _matches_onnxruntime(make(), tmp_path)


def test_what_must_not_be_rewritten_keeps_its_layers():
    graph = import_onnx(_kept(), name="rewrites")
    assert [node.op for node in lower_for_export(graph).nodes] == [node.op for node in graph.nodes]
