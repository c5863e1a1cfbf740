"""Per-layer float-vs-quantized comparison on the demo LeNet quantized uint8: the model's last layers
agree with the float model, a grid made 10x coarser shows as more than 10 dB less SNR on that layer,
the numbers equal a direct numpy computation, and ``pegasus compare`` / ``quantize --report`` write
the table, the CSV and the chart."""

from __future__ import annotations

import copy
import csv
import math
from dataclasses import replace

import numpy as np
import pytest

from pegasus.cli import main
from pegasus.errors import PegasusError
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantized.params import TensorQuant
from pegasus.quantizers.compare import compare_layers, write_report
from pegasus.runtime import interpreter
from tests.quantize.demo_lenet import META, demo_feeds, import_lenet, load, quantize

pytestmark = pytest.mark.xdist_group("lenet_compare")
CONV2 = "/conv2/Conv_output_0"


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    folder = import_lenet(tmp_path_factory.mktemp("lenet_compare"))
    assert quantize(folder) == 0
    return folder


@pytest.fixture(scope="module")
def model(lenet):
    graph, table = load(lenet)
    return graph, table, demo_feeds(graph, 20)


def by_layer(errors):
    return {e.layer: e for e in errors}


def test_last_layers_agree_with_float(model):
    graph, table, feeds = model
    errors = compare_layers(graph, table, feeds)
    assert [e.samples for e in errors] == [20] * len(errors)
    for error in errors[-3:]:
        assert error.cosine > 0.99, error
        assert error.precision == "asymmetric_quantized-u8"


def test_every_layer_is_reported_once_and_fused_layers_on_their_reader(model):
    graph, table, feeds = model
    errors = compare_layers(graph, table, feeds[:2])
    reported = [name for e in errors for name in e.fused + [e.layer]]
    assert sorted(reported) == sorted(node.name for node in graph.nodes)
    # fc1's only reader is the ReLU: the integer Gemm applies it in its clamp and writes the ReLU's output
    relu = by_layer(errors)["/relu/Relu"]
    assert (relu.op, relu.fused, relu.tensors) == ("Gemm+Relu", ["/fc1/Gemm"], ["/relu/Relu_output_0"])
    assert "/fc1/Gemm" not in by_layer(errors)


def test_coarser_grid_costs_snr_on_that_layer(model):
    graph, table, feeds = model
    coarse = copy.deepcopy(table)
    entry = coarse.tensors[CONV2]
    coarse.tensors[CONV2] = replace(entry, scale=[entry.scale[0] * 10])  # same zero point, 10x coarser steps
    before = by_layer(compare_layers(graph, table, feeds))["/conv2/Conv"]
    after = by_layer(compare_layers(graph, coarse, feeds))["/conv2/Conv"]
    # rounding noise grows with the step squared: 10x the step is ~20 dB; at least 10 dB is expected
    assert before.snr_db - after.snr_db > 10, (before.snr_db, after.snr_db)
    assert after.relative_error > before.relative_error


def test_numbers_equal_a_direct_numpy_computation(model):
    graph, table, feeds = model
    lowered = lower_to_integer(graph, table).graph  # its output "softmax" is already dequantized
    f = np.concatenate([interpreter.run(graph, feed)["softmax"].ravel() for feed in feeds]).astype(np.float64)
    q = np.concatenate([interpreter.run(lowered, feed)["softmax"].ravel() for feed in feeds]).astype(np.float64)
    error = by_layer(compare_layers(graph, table, feeds))["/Softmax"]
    assert error.snr_db == pytest.approx(10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)), rel=1e-9)
    assert error.cosine == pytest.approx(f @ q / (np.linalg.norm(f) * np.linalg.norm(q)), rel=1e-12)
    assert error.relative_error == pytest.approx(np.linalg.norm(f - q) / np.linalg.norm(f), rel=1e-9)
    # and one inner layer: the integer tensor dequantized by hand with its .quantize entry
    entry = table.tensors[CONV2]
    fs, qs = [], []
    for feed in feeds:
        fs.append(interpreter.run(graph, feed, keep_all=True)[CONV2].ravel())
        qs.append((interpreter.run(lowered, feed, keep_all=True)[CONV2].astype(np.float64).ravel()
                   - entry.zero_point[0]) * entry.scale[0])
    f, q = np.concatenate(fs).astype(np.float64), np.concatenate(qs)
    conv2 = by_layer(compare_layers(graph, table, feeds))["/conv2/Conv"]
    assert conv2.snr_db == pytest.approx(10 * np.log10(np.sum(f ** 2) / np.sum((f - q) ** 2)), rel=1e-5)


def test_float_table_reports_exact_layers(model):
    graph, table, feeds = model
    floats = copy.deepcopy(table)  # every tensor float32: the "quantized" graph is the float graph
    floats.tensors = {name: TensorQuant("float32", "float32", "layer", q.min_value, q.max_value)
                      for name, q in table.tensors.items()}
    errors = compare_layers(graph, floats, feeds[:2])
    assert len(errors) == len(graph.nodes)
    assert all(e.snr_db == math.inf and e.cosine == 1.0 and e.relative_error == 0.0 for e in errors)
    assert {e.precision for e in errors} == {"float32"}


def test_report_files(model, tmp_path, capsys):
    graph, table, feeds = model
    out = tmp_path / "new" / "report"  # created
    errors = write_report(graph, table, feeds[:5], out)
    printed = capsys.readouterr().out
    text = (out / "compare.txt").read_text()
    assert text in printed
    lines = text.splitlines()
    assert lines[0].split() == ["layer", "op", "cosine", "SNR", "dB", "relative", "error"]
    assert [line.split()[0] for line in lines[2:2 + len(errors)]] == [e.layer for e in errors]
    worst = min(errors, key=lambda e: e.snr_db)
    assert f"lowest SNR: {worst.layer}" in text
    with open(out / "compare.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["layer"] for r in rows] == [e.layer for e in errors]
    assert [float(r["snr_db"]) for r in rows] == [e.snr_db for e in errors]
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_into_a_file_is_refused(model, tmp_path):
    graph, table, feeds = model
    target = tmp_path / "report"
    target.write_text("mine")
    with pytest.raises(PegasusError, match="is a file"):
        write_report(graph, table, feeds[:1], target)
    assert target.read_text() == "mine"


def test_compare_command(lenet, tmp_path, capsys):
    code = main(["compare", "--model", str(lenet / "lenet.json"), "--model-data", str(lenet / "lenet.data"),
                 "--model-quantize", str(lenet / "lenet.quantize"), "--with-input-meta", str(META),
                 "--batch-size", "2", "--iterations", "3", "--output-dir", str(tmp_path / "cmp")])
    assert code == 0
    assert {p.name for p in (tmp_path / "cmp").iterdir()} == {"compare.txt", "compare.csv", "compare.png"}
    assert "over 6 sample(s)" in (tmp_path / "cmp" / "compare.txt").read_text()
    assert "/Softmax" in capsys.readouterr().out


def test_compare_command_errors(lenet, tmp_path, capsys):
    base = ["compare", "--model", str(lenet / "lenet.json"), "--model-data", str(lenet / "lenet.data"),
            "--with-input-meta", str(META), "--output-dir", str(tmp_path / "cmp")]
    assert main(base + ["--model-quantize", str(tmp_path / "missing.quantize")]) == 2
    assert "missing.quantize" in capsys.readouterr().err
    assert main(base + ["--model-quantize", str(lenet / "lenet.quantize"), "--iterations", "0"]) == 2
    assert "--iterations must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


def test_quantize_report(lenet, tmp_path):
    assert quantize(lenet, "--report", str(tmp_path / "rep"), "--batch-size", "2", "--iterations", "5",
                    table="report.quantize") == 0
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["compare.csv", "compare.png", "compare.txt"]
