"""Inputs as converters declare them, against onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.importers.onnx.harness import check, cli_import, make_model


def test_batch_declared_as_minus_one(tmp_path):
    """Some converters write a dynamic batch as dim_value -1 (onnxruntime reads it as any size): it is the batch,
    1 by default with a note, as a symbolic one; -1 on another axis asks for the size."""
    weight = numpy_helper.from_array(np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32), "fc.w")
    nodes = [helper.make_node("Gemm", ["x", "fc.w"], ["y"], transB=1, name="fc")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 5])], [weight], 13)
    check(model, tmp_path, {"x": np.ones((1, 3), np.float32)})
    code, _, stderr, _ = cli_import(tmp_path / "model.onnx")
    assert code == 0 and "x: unknown batch = 1" in stderr, stderr

    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -1
    (tmp_path / "other.onnx").write_bytes(model.SerializeToString())
    code, _, stderr, _ = cli_import(tmp_path / "other.onnx")
    assert code == 2 and "unknown dimension at axis 1" in stderr and "--input-size-list" in stderr, stderr
