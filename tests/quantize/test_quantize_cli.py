"""``pegasus quantize`` and ``inference --dtype quantized`` on the demo LeNet, as a user runs them:
accuracy of every scheme on 1,000 real held-out digits against the float model, reuse of an existing
table, the hybrid round trip through a hand-edited .quantize, and the errors users meet."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pegasus.cli import main
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.quantize_file import load_table
from pegasus.runtime import interpreter

DEMO = Path(__file__).resolve().parents[2] / "conversion_scripts" / "demo"
META = DEMO / "lenet_mnist_inputmeta.yml"
pytestmark = pytest.mark.xdist_group("lenet_quantize")


@pytest.fixture(scope="module")
def lenet(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lenet_quantize")
    assert main(["import", "onnx", "--model", str(DEMO / "lenet_mnist.onnx"), "--output-model",
                 str(folder / "lenet.json"), "--output-data", str(folder / "lenet.data")]) == 0
    return folder


@pytest.fixture(scope="module")
def heldout():
    import sys

    sys.path.insert(0, str(DEMO))
    from heldout import heldout_digits

    return heldout_digits()


def quantize(folder: Path, *extra: str, table: str = "lenet.quantize", model: str = "lenet.json") -> int:
    return main(["quantize", "--model", str(folder / model), "--model-data", str(folder / "lenet.data"),
                 "--with-input-meta", str(META), "--model-quantize", str(folder / table), "--batch-size", "10",
                 "--iterations", "10", *extra])


def top1(graph, images, labels) -> float:
    hits = [int(np.argmax(interpreter.run(graph, {"data": image[None]})["softmax"])) == label
            for image, label in zip(images, labels)]
    return 100.0 * float(np.mean(hits))


SCHEMES = [("asymmetric_affine", "uint8", 1.0), ("dynamic_fixed_point", "int8", 1.0),
           ("perchannel_symmetric_affine", "int8", 1.0), ("dynamic_fixed_point", "int16", 0.2)]


def test_accuracy_of_every_scheme_on_1000_heldout_digits(lenet, heldout, capsys):
    images, labels = heldout
    graph = serialize.load(lenet / "lenet.json")
    reference = top1(graph, images, labels)
    rows = []
    for quantizer, qtype, allowed in SCHEMES:
        name = f"{quantizer}_{qtype}.quantize"
        assert quantize(lenet, "--quantizer", quantizer, "--qtype", qtype, "--rebuild", table=name) == 0
        table = load_table(lenet / name, graph, serialize.graph_digest(graph))
        accuracy = top1(lower_to_integer(graph, table).graph, images, labels)
        rows.append((f"{quantizer}-{qtype}", accuracy, allowed))
    with capsys.disabled():
        print(f"\nLeNet top-1 on {len(labels)} held-out digits: float {reference:.1f}%")
        for scheme, accuracy, _ in rows:
            print(f"  {scheme:36s} {accuracy:.1f}%  ({accuracy - reference:+.1f} points)")
    for scheme, accuracy, allowed in rows:
        assert abs(accuracy - reference) <= allowed, f"{scheme}: {accuracy} vs float {reference}"


@pytest.mark.parametrize("algorithm", ["kl_divergence", "moving_average"])
def test_other_algorithms_keep_accuracy(lenet, heldout, algorithm):
    images, labels = (a[:300] for a in heldout)
    graph = serialize.load(lenet / "lenet.json")
    name = f"{algorithm}.quantize"
    extra = ["--moving-average-weight", "0.1"] if algorithm == "moving_average" else []
    assert quantize(lenet, "--algorithm", algorithm, "--rebuild", *extra, table=name) == 0
    table = load_table(lenet / name, graph, serialize.graph_digest(graph))
    assert table.algorithm == algorithm
    assert top1(lower_to_integer(graph, table).graph, images, labels) >= top1(graph, images, labels) - 1.5


def test_inference_quantized_command(lenet, capsys):
    assert quantize(lenet, "--rebuild") == 0
    capsys.readouterr()
    digit = DEMO / "images" / "digit_400_4.png"
    assert main(["inference", "--model", str(lenet / "lenet.json"), "--model-data", str(lenet / "lenet.data"),
                 "--dtype", "quantized", "--model-quantize", str(lenet / "lenet.quantize"), "--with-input-meta",
                 str(META), "--input", str(digit), "--postprocess", "dump_result", "--output-dir", str(lenet)]) == 0
    scores = np.load(lenet / "outputs.npz")["softmax"]
    assert int(np.argmax(scores)) == 4  # the file's label
    assert abs(float(scores.sum()) - 1.0) < 0.05


def test_reuse_keeps_edits_and_fills_missing_tensors(lenet, capsys):
    target = lenet / "reuse.quantize"
    assert quantize(lenet, "--rebuild", table="reuse.quantize") == 0
    text = target.read_text()
    first = load_table(target)
    # the user edits: a comment, a hand-picked scale, and one tensor deleted
    edited_name = "/pool1/MaxPool_output_0"
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "/relu/Relu_output_0:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    lines = lines[:start] + lines[end:]
    text = "\n".join(lines) + "\n"
    text = text.replace("quantize_parameters:\n", "# tuned by hand, keep\nquantize_parameters:\n")
    target.write_text(text)
    capsys.readouterr()
    assert quantize(lenet, table="reuse.quantize") == 0
    out = capsys.readouterr().out
    assert "filled 1 missing" in out
    second = load_table(target)
    after = target.read_text()
    assert "# tuned by hand, keep" in after
    assert "/relu/Relu_output_0" in second.tensors
    assert second.tensors[edited_name].scale == first.tensors[edited_name].scale


def test_hybrid_round_trip_with_user_edits(lenet, heldout, capsys):
    target = lenet / "hybrid.quantize"
    assert quantize(lenet, "--rebuild", table="hybrid.quantize") == 0
    text = target.read_text().replace(
        "customized_quantize_layers: {}",
        "# raised by hand after reading entropy.txt\n"
        "customized_quantize_layers: {/fc1/Gemm: float32, /conv2/Conv: dynamic_fixed_point-i16}")
    target.write_text(text)
    assert quantize(lenet, "--hybrid", table="hybrid.quantize") == 0
    hybrid_json = lenet / "lenet.quantize.json"
    assert hybrid_json.is_file()
    hybrid = serialize.load(hybrid_json, lenet / "lenet.data")  # the model's .data still fits the hybrid graph
    converters = [n for n in hybrid.nodes if n.op == "DtypeConverter"]
    # conv2 (i16) reads pool1 (u8) and feeds pool2 (u8); fc1 (float) reads flatten (u8) and feeds relu (u8)
    boundaries = {(n.attrs.from_precision, n.attrs.to_precision) for n in converters}
    assert len(converters) == 4
    assert boundaries == {("asymmetric_affine-u8", "dynamic_fixed_point-i16"),
                          ("dynamic_fixed_point-i16", "asymmetric_affine-u8"),
                          ("asymmetric_affine-u8", "float32"), ("float32", "asymmetric_affine-u8")}
    after = target.read_text()
    assert "# raised by hand after reading entropy.txt" in after
    table = load_table(target, hybrid, serialize.graph_digest(hybrid))
    assert table.customized_layers == {"/fc1/Gemm": "float32", "/conv2/Conv": "dynamic_fixed_point-i16"}
    assert table.tensors["/conv2/Conv_output_0"].qtype == "i16"
    assert table.tensors["/fc1/Gemm_output_0"].qtype == "float32"
    lowered = lower_to_integer(hybrid, table)
    ops = {n.op for n in lowered.graph.nodes}
    assert "Gemm" in ops and "QConv" in ops  # fc1 stays float, conv2 runs on int16
    assert any(n.op == "QConv" and lowered.graph.type_of(n.outputs[0]).dtype.value == "int16"
               for n in lowered.graph.nodes)
    images, labels = (a[:300] for a in heldout)
    float_graph = serialize.load(lenet / "lenet.json")
    assert top1(lowered.graph, images, labels) >= top1(float_graph, images, labels) - 1.0
    # the hybrid model runs from the command line too
    assert main(["inference", "--model", str(hybrid_json), "--model-data", str(lenet / "lenet.data"), "--dtype",
                 "quantized", "--model-quantize", str(target), "--with-input-meta", str(META), "--input",
                 str(DEMO / "images" / "digit_400_4.png"), "--postprocess", "print_topn"]) == 0
    assert "class 4" in capsys.readouterr().out


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_invalid_quantizer_qtype_pair_names_the_valid_ones(lenet, capsys):
    assert quantize(lenet, "--quantizer", "perchannel_symmetric_affine", "--qtype", "uint8", "--rebuild",
                    table="bad.quantize") == 2
    message = _error(capsys)
    assert "perchannel_symmetric_affine-int8" in message and "asymmetric_affine-uint8" in message
    assert not (lenet / "bad.quantize").exists()


def _table_copy(lenet: Path, name: str) -> Path:
    source = lenet / "base.quantize"
    if not source.exists():
        assert quantize(lenet, "--rebuild", table="base.quantize") == 0
    shutil.copy(source, lenet / name)
    return lenet / name


def _infer(lenet: Path, table: Path, model: str = "lenet.json") -> int:
    return main(["inference", "--model", str(lenet / model), "--model-data", str(lenet / "lenet.data"), "--dtype",
                 "quantized", "--model-quantize", str(table), "--input", str(DEMO / "images" / "digit_400_4.png"),
                 "--postprocess", "print_topn"])


def test_unknown_layer_in_customized_layers(lenet, capsys):
    table = _table_copy(lenet, "unknown_layer.quantize")
    table.write_text(table.read_text().replace("customized_quantize_layers: {}",
                                               "customized_quantize_layers: {conv9: float32}"))
    before = table.read_text()
    assert quantize(lenet, "--hybrid", table="unknown_layer.quantize") == 2
    message = _error(capsys)
    assert "conv9" in message and "line" in message and "unknown_layer.quantize" in message
    assert table.read_text() == before
    assert not (lenet / "lenet.quantize.json").exists() or "conv9" not in (lenet / "lenet.quantize.json").read_text()


def test_unknown_qtype(lenet, capsys):
    table = _table_copy(lenet, "unknown_qtype.quantize")
    text = table.read_text()
    table.write_text(text.replace("qtype: u8", "qtype: u7", 2))
    assert _infer(lenet, table) == 2
    message = _error(capsys)
    assert "u7" in message and "line" in message


def test_yaml_syntax_error_gives_the_line(lenet, capsys):
    table = _table_copy(lenet, "syntax.quantize")
    lines = table.read_text().splitlines()
    lines[12] = lines[12] + " ]["
    table.write_text("\n".join(lines) + "\n")
    assert _infer(lenet, table) == 2
    assert "line" in _error(capsys)


def test_stale_table_is_refused(lenet, capsys):
    table = _table_copy(lenet, "stale.quantize")
    graph = serialize.load(lenet / "lenet.json")
    weights = graph.tensors["fc2.weight"]
    weights.data = weights.data * 1.5
    serialize.save(graph, lenet / "changed.json", lenet / "changed.data")
    assert main(["inference", "--model", str(lenet / "changed.json"), "--model-data", str(lenet / "changed.data"),
                 "--dtype", "quantized", "--model-quantize", str(table), "--input",
                 str(DEMO / "images" / "digit_400_4.png")]) == 2
    message = _error(capsys)
    assert "another version" in message and "'/fc2/Gemm' (Gemm) changed" in message, message


def test_quantized_inference_needs_a_table(lenet, capsys, tmp_path):
    # no NAME.quantize beside the model either (the Acuity guide's step 4 takes that one when it is there)
    for name in ("lenet.json", "lenet.data"):
        (tmp_path / name).write_bytes((lenet / name).read_bytes())
    assert main(["inference", "--model", str(tmp_path / "lenet.json"), "--model-data", str(tmp_path / "lenet.data"),
                 "--dtype", "quantized", "--input", str(DEMO / "images" / "digit_400_4.png")]) == 2
    assert "--model-quantize" in _error(capsys)
