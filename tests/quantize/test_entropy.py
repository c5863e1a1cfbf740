"""--compute-entropy: entropy.txt has one line per layer with values in 0..1 that equal the layers'
relative RMS error, a coarser grid raises its layer's entropy, the suggestion rule, and the command line
writing entropy.txt in the current directory."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.entropy import SUGGEST_THRESHOLD, layer_entropies, suggest_layers, write_entropy
from pegasus.runtime import interpreter
from tests.quantize.demo_lenet import demo_feeds, import_lenet, load, quantize

pytestmark = pytest.mark.xdist_group("lenet_entropy")


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    folder = import_lenet(tmp_path_factory.mktemp("lenet_entropy"))
    assert quantize(folder) == 0
    return folder


@pytest.fixture(scope="module")
def model(lenet):
    graph, table = load(lenet)
    return graph, table, demo_feeds(graph, 10)


def read_entropy(path):
    pairs = [line.split() for line in path.read_text().splitlines()]
    assert all(len(pair) == 2 for pair in pairs)
    return {name: float(value) for name, value in pairs}


def test_one_line_per_layer_in_graph_order(model, tmp_path):
    graph, table, feeds = model
    entropies = layer_entropies(graph, table, feeds)
    write_entropy(tmp_path / "entropy.txt", entropies)
    written = read_entropy(tmp_path / "entropy.txt")
    assert list(written) == [node.name for node in graph.nodes]
    assert all(0.0 <= value <= 1.0 for value in written.values())
    assert written == pytest.approx(entropies, abs=1e-6)
    assert entropies["/fc1/Gemm"] == entropies["/relu/Relu"]  # fused into one integer layer


def test_entropy_is_the_relative_rms_error(model):
    graph, table, feeds = model
    lowered = lower_to_integer(graph, table).graph  # its output "softmax" is dequantized
    f = np.concatenate([interpreter.run(graph, feed)["softmax"].ravel() for feed in feeds]).astype(np.float64)
    q = np.concatenate([interpreter.run(lowered, feed)["softmax"].ravel() for feed in feeds]).astype(np.float64)
    expected = np.linalg.norm(q - f) / np.linalg.norm(f)
    assert layer_entropies(graph, table, feeds)["/Softmax"] == pytest.approx(expected, rel=1e-9)


def test_coarser_grid_raises_entropy(model):
    graph, table, feeds = model
    tensor = "/conv1/Conv_output_0"
    coarse = copy.deepcopy(table)
    coarse.tensors[tensor] = replace(table.tensors[tensor], scale=[table.tensors[tensor].scale[0] * 8])
    before = layer_entropies(graph, table, feeds)
    after = layer_entropies(graph, coarse, feeds)
    assert after["/conv1/Conv"] > before["/conv1/Conv"] * 4  # RMS rounding noise scales with the step
    # a grid so coarse that every value rounds to the zero point: the output is lost, entropy 1
    lost = copy.deepcopy(table)
    lost.tensors[tensor] = replace(table.tensors[tensor], scale=[1e6])
    entropies = layer_entropies(graph, lost, feeds)
    assert entropies["/conv1/Conv"] == 1.0
    assert "/conv1/Conv" in suggest_layers(entropies)


def test_suggestion_rule():
    entropies = {"a": 0.01, "b": SUGGEST_THRESHOLD, "c": 0.02, "d": 0.7}
    assert suggest_layers(entropies) == ["b", "d"]
    assert suggest_layers({"a": 0.01, "b": 0.05}) == []


def test_well_quantized_lenet_gets_no_suggestion(model):
    graph, table, feeds = model
    assert suggest_layers(layer_entropies(graph, table, feeds)) == []


def test_cli_writes_entropy_txt_in_the_current_directory(lenet, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert quantize(lenet, "--compute-entropy", "--batch-size", "5", "--iterations", "2",
                    table="entropy.quantize") == 0
    graph, table = load(lenet, "entropy.quantize")
    written = read_entropy(tmp_path / "entropy.txt")
    assert list(written) == [node.name for node in graph.nodes]
    assert all(0.0 <= value <= 1.0 for value in written.values())
    assert table.customized_layers == {}  # nothing above the threshold: nothing suggested
    assert "entropy.txt" in capsys.readouterr().out
