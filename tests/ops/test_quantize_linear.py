"""QuantizeLinear/DequantizeLinear: granularity (per tensor, per axis, blocked), rounding half to
even, saturation and output dtypes, checked against onnxruntime; scale and zero point stay inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import ShapeError, get_op, make_attrs
from pegasus.runtime.interpreter import run
from tests.support.ops_reference import assert_same, check_infer, onnx_model, onnx_vs_ort

RNG = np.random.default_rng(2)
X = (RNG.standard_normal((2, 3, 4)) * 40).astype(np.float32)


def _params(shape, zp_dtype):
    scale = RNG.uniform(0.05, 0.5, shape).astype(np.float32)
    info = np.iinfo(zp_dtype)
    zero_point = RNG.integers(max(info.min, -20), min(info.max, 20), shape).astype(zp_dtype)
    return scale, zero_point


GRANULARITY = [((), 1, 0), ((1,), 1, 0), ((3,), 1, 0), ((4,), -1, 0), ((2,), 0, 0), ((2, 2, 4), 1, 2)]


@pytest.mark.parametrize("shape,axis,block", GRANULARITY)
@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8, np.int16, np.uint16])
def test_quantize_against_onnxruntime(shape, axis, block, zp_dtype):
    scale, zero_point = _params(shape, zp_dtype)
    attrs = {"axis": axis, **({"block_size": block} if block else {})}
    ours, theirs = onnx_vs_ort("QuantizeLinear", {"x": X}, attrs, constants={"s": scale, "zp": zero_point}, opset=21)
    assert ours.dtype == zp_dtype
    assert_same(ours, theirs)


@pytest.mark.parametrize("shape,axis,block", GRANULARITY)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
def test_dequantize_against_onnxruntime(shape, axis, block, dtype):
    scale, zero_point = _params(shape, dtype)
    x = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, X.shape).astype(dtype)
    attrs = {"axis": axis, **({"block_size": block} if block else {})}
    ours, theirs = onnx_vs_ort("DequantizeLinear", {"x": x}, attrs, constants={"s": scale, "zp": zero_point},
                               opset=21)
    assert ours.dtype == np.float32
    assert_same(ours, theirs)


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.float32([0.5, 1.5, 2.5, -0.5, -1.5, 300, -300, 127.5])
    ours, theirs = onnx_vs_ort("QuantizeLinear", {"x": x}, constants={"s": np.float32(1), "zp": np.int8(0)})
    assert_same(ours, theirs)
    np.testing.assert_array_equal(ours, [0, 2, 2, 0, -2, 127, -128, 127])


def test_quantize_without_zero_point_gives_uint8():
    x = np.float32([-1, 0, 0.4, 3, 1000])
    ours, theirs = onnx_vs_ort("QuantizeLinear", {"x": x}, constants={"s": np.float32(0.5)})
    assert ours.dtype == np.uint8
    assert_same(ours, theirs)


def test_quantize_output_dtype_attribute_without_zero_point():
    x = np.float32([-1000, -1, 0, 0.4, 3, 1000])
    ours, theirs = onnx_vs_ort("QuantizeLinear", {"x": x}, {"output_dtype": TensorProto.INT16},
                               constants={"s": np.float32(0.02)}, opset=21)
    assert ours.dtype == np.int16
    assert_same(ours, theirs)


def test_dequantize_int32_without_zero_point():
    x = np.int32([-(2 ** 20), -3, 0, 7, 2 ** 24 + 1])
    ours, theirs = onnx_vs_ort("DequantizeLinear", {"x": x}, constants={"s": np.float32(0.001)})
    assert_same(ours, theirs)


def test_dequantize_float16_scale_gives_float16():
    x = np.int8([-128, -1, 0, 5, 127])
    ours, theirs = onnx_vs_ort("DequantizeLinear", {"x": x}, constants={"s": np.float16(0.1), "zp": np.int8(3)},
                               opset=19)
    assert ours.dtype == np.float16
    assert_same(ours, theirs)


def test_scale_and_zero_point_stay_inputs():
    model = onnx_model("QuantizeLinear", {"x": X, "s": np.float32(0.1), "zp": np.int8(2)},
                       {"axis": -2}, constants={"s": np.float32(0.1), "zp": np.int8(2)})
    (node,) = import_onnx(model).nodes
    assert node.inputs == ["x", "s", "zp"]
    assert node.attrs == make_attrs("QuantizeLinear", axis=1)


def test_infer_matches_reference_for_all_granularities():
    for shape, axis, block in GRANULARITY:
        scale, zero_point = _params(shape, np.int8)
        q_attrs = {"axis": axis, "block_size": block}
        (q,) = check_infer("QuantizeLinear", q_attrs, [X, scale, zero_point])
        check_infer("DequantizeLinear", q_attrs, [q, scale, zero_point])
        check_infer("QuantizeLinear", {**q_attrs, "output_dtype": "int16"}, [X, scale, None])


@pytest.mark.parametrize("shape,axis,block,message", [
    ((5,), 1, 0, r"per-axis scale must have shape \[3\]"),
    ((2, 3), 1, 0, r"per-axis scale must have shape \[3\]"),
    ((2, 3, 4), 1, 2, r"blocked scale must have shape \[2, 2, 4\]"),
    ((3,), 5, 0, "axis 5 is out of range"),
])
def test_bad_scale_shapes_are_reported(shape, axis, block, message):
    model = onnx_model("QuantizeLinear", {"x": X, "s": np.ones(shape, np.float32)}, {"axis": axis, "block_size": block},
                       constants={"s": np.ones(shape, np.float32)}, opset=21)
    with pytest.raises(PegasusError, match=message):
        import_onnx(model)


def test_zero_point_must_match_scale_shape():
    types = [TensorType.of(a) for a in (X, np.ones(3, np.float32), np.zeros(4, np.int8))]
    with pytest.raises(ShapeError, match="zero point shape"):
        get_op("QuantizeLinear").infer(make_attrs("QuantizeLinear"), types)


def test_per_axis_on_a_1d_tensor_uses_axis_0():
    """ONNX says the axis does not matter for 1-D x; we accept the default axis 1 (onnxruntime does not)."""
    x = np.float32([1, -2, 3, 40])
    consts = dict(zip(("s", "zp"), _params((4,), np.int8)))
    model = onnx_model("QuantizeLinear", {"x": x, **consts}, constants=consts)
    ours = run(import_onnx(model), {"x": x})["y0"]
    assert_same(ours, onnx_vs_ort("QuantizeLinear", {"x": x}, {"axis": 0}, constants=consts)[1])
