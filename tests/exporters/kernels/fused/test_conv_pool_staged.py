"""A float Conv fused with a pooling whose windows overlap (kernels/fused/conv_pool.py ``conv_pool_workspace``): on
hosted targets it computes the convolution once into a planned workspace (a max pool: a band of rows of every
channel at a time; an average: a block of channels at a time) and pools from there (the recomputation of the
shared values cost ResNet-50's stem 2.25 times its convolution); Cortex-M keeps pooling from the convolution's
register tiles, in no extra RAM.

Checked: ImageNet stems (7x7 stride 2 + 3x3 stride 2 max pool, SqueezeNet's 3x3 stride 2 + ceil_mode max pool,
an overlapping average) against onnxruntime on the host, with the workspace planned there and not for
Cortex-M7; max pools in bands of 1, 2 and 3 pooled rows over a NaN-filled workspace; and every chain of
test_fusion.py both staged and pooled from registers on the host, against the reference interpreter, under each
register file of test_kernels_conv.py.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.codegen import layer_workspaces
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.kernels.fused import conv_pool as pool_kernels
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter
from tests.support import host_runner
from tests.support.conv_tilings import TILINGS, tiling
from tests.support.fusion_cases import FEEDS, GRAPH
from tests.support.host_runner import run_bundle_host
from tests.support.plane_cases import CPUS, use_cpu

RNG = np.random.default_rng(17)

#: id: (input shape, weight shape, conv attrs, pooling op, pooling attrs)
STEMS = {
    "resnet-stem": ((1, 3, 64, 64), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, "MaxPool",
                    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "squeezenet-stem": ((1, 3, 45, 47), (13, 3, 3, 3), {"strides": [2, 2]}, "MaxPool",
                        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "average-overlap": ((2, 5, 17, 19), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}, "AveragePool",
                        {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1]}),
}


def _stem(x_shape, w_shape, conv, pool, pool_attrs):
    weights = (RNG.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    bias = RNG.standard_normal(w_shape[0]).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **conv), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(pool, ["r"], ["y"], **pool_attrs)]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("key", list(STEMS))
def test_stem_matches_onnxruntime_with_a_workspace_on_the_host_only(key, tmp_path):
    model = _stem(*STEMS[key])
    graph = import_onnx(model, name="stem")
    lowered = lower_for_export(graph)
    layers = fuse_layers(lowered)
    assert [layer.op for layer in layers] == [f"Conv_Relu_{STEMS[key][3]}"]
    host = layer_workspaces(lowered, layers, resolve_target(None, None, None, "pic"))
    assert host and host[0] > 0
    assert layer_workspaces(lowered, layers, resolve_target("arm", "cortex-m7")) == {}
    x = RNG.uniform(-1, 1, STEMS[key][0]).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    actual = run_bundle_host(graph, {"x": x}, workdir=tmp_path)["y"]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


#: id: (input shape, weight shape, conv attrs, pooling attrs) of max pools staged a band of rows at a time
BANDED = {
    "resnet-stem": ((1, 3, 40, 44), (9, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]},
                    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "ceil-mode-odd": ((2, 3, 45, 47), (13, 3, 3, 3), {"strides": [2, 2]},
                      {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "stride-1-shares-two-rows": ((1, 4, 15, 17), (6, 4, 3, 3), {"strides": [1, 2], "pads": [1, 1, 1, 1]},
                                 {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    "uneven-pads-4x4": ((1, 2, 30, 26), (5, 2, 5, 5), {"strides": [2, 2], "pads": [2, 1, 2, 3]},
                        {"kernel_shape": [4, 4], "strides": [3, 2], "pads": [2, 1, 0, 2]}),
}


@pytest.mark.parametrize("band", [1, 2, 3, 0])
@pytest.mark.parametrize("key", list(BANDED))
def test_banded_max_pool_matches_onnxruntime(key, band, monkeypatch, tmp_path):
    """A MaxPool staged a band of the convolution's rows at a time (conv_pool.py ``_emit_banded``): bands of
    1, 2 and 3 pooled rows (``BAND_BYTES`` shrunk to hold them; 0: the default, one band), so the first, the
    middle and the last bands, the rows two bands share and the padding rows are all exercised, with the
    activations (the workspace) filled with NaN before each call."""
    x_shape, w_shape, conv, pool = BANDED[key]
    model = _stem(x_shape, w_shape, conv, "MaxPool", pool)
    graph = import_onnx(model, name="stem")
    lowered = lower_for_export(graph)
    conv_node = next(node for node in lowered.nodes if node.op == "Conv")
    conv_out = lowered.type_of(conv_node.outputs[0]).shape[2:]
    if band:
        kernel, stride = pool["kernel_shape"][0], pool["strides"][0]
        monkeypatch.setattr(pool_kernels, "BAND_BYTES", ((band - 1) * stride + kernel) * w_shape[0] * conv_out[-1] * 4)
        assert pool_kernels._band(next(n for n in lowered.nodes if n.op == "MaxPool"), conv_out, w_shape[0], 4)[0] \
            == band
    calls = []
    original = pool_kernels._emit_banded
    monkeypatch.setattr(pool_kernels, "_emit_banded", lambda *args: calls.append(1) or original(*args))
    x = RNG.uniform(-1, 1, x_shape).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    bundle = host_runner.load_bundle(graph, {"x": x}, tmp_path)
    assert calls, "the pooling was not staged in bands"
    for _ in range(2):
        bundle.buffers[2][:] = 0xFF
        assert bundle() == 0
        np.testing.assert_allclose(bundle.outputs()["y"], expected, rtol=1e-4, atol=1e-5)


def test_non_overlapping_pooling_needs_no_workspace():
    """(Rows of 32: whole tiles on every x86-64, so the convolution does not run over the flattened plane,
    whose fused poolings are staged: test_conv_plane.py.)"""
    model = _stem((1, 3, 16, 32), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, "MaxPool",
                  {"kernel_shape": [2, 2], "strides": [2, 2]})
    lowered = lower_for_export(import_onnx(model, name="stem"))
    assert layer_workspaces(lowered, fuse_layers(lowered), resolve_target(None, None, None, "pic")) == {}


@pytest.mark.parametrize("cpu", list(CPUS))
def test_pooled_rows_visit_every_channel_block_on_hosts(cpu, monkeypatch, tmp_path):
    """A Conv + Relu + 2x2 MaxPool pooled from register tiles (rows of 64: whole tiles) on a host runs every
    channel block of a pooled row in turn (pool.py sweep_row per block), several blocks and a batch of 2."""
    use_cpu(cpu, monkeypatch)
    rows = []
    original = pool_kernels.sweep_row
    monkeypatch.setattr(pool_kernels, "sweep_row", lambda *args: rows.append(1) or original(*args))
    model = _stem((2, 5, 10, 64), (40, 5, 3, 3), {"pads": [1, 1, 1, 1]}, "MaxPool",
                  {"kernel_shape": [2, 2], "strides": [2, 2]})
    graph = import_onnx(model, name="stem")
    x = RNG.uniform(-1, 1, (2, 5, 10, 64)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    actual = host_runner.run_bundle_host(graph, {"x": x}, workdir=tmp_path)["y"]
    assert rows, "the pooled rows were not swept block by block"
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module", params=[(t, s) for t in TILINGS for s in (True, False)],
                ids=[f"{t}-{'staged' if s else 'registers'}" for t in TILINGS for s in (True, False)])
def chain_results(request, tmp_path_factory):
    simd, staged = TILINGS[request.param[0]], request.param[1]
    with tiling(simd), pytest.MonkeyPatch.context() as patch:
        patch.setattr(pool_kernels, "stages_conv_output", lambda target: staged)
        actual = run_bundle_host(GRAPH, FEEDS, workdir=tmp_path_factory.mktemp("staged"))
    return actual, interpreter.run(GRAPH, FEEDS)


@pytest.mark.parametrize("output", GRAPH.outputs)
def test_fusion_chains_staged_or_not_match_reference(chain_results, output):
    actual, expected = chain_results
    np.testing.assert_allclose(actual[output], expected[output], rtol=1e-4, atol=1e-5, err_msg=output)
