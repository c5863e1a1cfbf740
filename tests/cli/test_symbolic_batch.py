"""A symbolic (tf2onnx's ``unk__123``) or unknown batch on axis 0 of an input imports as batch 1 with one line on
stderr saying so; --define-symbol still overrides it; a symbol on any other axis stays an error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from tests.conftest import run_cli
from tests.support.cli_errors import assert_one_line_error, import_model, model_with, save, tensor


def tf2onnx_like(batch: str | None = "unk__123") -> onnx.ModelProto:
    """input_1 [batch, 8, 8, 3] (channels last) -> Transpose -> Conv 3x3 (4 channels) -> Relu, as tf2onnx writes."""
    rng = np.random.default_rng(5)
    weight = numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "b")
    nodes = [helper.make_node("Transpose", ["input_1"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
             helper.make_node("Conv", ["nchw", "w", "b"], ["conv"], name="conv"),
             helper.make_node("Relu", ["conv"], ["y"], name="relu")]
    return model_with(nodes, [tensor("input_1", [batch, 8, 8, 3])], [tensor("y", [batch, 4, 6, 6])],
                      initializers=[weight, bias])


def input_shapes(json_path: Path) -> list[list[int]]:
    return [entry["shape"] for entry in json.loads(json_path.read_text())["inputs"]]


def test_symbolic_batch_imports_as_one_and_matches_onnxruntime(tmp_path):
    path = save(tf2onnx_like(), tmp_path / "m.onnx")
    result = import_model(path, tmp_path)
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["input_1: batch unk__123 = 1"]
    assert input_shapes(tmp_path / "out.json") == [[1, 8, 8, 3]]

    x = np.random.default_rng(11).normal(size=(1, 8, 8, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = run_cli("inference", "--model", tmp_path / "out.json", "--model-data", tmp_path / "out.data", "--input",
                  tmp_path / "x.npy", "--postprocess", "dump_result", "--output-dir", tmp_path / "dump")
    assert run.code == 0, run.stderr
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input_1": x})[0]
    got = np.load(tmp_path / "dump" / "outputs.npz")["y"][0]
    assert got.shape == expected.shape == (1, 4, 6, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_define_symbol_overrides_the_batch(tmp_path):
    path = save(tf2onnx_like(), tmp_path / "m.onnx")
    result = import_model(path, tmp_path, "--define-symbol", "unk__123=3")
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    assert input_shapes(tmp_path / "out.json") == [[3, 8, 8, 3]]


def test_one_symbol_on_several_inputs_gets_one_value(tmp_path):
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    model = model_with(nodes, [tensor("a", ["unk__7", 5]), tensor("b", ["unk__7", 5])], [tensor("y", ["unk__7", 5])])
    path = save(model, tmp_path / "m.onnx")
    result = import_model(path, tmp_path)
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["a, b: batch unk__7 = 1"]
    assert input_shapes(tmp_path / "out.json") == [[1, 5], [1, 5]]
    assert import_model(path, tmp_path, "--define-symbol", "unk__7=2").code == 0
    assert input_shapes(tmp_path / "out.json") == [[2, 5], [2, 5]]


def test_unknown_batch_is_one_with_a_note(tmp_path):
    path = save(tf2onnx_like(batch=None), tmp_path / "m.onnx")
    declared = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    assert not declared.HasField("dim_value") and not declared.HasField("dim_param")
    result = import_model(path, tmp_path)
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["input_1: unknown batch = 1"]
    assert input_shapes(tmp_path / "out.json") == [[1, 8, 8, 3]]


def test_symbol_on_another_axis_is_still_an_error(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = model_with(nodes, [tensor("x", ["unk__1", 3, "unk__9", 4])], [tensor("y", ["unk__1", 3, "unk__9", 4])])
    path = save(model, tmp_path / "m.onnx")
    result = import_model(path, tmp_path)
    assert_one_line_error(result, "input 'x'", "'unk__9'", "axis 2", "--define-symbol unk__9=VALUE")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    ok = import_model(path, tmp_path, "--define-symbol", "unk__9=6")
    assert ok.code == 0, ok.stderr
    assert input_shapes(tmp_path / "out.json") == [[1, 3, 6, 4]]

