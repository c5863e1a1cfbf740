"""Element-wise ops at the edges of their domain, as trained models meet them, against onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.importers.onnx.harness import check, make_model


def test_float_division_by_zero_is_ieee(tmp_path):
    """x / relu(d): where d <= 0 the quotient is ±inf (0 / 0 NaN), as onnxruntime computes it, without a NumPy
    warning (a quantized graph's float Div meets this when its divisor's grid rounds a small value to 0: a
    decomposed LayerNorm's standard deviation)."""
    nodes = [helper.make_node("Relu", ["d"], ["/norm/Relu_output_0"], name="/norm/Relu"),
             helper.make_node("Div", ["x", "/norm/Relu_output_0"], ["y"], name="/norm/Div")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch_size", 2, 5]) for n in ("x", "d")]
    x = np.array([[[1.0, -2.0, 0.0, 3.0, 0.5], [0.0, 1.0, -1.0, 2.0, 4.0]]], np.float32)
    d = np.array([[[0.0, -1.0, 0.0, 2.0, 0.25], [1.0, 0.0, -3.0, 0.5, 8.0]]], np.float32)
    (y,) = check(make_model(nodes, inputs, ["y"], [], 14), tmp_path, {"x": x, "d": d})
    assert np.isinf(y).sum() == 4 and np.isnan(y).sum() == 1
