"""Model files named like C names: the bundle's entry point is named after the file, and main.onnx or exp.onnx
must not collide with the program around it (the example main.c, the run harness, <math.h>)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.importers.onnx.harness import cli_import, make_model, onnxruntime_outputs, run_cli_here


@pytest.mark.parametrize("stem", ["main", "exp", "int"])
def test_bundle_of_a_model_named_like_a_c_name(tmp_path, stem):
    nodes = [helper.make_node("Sigmoid", ["x"], ["y"], name="/act/Sigmoid")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])], ["y"], [], 13)
    path = tmp_path / f"{stem}.onnx"
    path.write_bytes(model.SerializeToString())
    code, _, stderr, json_path = cli_import(path)
    assert code == 0, stderr
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(1, 6)
    np.save(tmp_path / "x.npy", x)
    code, _, stderr = run_cli_here("run", "--model", json_path, "--model-data", json_path.with_suffix(".data"),
                                   "--target", "x86_64", "--input", tmp_path / "x.npy",
                                   "--output-dir", tmp_path / "out")
    assert code == 0, stderr
    (expected,) = onnxruntime_outputs(path, {"x": x})
    got = np.load(tmp_path / "out" / "outputs.npz")["y"]
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)
