"""The select stage's choices, as a (layer, target) -> implementation table per target (the way TVM's strategy
tests pin an op's implementation), without running any code: a change in a predicate or a priority that moves a
layer to another kernel shows here by name. Each case also compiles the layer for one target and checks the
output against onnxruntime, so the table names implementations that compute the right thing."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.pipeline import explain, schedule
from pegasus.exporters.glow.target import HOST_TRIPLES, Target, resolve_target
from pegasus.importers.onnx.loader import import_onnx
from tests.support import host_runner

pytestmark = pytest.mark.framework
RNG = np.random.default_rng(29)

TARGETS = {
    "sse": Target("x86_64", "x86-64", HOST_TRIPLES["x86_64"], "hard", "pic"),
    "avx2": Target("x86_64", "x86-64-v3", HOST_TRIPLES["x86_64"], "hard", "pic"),
    "avx512": Target("x86_64", "x86-64-v4", HOST_TRIPLES["x86_64"], "hard", "pic"),
    "m4": resolve_target("arm", "cortex-m4"),
    "m7": resolve_target("arm", "cortex-m7"),
}


def _conv_model(x_shape, out_channels, kernel, strides=(1, 1), pads=(0, 0, 0, 0), pool=None):
    """Conv -> Relu (-> pool), float32, NCHW."""
    w = RNG.standard_normal((out_channels, x_shape[1], *kernel)).astype(np.float32) * 0.2
    b = RNG.standard_normal(out_channels).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(strides), pads=list(pads),
                              kernel_shape=list(kernel)),
             helper.make_node("Relu", ["c"], ["r" if pool else "y"])]
    if pool:
        nodes.append(helper.make_node(pool, ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


#: case -> (model, {target: the implementation of the layer headed by the Conv})
CASES = {
    "pointwise-7x7": (lambda: _conv_model((1, 32, 7, 7), 64, (1, 1)),
                      {"sse": "conv.pointwise", "avx2": "conv.lanes", "avx512": "conv.lanes", "m4": "conv.direct",
                       "m7": "conv.direct"}),
    # lanes hold output channels: 8 fill an AVX2 vector, not an AVX-512 one
    "pointwise-8-channels": (lambda: _conv_model((1, 32, 7, 7), 8, (1, 1)),
                             {"sse": "conv.pointwise", "avx2": "conv.lanes", "avx512": "conv.pointwise",
                              "m4": "conv.direct", "m7": "conv.direct"}),
    "3x3-same": (lambda: _conv_model((1, 8, 16, 16), 16, (3, 3), pads=(1, 1, 1, 1)),
                 {"sse": "conv.direct", "avx2": "conv.lanes", "avx512": "conv.lanes", "m4": "conv.direct",
                  "m7": "conv.direct"}),
    # too few output channels for lanes: the taps gathered (AVX) or each tap's runs (SSE)
    "3x3-stride2": (lambda: _conv_model((1, 8, 15, 15), 4, (3, 3), strides=(2, 2)),
                    {"sse": "conv.row_taps", "avx2": "conv.im2col", "avx512": "conv.im2col", "m4": "conv.direct",
                     "m7": "conv.direct"}),
    "3x3-maxpool": (lambda: _conv_model((1, 8, 16, 16), 16, (3, 3), pads=(1, 1, 1, 1), pool="MaxPool"),
                    {"sse": "conv.pooled", "avx2": "conv.pooled", "avx512": "conv.pooled", "m4": "conv.pooled",
                     "m7": "conv.pooled"}),
}


def _conv_choice(model, target) -> tuple[str, str]:
    scheduled = schedule(import_onnx(model, name="select"), target)
    found = [(s.kind, s.choice.impl) for layer, s in zip(scheduled.layers, scheduled.selections)
             if layer.nodes[0].op == "Conv"]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_implementation_per_target(case):
    make, expected = CASES[case]
    model = make()
    got = {name: _conv_choice(model, target)[1] for name, target in TARGETS.items()}
    assert got == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_chosen_implementation_computes_the_layer(case, tmp_path):
    """On this machine's own target: the bundle of the chosen implementation equals onnxruntime."""
    model = CASES[case][0]()
    x = RNG.uniform(-1, 1, model.graph.input[0].type.tensor_type.shape.dim[0].dim_value and
                    [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = host_runner.run_bundle_host(import_onnx(model, name="select"), {"x": x}, workdir=tmp_path)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_explain_names_every_candidate_and_why():
    scheduled = schedule(import_onnx(CASES["3x3-stride2"][0](), name="select"), TARGETS["m7"])
    text = explain(scheduled)
    conv = text.split("\n")
    head = next(i for i, line in enumerate(conv) if "-> conv." in line)
    assert "-> conv.direct [reference]" in conv[head]
    candidates = {line.split(" [")[0].strip(): line.split(": ", 1)[1] for line in conv[head + 1:head + 8]}
    assert candidates["conv.direct"] == "chosen"
    assert candidates["conv.pooled"].startswith("not eligible")
    assert candidates["conv.row_taps"] == "not eligible: not strided along its last axis on a hosted target"
    assert candidates["conv.lanes"].startswith("not eligible")


def test_export_glow_explain_prints_the_choices(tmp_path):
    """``pegasus export glow --explain`` prints each layer's choice with its candidates, and still exports."""
    import subprocess
    import sys

    import onnx

    onnx.save(CASES["3x3-maxpool"][0](), tmp_path / "net.onnx")
    pegasus = [sys.executable, "-m", "pegasus"]
    subprocess.run([*pegasus, "import", "onnx", "--model", tmp_path / "net.onnx", "--output-model",
                    tmp_path / "net.json", "--output-data", tmp_path / "net.data"], check=True, capture_output=True)
    done = subprocess.run([*pegasus, "export", "glow", "--model", tmp_path / "net.json", "--model-data",
                           tmp_path / "net.data", "--target", "arm", "--mcpu", "cortex-m7", "--output-path",
                           tmp_path / "bundle", "--explain"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("layer 0 ") and "(Conv+group: Conv Relu MaxPool) -> conv.pooled [fused]" in lines[0]
    assert lines[1].strip() == "conv.pooled [fused]: chosen"
    assert any(line.strip() == "conv.direct [reference]: not eligible: heads a pooling" for line in lines[2:8])
    assert (tmp_path / "bundle" / "net.o").is_file()
