"""``pegasus quantize --hybrid`` as the Acuity guide (§3.5) runs it, on the demo LeNet: the hybrid table is
derived from the calibrated, hand-edited table (not re-calibrated on the command's default single sample),
re-runs accept NAME.json as well as NAME.quantize.json, and every comment of the .quantize survives."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from pegasus.cli import main
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.quantize_file import load_table
from pegasus.runtime import interpreter
from tests.quantize.demo_lenet import META, heldout_digits, import_lenet

pytestmark = pytest.mark.xdist_group("lenet_quantize")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    """The demo LeNet and its uint8 table calibrated on 10 x 10 samples (copied by each test)."""
    folder = import_lenet(tmp_path_factory.mktemp("hybrid"))
    assert quantize(folder, "--batch-size", "10", "--iterations", "10", "--rebuild", table="calibrated.quantize") == 0
    return folder


@pytest.fixture(scope="module")
def heldout():
    images, labels = heldout_digits()
    return images[:300], labels[:300]


def quantize(folder: Path, *extra: str, table: str = "lenet.quantize", model: str = "lenet.json") -> int:
    """``pegasus quantize`` with only the flags given (the guide's --hybrid line has no batch flags)."""
    return main(["quantize", "--model", str(folder / model), "--model-data", str(folder / "lenet.data"),
                 "--with-input-meta", str(META), "--model-quantize", str(folder / table), *extra])


def hybrid(folder: Path, table: str, model: str = "lenet.json") -> int:
    return quantize(folder, "--quantizer", "asymmetric_affine", "--qtype", "uint8", "--hybrid", table=table,
                    model=model)


def entry_text(text: str, tensor: str) -> str:
    """The lines of one tensor's entry in a .quantize text, exactly as written."""
    lines = text.splitlines()
    start = lines.index(f"  {tensor}:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    return "\n".join(lines[start:end])


def replace_list(text: str, tensor: str, key: str, value: str) -> str:
    """Set the one-element list ``key`` of ``tensor``'s entry to ``value`` by editing the text, as a user does."""
    block = entry_text(text, tensor)
    edited = re.sub(rf"(    {key}:\n      - )\S+", rf"\g<1>{value}", block)
    assert edited != block
    return text.replace(block, edited)


def top1(graph, images, labels) -> float:
    hits = [int(np.argmax(interpreter.run(graph, {"data": image[None]})["softmax"])) == label
            for image, label in zip(images, labels)]
    return float(np.mean(hits))


def integer_top1(folder: Path, model: str, table: str, heldout) -> float:
    graph = serialize.load(folder / model, folder / "lenet.data")
    return top1(lower_to_integer(graph, load_table(folder / table, graph, serialize.graph_digest(graph))).graph,
                *heldout)


def fractional_length(lo: float, hi: float, bits: int) -> int:
    """dynamic_fixed_point's fl: the largest fl with max|x| * 2**fl below the top level (computed here, exactly)."""
    top = max(abs(lo), abs(hi))
    return next(fl for fl in range(bits, -bits, -1) if round(top * 2.0 ** fl) <= 2 ** (bits - 1) - 1)


def test_hybrid_keeps_the_calibrated_and_edited_table(calibrated, heldout, capsys):
    shutil.copy(calibrated / "calibrated.quantize", calibrated / "edited.quantize")
    target = calibrated / "edited.quantize"
    before = load_table(target)
    text = target.read_text()
    text = replace_list(text, "/relu/Relu_output_0", "scale", "0.0421")  # a hand-picked scale
    text = replace_list(text, "/fc2/Gemm_output_0", "max_value", "24.5")  # a hand-picked range
    text = replace_list(text, "/conv2/Conv_output_0", "max_value", "40.0")  # the range int16 will be derived from
    text = text.replace("customized_quantize_layers: {}",
                        "customized_quantize_layers: {/conv1/Conv: float32, /conv2/Conv: dynamic_fixed_point-i16}")
    target.write_text(text)
    edited = load_table(target)
    accuracy_before = integer_top1(calibrated, "lenet.json", "edited.quantize", heldout)
    capsys.readouterr()

    assert hybrid(calibrated, "edited.quantize") == 0
    out = capsys.readouterr().out
    assert "calibrated 0" in out, out
    after_text = target.read_text()
    graph = serialize.load(calibrated / "lenet.quantize.json", calibrated / "lenet.data")
    after = load_table(target, graph, serialize.graph_digest(graph))

    # hand edits of tensors whose precision did not change: byte for byte
    for tensor in ("/relu/Relu_output_0", "/fc2/Gemm_output_0"):
        assert entry_text(after_text, tensor) == entry_text(text, tensor)
    # every other tensor that keeps its precision keeps the calibrated entry (not a one-sample range)
    changed = {"/conv1/Conv_output_0", "conv1.weight", "conv1.bias", "/conv2/Conv_output_0", "conv2.weight",
               "conv2.bias"}
    for name in before.tensors:
        if name not in changed:
            assert after.tensors[name] == edited.tensors[name], name
    # layers that changed precision: the new grid from the table's range
    conv1 = after.tensors["/conv1/Conv_output_0"]
    assert conv1.qtype == "float32"
    assert (conv1.min_value, conv1.max_value) == (before.tensors["/conv1/Conv_output_0"].min_value,
                                                  before.tensors["/conv1/Conv_output_0"].max_value)
    conv2 = after.tensors["/conv2/Conv_output_0"]
    lo = before.tensors["/conv2/Conv_output_0"].min_value[0]
    assert conv2.qtype == "i16" and conv2.fl == fractional_length(lo, 40.0, 16)
    assert math.isclose(conv2.scale[0], 2.0 ** -conv2.fl)
    # converters: the float32 -> u8 side keeps the tensor's calibrated u8 grid
    assert after.tensors["/conv1/Conv_output_0_to_asymmetric_affine_u8"] == before.tensors["/conv1/Conv_output_0"]
    data_to_float = after.tensors["data_to_float32"]
    assert (data_to_float.min_value, data_to_float.max_value) == (before.tensors["data"].min_value,
                                                                  before.tensors["data"].max_value)
    # and held-out digits are classified at least as well as before
    assert integer_top1(calibrated, "lenet.quantize.json", "edited.quantize", heldout) >= accuracy_before


def test_rerun_accepts_the_float_model_and_the_hybrid_model(calibrated, capsys):
    shutil.copy(calibrated / "calibrated.quantize", calibrated / "rerun.quantize")
    target = calibrated / "rerun.quantize"
    target.write_text(target.read_text().replace("customized_quantize_layers: {}",
                                                 "customized_quantize_layers: {/fc1/Gemm: float32}"))
    assert hybrid(calibrated, "rerun.quantize") == 0
    # a further edit, then --hybrid again as the guide does it (with NAME.json), and with NAME.quantize.json
    text = replace_list(target.read_text(), "/relu/Relu_output_0", "scale", "0.0421")
    target.write_text(text.replace("{/fc1/Gemm: float32}", "{/fc1/Gemm: float32, /fc2/Gemm: float32}"))
    capsys.readouterr()
    assert hybrid(calibrated, "rerun.quantize", model="lenet.json") == 0, capsys.readouterr().err
    first = target.read_text()
    assert entry_text(first, "/relu/Relu_output_0") == entry_text(text, "/relu/Relu_output_0")
    assert hybrid(calibrated, "rerun.quantize", model="lenet.quantize.json") == 0, capsys.readouterr().err
    assert target.read_text() == first  # nothing changed in between: the same table
    graph = serialize.load(calibrated / "lenet.quantize.json", calibrated / "lenet.data")
    table = load_table(target, graph, serialize.graph_digest(graph))
    assert table.customized_layers == {"/fc1/Gemm": "float32", "/fc2/Gemm": "float32"}
    # u8 -> float32 before fc1 and fc2, float32 -> u8 after them (relu stays u8)
    assert sum(node.op == "DtypeConverter" for node in graph.nodes) == 4

    # a genuinely different model is still refused, naming the layer that changed
    changed = serialize.load(calibrated / "lenet.json", calibrated / "lenet.data")
    changed.tensors["conv2.weight"].data = changed.tensors["conv2.weight"].data * 1.5
    serialize.save(changed, calibrated / "changed.json", calibrated / "changed.data")
    capsys.readouterr()
    assert main(["quantize", "--model", str(calibrated / "changed.json"), "--model-data",
                 str(calibrated / "changed.data"), "--with-input-meta", str(META), "--model-quantize", str(target),
                 "--hybrid"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'/conv2/Conv' (Conv) changed" in err[0], err
    assert target.read_text() == first


def test_only_tensors_missing_from_the_table_are_calibrated(calibrated, capsys):
    shutil.copy(calibrated / "calibrated.quantize", calibrated / "missing.quantize")
    target = calibrated / "missing.quantize"
    text = target.read_text()
    deleted = entry_text(text, "/relu/Relu_output_0")
    target.write_text(text.replace(deleted + "\n", "").replace(
        "customized_quantize_layers: {}", "customized_quantize_layers: {/fc2/Gemm: float32}"))
    before = load_table(calibrated / "calibrated.quantize")
    capsys.readouterr()
    assert hybrid(calibrated, "missing.quantize") == 0
    out = capsys.readouterr().out
    assert "calibrated 1 (/relu/Relu_output_0) on 1 samples" in out, out
    after = load_table(target)
    relu = after.tensors["/relu/Relu_output_0"]
    assert relu.qtype == "u8" and relu.min_value == [0.0] and relu.max_value[0] > 0
    assert after.tensors["/fc1/Gemm_output_0"] == before.tensors["/fc1/Gemm_output_0"]


def test_hybrid_table_with_the_float_model_points_at_the_hybrid_json(calibrated, capsys):
    shutil.copy(calibrated / "calibrated.quantize", calibrated / "pointer.quantize")
    target = calibrated / "pointer.quantize"
    target.write_text(target.read_text().replace("customized_quantize_layers: {}",
                                                 "customized_quantize_layers: {/conv1/Conv: float32}"))
    assert hybrid(calibrated, "pointer.quantize") == 0
    capsys.readouterr()
    assert main(["inference", "--model", str(calibrated / "lenet.json"), "--model-data", str(calibrated / "lenet.data"),
                 "--dtype", "quantized", "--model-quantize", str(target), "--with-input-meta", str(META)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--model NAME.quantize.json" in err[0], err


def test_hybrid_refuses_another_scheme_than_the_tables(calibrated, capsys):
    shutil.copy(calibrated / "calibrated.quantize", calibrated / "scheme.quantize")
    target = calibrated / "scheme.quantize"
    before = target.read_text()
    assert quantize(calibrated, "--quantizer", "dynamic_fixed_point", "--qtype", "int8", "--hybrid",
                    table="scheme.quantize") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "asymmetric_affine-u8" in err[0] and "--rebuild" in err[0], err
    assert target.read_text() == before


COMMENTS = {
    "top": "# LeNet for the demo board, calibrated on 100 digits",
    "between": "  # the pooling output below was checked by hand",
    "above": "# float for conv1: highest entropy in entropy.txt",
    "inside": "  # conv1 first",
    "end_of_line": "# see entropy.txt",
    "last": "# end of the table",
}


def with_comments(text: str) -> str:
    """The user's edit: comments everywhere, customized_quantize_layers moved to the end (block style)."""
    text = text.replace("customized_quantize_layers: {}\n", "")
    text = text.replace("  /pool1/MaxPool_output_0:\n", f"{COMMENTS['between']}\n  /pool1/MaxPool_output_0:\n")
    return (f"{COMMENTS['top']}\n" + text.rstrip("\n") +
            f"\n{COMMENTS['above']}\ncustomized_quantize_layers:\n{COMMENTS['inside']}\n"
            f"  /conv1/Conv: float32   {COMMENTS['end_of_line']}\n  /fc1/Gemm: dynamic_fixed_point-i16\n"
            f"{COMMENTS['last']}\n")


def assert_comments_in_place(text: str) -> None:
    lines = text.splitlines()
    assert lines[0] == COMMENTS["top"]
    between = lines.index(COMMENTS["between"])
    assert lines[between + 1] == "  /pool1/MaxPool_output_0:"
    above = lines.index(COMMENTS["above"])
    assert lines[above + 1] == "customized_quantize_layers:"
    assert lines[above + 2] == COMMENTS["inside"]
    assert lines[above + 3] == f"  /conv1/Conv: float32   {COMMENTS['end_of_line']}"
    assert lines[-1] == COMMENTS["last"]
    assert all(sum(comment in line for line in lines) == 1 for comment in COMMENTS.values())


def test_comments_survive_every_rewrite(calibrated, capsys):
    shutil.copy(calibrated / "calibrated.quantize", calibrated / "comments.quantize")
    target = calibrated / "comments.quantize"
    target.write_text(with_comments(target.read_text()))
    assert hybrid(calibrated, "comments.quantize") == 0
    assert_comments_in_place(target.read_text())
    assert hybrid(calibrated, "comments.quantize", model="lenet.quantize.json") == 0  # a second --hybrid
    assert_comments_in_place(target.read_text())
    # reusing the table on the hybrid model keeps its entries, its customized layers and its comments
    assert quantize(calibrated, table="comments.quantize", model="lenet.quantize.json") == 0
    assert_comments_in_place(target.read_text())
    assert load_table(target).customized_layers == {"/conv1/Conv": "float32", "/fc1/Gemm": "dynamic_fixed_point-i16"}
    # even --rebuild, which recomputes every entry, keeps what the user wrote around them
    assert quantize(calibrated, "--rebuild", table="comments.quantize") == 0
    lines = target.read_text().splitlines()
    assert all(any(comment in line for line in lines) for comment in COMMENTS.values())
