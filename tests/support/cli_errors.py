"""Small ONNX models written to files and the one-line error check (exit code, a single line naming what is
wrong) of the command-line and importer error tests."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from tests.conftest import run_cli


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def model_with(nodes, inputs, outputs, opset=13, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def assert_one_line_error(result, *fragments):
    assert result.code == 2, (result.code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pegasus: error:"), lines[0]
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def import_model(path: Path, tmp_path: Path, *extra: str):
    return run_cli("import", "onnx", "--model", path, "--output-model", tmp_path / "out.json",
                   "--output-data", tmp_path / "out.data", *extra)
