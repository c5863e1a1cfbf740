"""``pegasus run --profile``: per-layer instructions from the probed build add up to the whole-inference count
of the unprobed bundle (within one SysTick tick per layer, the probe cost being subtracted);
``--compare-layers`` names the layer whose weight a test perturbed."""

from __future__ import annotations

import re

import numpy as np

from pegasus.exporters.glow.run.compare_layers import compare_layers
from pegasus.exporters.glow.run.profile import export_instrumented
from pegasus.exporters.glow.run.target_run import output_spec
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir import serialize
from tests.conftest import run_cli


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def test_profile_sums_to_the_whole_inference(demo_model, tmp_path):
    model, data = demo_model
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(3).uniform(0, 1, (1, 1, 28, 28)).astype(np.float32))
    result = run_cli("run", "--model", model, "--model-data", data, "--input", x, "--target", "arm", "--mcpu",
                     "cortex-m7", "--profile", "--output-dir", tmp_path / "out")
    assert result.code == 0, result.stderr
    whole = _count(re.search(r"instructions per inference: ([\d,]+)", result.stdout).group(1))
    rows = re.findall(r"^\s+([\d,]+)\s+[\d.]+%\s+([\d,]+)\s+\S+\s+(\S.*)$", result.stdout, re.M)
    layers = {name: _count(cost) for cost, _, name in rows}
    macs = {name: _count(count) for _, count, name in rows}
    # LeNet: conv1 1->20 5x5 on 24x24 outputs, conv2 20->50 5x5 on 8x8, fc1 800->500, fc2 500->10
    assert macs["/conv1/Conv + /pool1/MaxPool"] == 24 * 24 * 20 * 25
    assert macs["/conv2/Conv + /pool2/MaxPool"] == 8 * 8 * 50 * 20 * 25
    assert macs["/fc1/Gemm"] == 800 * 500 and macs["/fc2/Gemm"] == 500 * 10 and macs["/relu/Relu"] == 0
    assert (tmp_path / "out" / "profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(layers) == 7, result.stdout                 # LeNet fused: conv+pool twice, fc1, relu, fc2, ...
    probe_cost = float(re.search(r"probe cost ([\d.]+) instructions", result.stdout).group(1))
    assert 5 < probe_cost < 200
    assert abs(sum(layers.values()) - whole) <= 40 * (len(layers) + 1), (sum(layers.values()), whole)
    assert max(layers, key=layers.get) == "/conv2/Conv + /pool2/MaxPool"   # the largest convolution


def test_profile_needs_a_cortex_m(demo_model, tmp_path):
    model, data = demo_model
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 28, 28), np.float32))
    result = run_cli("run", "--model", model, "--model-data", data, "--input", x, "--target", "x86_64", "--profile")
    assert result.code == 2 and "--profile and --compare-layers need a Cortex-M target" in result.stderr


def test_compare_layers_names_the_layer_with_a_perturbed_weight(demo_model, tmp_path):
    """fc2's weights shifted by 0.5 in NAME.weights.bin: the layers before it match, fc2 is named first."""
    graph = serialize.load(*demo_model)
    target = resolve_target("arm", "cortex-m7")
    bundle = export_instrumented(graph, tmp_path, "lenet", target)
    feeds = {"data": np.random.default_rng(5).uniform(0, 1, (1, 1, 28, 28)).astype(np.float32)}
    spec = output_spec(bundle.graph)
    table, first = compare_layers(bundle, tmp_path, "lenet", "cortex-m7", feeds, spec)
    assert first is None and "every layer matches" in table, table
    fc2 = next(node for node in bundle.graph.nodes if node.name == "/fc2/Gemm")
    weight = bundle.graph.value_of(fc2.inputs[1]).astype(np.float32).tobytes()
    blob = bytearray((tmp_path / "lenet.weights.bin").read_bytes())
    at = blob.find(weight)
    assert at >= 0 and blob.find(weight, at + 1) < 0
    blob[at:at + len(weight)] = (np.frombuffer(weight, np.float32) + 0.5).astype(np.float32).tobytes()
    (tmp_path / "lenet.weights.bin").write_bytes(bytes(blob))
    table, first = compare_layers(bundle, tmp_path, "lenet", "cortex-m7", feeds, spec)
    assert first == "/fc2/Gemm", table
    assert "ok    /fc1/Gemm" in table and "DIFF  /fc2/Gemm" in table


def test_compare_layers_on_a_channels_last_integer_model(tmp_path):
    """A pre-quantized TFLite model on Cortex-M7: its channels-last QConvs' weights are re-laid for the DSP kernels
    and its dense layer compiled as a 1x1 QConv between Reshapes, yet the reference interpreter runs the same
    graph with the registry's layouts, and every layer matches."""
    from pegasus.commands.quantized_model import lower_model
    from tests.importers.tflite.harness import cached_model, import_cli
    from tests.support.tflite_models import int8_cnn

    json_path, data_path, table_path = import_cli(cached_model(int8_cnn), tmp_path / "model")
    graph = lower_model(serialize.load(json_path, data_path), str(table_path), show=False).graph
    bundle = export_instrumented(graph, tmp_path, "cnn", resolve_target("arm", "cortex-m7"))
    x = graph.type_of(graph.inputs[0])
    feeds = {graph.inputs[0]: np.random.default_rng(6).integers(-128, 128, x.shape).astype(np.int8)}
    table, first = compare_layers(bundle, tmp_path, "cnn", "cortex-m7", feeds, output_spec(bundle.graph))
    assert first is None and "every layer matches" in table, table
