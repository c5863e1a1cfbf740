"""A model whose tensors no bundle can hold, through the command line: ``import onnx`` writes it (exit 0) with
one warning line on stderr; ``export glow`` refuses it with one error line naming the tensor, its size and the
limit, exit 2, and writes nothing (a missing --output-path is not even created). A model of ordinary size
imports without a warning."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from tests.conftest import run_cli

HUGE = [1, 100000, 100000, 100000]


def huge_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, HUGE)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_import_warns_and_export_refuses(tmp_path):
    imported = run_cli("import", "onnx", "--model", huge_model(tmp_path / "huge.onnx"), cwd=tmp_path)
    assert imported.code == 0, imported.stderr
    warning = imported.stderr.splitlines()
    assert len(warning) == 1 and warning[0].startswith("warning: tensor 'x' float32[1,100000,100000,100000]"), warning
    assert "4,000,000,000,000,000 bytes" in warning[0] and "2 GiB" in warning[0]
    assert (tmp_path / "huge.json").exists() and (tmp_path / "huge.data").exists()

    for arch in ("x86_64", "arm"):
        out = tmp_path / f"bundle_{arch}"
        exported = run_cli("export", "glow", "--model", tmp_path / "huge.json", "--model-data", tmp_path / "huge.data",
                           "--output-path", out, "--target", arch)
        assert exported.code == 2 and exported.stdout == ""
        error = exported.stderr.splitlines()
        assert len(error) == 1 and "Traceback" not in exported.stderr, exported.stderr
        assert error[0].startswith("pegasus: error: tensor 'x' float32[1,100000,100000,100000] "
                                   "(1,000,000,000,000,000 elements, 4,000,000,000,000,000 bytes)"), error
        assert "2,147,483,647" in error[0]
        assert not out.exists()


def test_ordinary_model_imports_without_warning(demo_onnx, tmp_path):
    result = run_cli("import", "onnx", "--model", demo_onnx, cwd=tmp_path)
    assert result.code == 0 and result.stderr == "", result.stderr
