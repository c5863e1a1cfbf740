"""CumSum as torch exports it (``torch.cumsum``: position ids from an attention mask, running totals), against
onnxruntime, and its host bundle against the reference in every direction."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter
from tests.importers.onnx.harness import check, make_model
from tests.support.host_runner import run_bundle_host


@pytest.mark.parametrize("axis, exclusive, reverse", [(-1, 0, 0), (1, 1, 0), (1, 0, 1), (2, 1, 1)])
def test_cumsum_against_onnxruntime_and_bundle(tmp_path, axis, exclusive, reverse):
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse, name="/CumSum"),
             helper.make_node("Mul", ["y", "x"], ["z"], name="/Mul")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 5, 7])]
    model = make_model(nodes, inputs, ["y", "z"], [numpy_helper.from_array(np.array(axis, np.int64), "axis")], 13)
    x = np.random.default_rng(axis + 3).standard_normal((1, 5, 7)).astype(np.float32)
    check(model, tmp_path, {"x": x})
    graph = import_onnx(model)
    expected = interpreter.run(graph, {"x": x})
    actual = run_bundle_host(graph, {"x": x}, workdir=tmp_path)
    for name, want in expected.items():
        np.testing.assert_array_equal(actual[name], want, err_msg=name)
