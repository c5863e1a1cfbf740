"""Pointwise (1x1, unpadded) and strided float convolutions on hosted targets (kernels/reference/conv.py): a pointwise
one is one correlation over the flattened positions (``_pointwise_correlation``), a strided pointwise one reads the
input positions gathered into a planned workspace first, and any other Conv strided along its last axis reads
each tap's run of that axis gathered (zeros in the padding) into the workspace (``_row_taps_correlation``);
none of these workspaces on Cortex-M (``conv_workspace``). Against onnxruntime (NumPy for float64): planes whose
flattened length leaves a remainder tile, strides per axis, dilations, asymmetric pads, taps wholly in the
padding, groups, batches, no bias, a fused Relu, 1-D, float64, and channel counts that split into several runs
of channel blocks.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.codegen import layer_workspaces
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.target import HOST_TRIPLES, Target, resolve_target
from pegasus.importers.onnx.loader import import_onnx
from tests.support.host_runner import run_bundle_host

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
    "alexnet-11x11-stride-4": ((1, 3, 47, 51), 10, {"kernel_shape": [11, 11], "strides": [4, 4]}, True, True,
                               np.float32),
    "3x3-stride-2-pad-1": ((1, 8, 14, 13), 12, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                           True, False, np.float32),
    "5x3-strides-2x3-dilated-asym-pads": ((2, 4, 17, 19), 6, {"kernel_shape": [5, 3], "strides": [2, 3],
                                                              "dilations": [1, 2], "pads": [2, 0, 1, 3]},
                                          False, True, np.float32),
    "taps-in-padding": ((1, 3, 6, 5), 4, {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 4, 1, 4]},
                        True, False, np.float32),
    "grouped-3x3-stride-2": ((1, 6, 11, 11), 9, {"kernel_shape": [3, 3], "strides": [2, 2], "group": 3,
                                                 "pads": [1, 1, 1, 1]}, True, False, np.float32),
    "1d-dilated-stride-3": ((1, 4, 40), 5, {"kernel_shape": [4], "strides": [3], "dilations": [2], "pads": [3, 1]},
                            True, False, np.float32),
    "f64-3x3-stride-2": ((1, 3, 9, 10), 4, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                         True, False, np.float64),
}


def _model(x_shape, out_channels, attrs, bias, relu, dtype):
    group = attrs.get("group", 1)
    kernel = tuple(attrs.get("kernel_shape", (1,) * (len(x_shape) - 2)))
    w = (RNG.standard_normal((out_channels, x_shape[1] // group) + kernel) / 4).astype(dtype)
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
    """A 2-D, ungrouped, undilated convolution with bias in NumPy: per tap, the strided window of the padded
    input times that tap's weights."""
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    attrs = {a.name: list(a.ints) for a in model.graph.node[0].attribute}
    w = values["w"]
    (sh, sw), pads = attrs.get("strides", [1, 1]), attrs.get("pads", [0, 0, 0, 0])
    padded = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    ho, wo = (padded.shape[2] - w.shape[2]) // sh + 1, (padded.shape[3] - w.shape[3]) // sw + 1
    y = np.zeros((x.shape[0], w.shape[0], ho, wo)) + values["b"].reshape(-1, 1, 1)
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            window = padded[:, :, i:i + (ho - 1) * sh + 1:sh, j:j + (wo - 1) * sw + 1:sw]
            y += np.einsum("oc,nchw->nohw", w[:, :, i, j], window)
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


def test_strided_rows_are_gathered_per_tap_on_hosts_only():
    """Without AVX (x86-64's SSE2, AArch64) each tap's run of the last axis; with AVX every tap of every
    input channel at every output position (conv_plane.py ``im2col_bytes``), compiled for those CPUs
    whatever runs the test; Cortex-M gathers nothing."""
    x_shape, out_channels, attrs, *rest = CASES["5x3-strides-2x3-dilated-asym-pads"]
    lowered = lower_for_export(import_onnx(_model(x_shape, out_channels, attrs, *rest), name="strided"))
    layers = fuse_layers(lowered)
    out = (19 + 0 + 3 - (3 - 1) * 2 - 1) // 3 + 1        # 5 positions along the last axis
    rows = (17 + 2 + 1 - (5 - 1) - 1) // 2 + 1            # 8 output rows
    gathered = 2 * 4 * 17 * 3 * out * 4                   # N * C * H * taps * out float32
    every_tap = 2 * 4 * 5 * 3 * rows * out * 4            # N * C * taps * positions float32
    for cpu, size in (("x86-64", gathered), ("x86-64-v3", every_tap), ("x86-64-v4", every_tap)):
        target = Target("x86_64", cpu, HOST_TRIPLES["x86_64"], "hard", "pic")
        assert layer_workspaces(lowered, layers, target) == {0: size}, cpu
    assert layer_workspaces(lowered, layers, resolve_target("aarch64", "cortex-a53")) == {0: gathered}
    assert layer_workspaces(lowered, layers, resolve_target("arm", "cortex-m7")) == {}
