"""The integer rule for ConvTranspose (pegasus/quantized/rules/conv_transpose.py: one QConv over the stride
phases, interleaved, cropped) against onnxruntime's own float ConvTranspose on the same integer operands, over
the geometries real models use: strides 1 to 3 (a kernel smaller than its stride included: phases with no tap),
pads, output_padding, output_shape, SAME_UPPER, 1-D, 2-D with unequal strides, 3-D, with and without a bias, under
per-channel int8 and uint8 tables. Exact integer sums requantised once: within 1 LSB of onnxruntime's float result
rounded onto the output grid (the two round at different points), and no layer left in float. The TFLite
side (its TRANSPOSE_CONV bit for bit) is tests/importers/tflite/test_transpose_conv_int8.py; bundles on the host
and Cortex-M are tests/exporters/e2e/test_quantized_bundles.py."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantized.rules.conv_transpose import phase_weights
from pegasus.runtime import interpreter
from tests.support.quantized_bundles import SCHEMES, quantize

RNG = np.random.default_rng(77)

# (id, input shape (N, C, ...), weights (C, M, k...), attributes, bias)
CASES = [
    ("k3-s2", (1, 3, 5, 4), (3, 4, 3, 3), {"strides": [2, 2]}, True),
    ("k4-s2-pads1", (1, 2, 6, 5), (2, 5, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ("k3-s2-outpad", (1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                  "output_padding": [1, 1]}, True),
    ("k2-s2-unet", (2, 4, 3, 5), (4, 3, 2, 2), {"strides": [2, 2]}, True),
    ("k5-s3-output-shape", (1, 2, 3, 4), (2, 3, 5, 5), {"strides": [3, 3], "output_shape": [9, 11]}, False),
    ("k1-s2-empty-phases", (1, 3, 4, 4), (3, 2, 1, 1), {"strides": [2, 2]}, True),
    ("k2-s3-empty-phases", (1, 2, 3, 3), (2, 3, 2, 2), {"strides": [3, 3]}, True),
    ("k3-s1-pads1", (1, 3, 5, 5), (3, 4, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ("strides-1x2", (1, 2, 4, 6), (2, 3, 1, 3), {"strides": [1, 2]}, True),
    ("same-upper", (1, 2, 5, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    ("1d-k4-s2", (1, 3, 7), (3, 2, 4), {"strides": [2], "pads": [1, 1]}, True),
    ("3d-k2-s2", (1, 2, 2, 3, 2), (2, 2, 2, 2, 2), {"strides": [2, 2, 2]}, True),
]


def model(x_shape, w, attrs, bias):
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(bias, "b")] if bias is not None else [])
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias is not None else []), ["y"], **attrs)
    graph = helper.make_graph([node], "deconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def grid(values: np.ndarray, scale, zero, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.rint(values / scale) + zero, info.min, info.max).astype(np.int64)


@pytest.mark.parametrize("scheme", ["pc8", "u8"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_integer_conv_transpose_against_onnxruntime(case, scheme):
    _, x_shape, w_shape, attrs, with_bias = case
    w = (RNG.standard_normal(w_shape) * 0.3).astype(np.float32)
    bias = (RNG.standard_normal(w_shape[1]) * 0.5).astype(np.float32) if with_bias else None
    onnx_model = model(x_shape, w, attrs, bias)
    graph = import_onnx(onnx_model, name="deconv")
    samples = [{"x": RNG.standard_normal(x_shape).astype(np.float32)} for _ in range(4)]
    table = quantize(graph, samples, *SCHEMES[scheme])
    lowered = lower_to_integer(graph, table)
    assert lowered.float_layers == []
    assert "QConv" in {node.op for node in lowered.graph.nodes}
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    y_name = graph.outputs[0]
    got_int = interpreter.run(lowered.graph, feeds, keep_all=True)
    home = lowered.homes[y_name][0]
    xq, wq, yq = table.get("x"), table.get(graph.nodes[0].inputs[1]), table.get(y_name)
    x_int = grid(feeds["x"], xq.scale[0], xq.zero_point[0], xq.numpy_dtype)
    w_scales = np.broadcast_to(np.asarray(wq.scale, np.float64), (w_shape[1],)).reshape(
        (1, -1) + (1,) * (len(w_shape) - 2))
    w_int = grid(w, w_scales, wq.zero_point[0], wq.numpy_dtype)
    x_real = ((x_int - xq.zero_point[0]) * xq.scale[0]).astype(np.float32)
    w_real = ((w_int - wq.zero_point[0]) * w_scales).astype(np.float32)
    reference = model(x_shape, w_real, attrs, bias)
    session = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"])
    y_real = session.run(None, {"x": x_real})[0]
    want = grid(y_real, yq.scale[0], yq.zero_point[0], yq.numpy_dtype)
    got = got_int[home].astype(np.int64)
    assert got.shape == want.shape
    assert int(np.abs(got - want).max()) <= 1
    assert np.mean(got == want) > 0.9


def test_phase_weights_layout():
    """Phase (r0, r1) of a 5x5 kernel at strides (2, 3): its taps t hold w[r + s (J - 1 - t)], J = ceil(k / s);
    taps past the kernel hold the zero point."""
    w = np.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5)
    packed = phase_weights(w, (2, 3), -1)
    assert packed.shape == (6 * 3, 2, 3, 2)
    for p, (r0, r1) in enumerate(np.ndindex(2, 3)):
        for m in range(3):
            for c in range(2):
                for t0 in range(3):
                    for t1 in range(2):
                        k0, k1 = r0 + 2 * (2 - t0), r1 + 3 * (1 - t1)
                        want = w[c, m, k0, k1] if k0 < 5 and k1 < 5 else -1
                        assert packed[p * 3 + m, c, t0, t1] == want
