"""Element-wise ops at the edges of their domain, as trained models meet them, against onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

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


def test_quantize_linear_of_nan_and_inf(tmp_path):
    """QuantizeLinear of 0 / 0 (NaN) gives the type's minimum and ±inf saturates, as onnxruntime has it: the float
    Div of a quantized graph meets it (a decomposed LayerNorm whose deviation's grid reads 0)."""
    scale = numpy_helper.from_array(np.float32(0.1), "scale")
    zero_u8, zero_i8 = numpy_helper.from_array(np.uint8(128), "zu8"), numpy_helper.from_array(np.int8(-3), "zi8")
    nodes = [helper.make_node("Div", ["x", "d"], ["q"], name="/Div"),
             helper.make_node("QuantizeLinear", ["q", "scale", "zu8"], ["yu8"], name="/Quantize_u8"),
             helper.make_node("QuantizeLinear", ["q", "scale", "zi8"], ["yi8"], name="/Quantize_i8")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6]) for n in ("x", "d")]
    feeds = {"x": np.array([[0, 1, -1, 0.04, 0, 1]], np.float32), "d": np.array([[0, 0, 0, 1, 0, 1]], np.float32)}
    yu8, yi8 = check(make_model(nodes, inputs, ["yu8", "yi8"], [scale, zero_u8, zero_i8], 13), tmp_path, feeds)
    assert yu8[0, 0] == 0 and yi8[0, 0] == -128
