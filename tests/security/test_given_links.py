"""A model file the user names on the command line may be a symbolic link (model caches such as Hugging
Face's keep files as links into a blob store): it is read. A file a reader finds by itself (the .data beside
NAME.json, external data) never is: tests/security/test_ir_file.py and test_onnx_tflite.py show those refused."""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from tests.conftest import DEMO_DIR
from tests.security.harness import run_many


def test_model_named_through_a_link_is_read(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    real = blobs / "0123abcd"
    real.write_bytes((DEMO_DIR / "lenet_mnist.onnx").read_bytes())
    link = tmp_path / "lenet.onnx"
    link.symlink_to(real)
    [onnx_result] = run_many([["import", "onnx", "--model", link, "--output-model", tmp_path / "m.json",
                               "--output-data", tmp_path / "m.data"]], cwd=tmp_path)
    assert onnx_result.code == 0, onnx_result.stderr
    data = (tmp_path / "m.data").read_bytes()
    for initializer in onnx.load(real).graph.initializer:
        assert numpy_helper.to_array(initializer).astype("float32").tobytes() in data, initializer.name
