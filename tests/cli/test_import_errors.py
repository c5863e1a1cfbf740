"""Every bad input to ``pegasus import onnx`` gives one clear line on stderr, exit code 2, no traceback
(unless --verbose) and no partial output."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from tests.conftest import run_cli
from tests.support.cli_errors import assert_one_line_error, import_model, model_with, save, tensor


def test_missing_file(tmp_path):
    result = import_model(tmp_path / "nope.onnx", tmp_path)
    assert_one_line_error(result, "not found", "nope.onnx")


def test_truncated_file(tmp_path, demo_onnx):
    path = tmp_path / "cut.onnx"
    path.write_bytes(demo_onnx.read_bytes()[:5000])
    assert_one_line_error(import_model(path, tmp_path), "not a valid ONNX model", "cut.onnx")


def test_not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n" * 20)
    assert_one_line_error(import_model(path, tmp_path), "not a valid ONNX model")


def test_every_unsupported_op_listed_once(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
             helper.make_node("Det", ["a"], ["b"], name="det_1"),
             helper.make_node("Foo", ["b"], ["c"], name="custom_1", domain="com.example"),
             helper.make_node("Det", ["c"], ["y"], name="det_2")]
    model = model_with(nodes, [tensor("x", [2, 2])], [tensor("y", [])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    result = import_model(save(model, tmp_path / "m.onnx"), tmp_path)
    assert_one_line_error(result, "unsupported operators (2)", "Det", "det_1", "opset 13", "Foo", "com.example",
                          "custom_1")
    assert not (tmp_path / "out.json").exists()


def test_unsupported_op_of_a_symbolic_batch_model_is_one_line_naming_the_file(tmp_path):
    """torch.onnx.export with dynamic_axes: the defaulted batch's note is not printed beside the error."""
    nodes = [helper.make_node("Relu", ["input"], ["/relu/Relu_output_0"], name="/relu/Relu"),
             helper.make_node("NonZero", ["/relu/Relu_output_0"], ["output"], name="/NonZero")]
    model = model_with(nodes, [tensor("input", ["batch_size", 7])], [tensor("output", [2, "nnz"], TensorProto.INT64)])
    result = import_model(save(model, tmp_path / "tagger.onnx"), tmp_path)
    assert_one_line_error(result, "tagger.onnx", "unsupported operators (1)", "NonZero at node '/NonZero'")


def test_shape_conflict(tmp_path):
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="the_add")]
    model = model_with(nodes, [tensor("a", [1, 3]), tensor("b", [1, 4])], [tensor("y", [1, 3])])
    result = import_model(save(model, tmp_path / "m.onnx"), tmp_path)
    assert_one_line_error(result, "shape conflict", "the_add", "Add", "[1, 3]", "[1, 4]")


def test_undefined_symbol_then_defined(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = model_with(nodes, [tensor("x", [2, "N"])], [tensor("y", [2, "N"])])
    path = save(model, tmp_path / "m.onnx")
    assert_one_line_error(import_model(path, tmp_path), "'N'", "axis 1", "--define-symbol")
    ok = import_model(path, tmp_path, "--define-symbol", "N=4")
    assert ok.code == 0, ok.stderr
    assert json.loads((tmp_path / "out.json").read_text())["inputs"][0]["shape"] == [2, 4]


def test_unknown_output_name(tmp_path, demo_onnx):
    result = import_model(demo_onnx, tmp_path, "--outputs", "no_such_tensor")
    assert_one_line_error(result, "--outputs", "no_such_tensor")


def test_failed_import_leaves_existing_files_untouched(tmp_path):
    (tmp_path / "out.json").write_text("precious json")
    (tmp_path / "out.data").write_bytes(b"precious data")
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="bad")]
    model = model_with(nodes, [tensor("a", [1, 3]), tensor("b", [1, 4])], [tensor("y", [1, 3])])
    assert import_model(save(model, tmp_path / "m.onnx"), tmp_path).code == 2
    assert (tmp_path / "out.json").read_text() == "precious json"
    assert (tmp_path / "out.data").read_bytes() == b"precious data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.data", "out.json"]


def test_output_folder_under_a_file(tmp_path, demo_onnx):
    (tmp_path / "blocker").write_text("a file")
    result = run_cli("import", "onnx", "--model", demo_onnx, "--output-model", tmp_path / "blocker" / "x.json")
    assert_one_line_error(result, "--output-model", "blocker is a file, not a folder")
    assert [p.name for p in tmp_path.iterdir()] == ["blocker"]


def test_verbose_shows_traceback(tmp_path):
    result = run_cli("--verbose", "import", "onnx", "--model", tmp_path / "nope.onnx")
    assert result.code == 2
    assert "Traceback" in result.stderr


@pytest.mark.parametrize("flag,value,fragment", [
    ("--input-size-list", "1,x,3", "--input-size-list"),
    ("--input-dtype-list", "complex", "--input-dtype-list"),
    ("--define-symbol", "N", "--define-symbol"),
])
def test_bad_flag_values(tmp_path, demo_onnx, flag, value, fragment):
    assert_one_line_error(import_model(demo_onnx, tmp_path, flag, value), fragment)


def test_input_size_list_with_and_without_batch(tmp_path):
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    model = model_with(nodes, [tensor("a", ["N", "C"]), tensor("b", ["unk__286"])], [tensor("y", None)])
    path = save(model, tmp_path / "m.onnx")
    result = import_model(path, tmp_path, "--input-size-list", "3#2,3", "--size-with-batch", "False,True")
    assert result.code == 0, result.stderr
    doc = json.loads((tmp_path / "out.json").read_text())
    assert [entry["shape"] for entry in doc["inputs"]] == [[1, 3], [2, 3]]
    assert doc["outputs"][0]["shape"] == [2, 3]
