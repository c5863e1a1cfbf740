"""Pointwise (1x1, unpadded) float convolutions on hosted targets (kernels/conv.py ``_pointwise_correlation``):
one correlation over the flattened positions, and for a strided one the input positions it reads gathered into
a planned workspace first (``conv_workspace``; none on Cortex-M). Against onnxruntime: planes whose flattened
length leaves a remainder tile, strides per axis, groups, batches, no bias, a fused Relu, 1-D, float64, and
channel counts that split into several runs of channel blocks.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.codegen import layer_workspaces
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from tests.exporters.host_runner import run_bundle_host

RNG = np.random.default_rng(31)

#: id: (x shape, out channels, conv attrs, bias, relu, dtype)
CASES = {
    "7x7-plane": ((1, 40, 7, 7), 24, {}, True, True, np.float32),
    "stride-2": ((1, 16, 14, 14), 20, {"strides": [2, 2]}, True, False, np.float32),
    "stride-2x3-odd": ((2, 6, 15, 13), 9, {"strides": [2, 3]}, False, True, np.float32),
    "grouped-strided": ((1, 12, 9, 10), 8, {"strides": [3, 2], "group": 4}, True, False, np.float32),
    "1d-strided": ((1, 5, 23), 7, {"strides": [2]}, True, False, np.float32),
    "f64-strided": ((1, 4, 8, 9), 5, {"strides": [2, 2]}, True, True, np.float64),
    "many-channel-runs": ((1, 600, 5, 6), 130, {}, True, False, np.float32),
}


def _model(x_shape, out_channels, attrs, bias, relu, dtype):
    group = attrs.get("group", 1)
    w = (RNG.standard_normal((out_channels, x_shape[1] // group) + (1,) * (len(x_shape) - 2)) / 4).astype(dtype)
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(out_channels).astype(dtype), "b"))
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c" if relu else "y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = helper.make_graph(nodes, "pointwise", [helper.make_tensor_value_info("x", kind, x_shape)],
                              [helper.make_tensor_value_info("y", kind, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _numpy(model, x: np.ndarray) -> np.ndarray:
    """The pointwise convolution in NumPy: the strided input positions times the weights, per group."""
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    conv = model.graph.node[0]
    strides = next((list(a.ints) for a in conv.attribute if a.name == "strides"), [1] * (x.ndim - 2))
    picked = x[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
    w = values["w"].reshape(values["w"].shape[:2])
    y = np.einsum("oc,nc...->no...", w, picked) + values["b"].reshape((-1,) + (1,) * (x.ndim - 2))
    return np.maximum(y, 0) if len(model.graph.node) > 1 else y


@pytest.mark.parametrize("key", list(CASES))
def test_matches_onnxruntime(key, tmp_path):
    model = _model(*CASES[key])
    x = RNG.uniform(-1, 1, CASES[key][0]).astype(CASES[key][5])
    expected = _numpy(model, x) if x.dtype == np.float64 else ort.InferenceSession(   # ORT: no float64 Conv
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph = import_onnx(model, name="pointwise")
    actual = run_bundle_host(graph, {"x": x}, workdir=tmp_path)["y"]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_strided_gathers_its_inputs_on_hosts_only():
    x_shape, out_channels, attrs, *rest = CASES["stride-2x3-odd"]
    lowered = lower_for_export(import_onnx(_model(x_shape, out_channels, attrs, *rest), name="pointwise"))
    layers = fuse_layers(lowered)
    assert [layer.op for layer in layers] == ["Conv_Relu"]
    gathered = 2 * 6 * 8 * 5 * 4     # N * C * ceil(15/2) * ceil(13/3) float32
    assert layer_workspaces(lowered, layers, resolve_target(None, None, None, "pic")) == {0: gathered}
    assert layer_workspaces(lowered, layers, resolve_target("arm", "cortex-m7")) == {}
