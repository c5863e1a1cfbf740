"""Channels-last spatial ops (pegasus/ops/layout.py): the reference kernels against onnxruntime running the
channels-first ONNX op on the transposed input, the integer twins against their own channels-first form,
and host bundles of channels-last graphs (native kernels or the exporter's transpose fallback) against the
reference."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.ops import get_op, make_attrs
from pegasus.runtime.interpreter import run as run_graph
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(11)

# (op, attributes, input shape NCHW, weight shape or None)
CASES = [
    ("Conv", {"pads": (1, 1, 1, 1)}, (1, 3, 7, 6), (4, 3, 3, 3)),
    ("Conv", {"auto_pad": "SAME_UPPER", "strides": (2, 2)}, (2, 4, 9, 8), (6, 4, 3, 3)),
    ("Conv", {"group": 4, "pads": (1, 1, 1, 1), "dilations": (2, 1)}, (1, 4, 8, 8), (8, 1, 3, 3)),
    ("Conv", {}, (1, 5, 12), (3, 5, 3)),
    ("ConvTranspose", {"strides": (2, 2), "pads": (1, 1, 0, 0)}, (1, 3, 5, 4), (3, 2, 3, 3)),
    ("MaxPool", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}, (1, 5, 9, 7), None),
    ("AveragePool", {"kernel_shape": (2, 3), "auto_pad": "SAME_UPPER"}, (2, 3, 6, 7), None),
    ("GlobalAveragePool", {}, (1, 6, 5, 4), None),
    ("GlobalMaxPool", {}, (1, 6, 5, 4), None),
]


def _onnx_reference(op: str, attrs: dict, x_first: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    inputs = ["x"] + (["w"] if w is not None else [])
    onnx_attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    node = helper.make_node(op, inputs, ["y"], **onnx_attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_first.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")] if w is not None else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x_first})[0]


def _channels_last_graph(op: str, attrs: dict, x_last_shape: tuple[int, ...], w: np.ndarray | None) -> Graph:
    graph = Graph("layout")
    builder = GraphBuilder(graph)
    builder.add_input("x", TensorType(x_last_shape, DType.FLOAT32))
    inputs = ["x"] + ([builder.add_constant("w", w)] if w is not None else [])
    builder.emit(op, inputs, {**attrs, "channels_last": True}, name="layer", outputs=["y"])
    graph.outputs = ["y"]
    return graph


def _last(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(array, 1, -1))


@pytest.mark.parametrize("op, attrs, shape, w_shape", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_channels_last_reference_matches_onnxruntime(op, attrs, shape, w_shape):
    x_first = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32) if w_shape else None
    expected = _last(_onnx_reference(op, attrs, x_first, w))
    graph = _channels_last_graph(op, attrs, _last(x_first).shape, w)
    assert graph.type_of("y").shape == expected.shape
    got = run_graph(graph, {"x": _last(x_first)})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, attrs, shape, w_shape", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_channels_last_bundle_matches_onnxruntime(op, attrs, shape, w_shape, tmp_path):
    x_first = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32) if w_shape else None
    expected = _last(_onnx_reference(op, attrs, x_first, w))
    graph = _channels_last_graph(op, attrs, _last(x_first).shape, w)
    got = run_bundle_host(graph, {"x": _last(x_first)}, workdir=tmp_path)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_integer_conv_and_average_pool_channels_last():
    """QConv/QAveragePool on channels-last data give the channels-first results, transposed, bit for bit
    (the channels-first kernels are checked against exact float64 sums in tests/quantize)."""
    x = RNG.integers(-128, 128, (1, 4, 6, 5)).astype(np.int8)
    w = RNG.integers(-127, 128, (3, 4, 3, 3)).astype(np.int8)
    bias = RNG.integers(-1000, 1000, (3,)).astype(np.int32)
    qconv = get_op("QConv")
    common = {"pads": (1, 1, 1, 1), "multiplier": (1518500250, 1518500250, 1073741824), "shift": (38, 37, 36),
              "out_zero_point": 3, "x_zero_point": -2}
    first = qconv.reference(make_attrs(qconv, **common), [x, w, bias])[0]
    last = qconv.reference(make_attrs(qconv, **common, channels_last=True), [_last(x), w, bias])[0]
    np.testing.assert_array_equal(last, _last(first))
    qpool = get_op("QAveragePool")
    common = {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "multiplier": tuple(range(1, 10)), "shift": (2,) * 9}
    first = qpool.reference(make_attrs(qpool, **common), [x])[0]
    last = qpool.reference(make_attrs(qpool, **common, channels_last=True), [_last(x)])[0]
    np.testing.assert_array_equal(last, _last(first))
