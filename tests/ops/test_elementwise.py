"""Unary element-wise ops: shape rules agree with the kernels, and results agree with onnxruntime.

``onnx_vs_ort`` (also used by the binary and quantize_linear tests) builds a one-node ONNX model,
imports and runs it with pegasus, and runs it with onnxruntime as an independent reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto

from pegasus.errors import NeedsConstantError, PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import ShapeError, get_op, make_attrs
from pegasus.runtime.interpreter import run
from tests.support.ops_reference import assert_same, check_infer, onnx_model, onnx_vs_ort

RNG = np.random.default_rng(0)


# ---- infer agrees with reference -------------------------------------------------------------------

UNARY = [("Relu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Clip", {"min": -0.5}), ("Clip", {"min": -1, "max": 1}),
         ("Sigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Tanh", {}),
         ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Celu", {"alpha": 2.0}), ("ThresholdedRelu", {}),
         ("Shrink", {"bias": 0.1}), ("Softplus", {}), ("Softsign", {}), ("Mish", {}), ("Swish", {"alpha": 2.0}),
         ("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("Erf", {}), ("Reciprocal", {}), ("Exp", {}),
         ("Log", {}), ("Sqrt", {}), ("Abs", {}), ("Neg", {}), ("Floor", {}), ("Ceil", {}), ("Round", {}),
         ("Sign", {}), ("Sin", {}), ("Cos", {}), ("Tan", {}), ("Atan", {}), ("IsNaN", {}), ("IsInf", {}),
         ("Cast", {"to": "int8"}), ("Cast", {"to": "bool"}), ("Cast", {"to": "float16"})]


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op,attrs", UNARY, ids=[f"{op}-{i}" for i, (op, _) in enumerate(UNARY)])
def test_infer_matches_reference(op, attrs, dtype, shape):
    check_infer(op, attrs, [RNG.standard_normal(shape).astype(dtype)])


@pytest.mark.parametrize("op,dtype", [("Relu", np.int8), ("Abs", np.int32), ("Neg", np.int64), ("Sign", np.int16),
                                      ("Clip", np.uint8), ("Not", np.bool_), ("Cast", np.int32)])
def test_infer_matches_reference_integers(op, dtype):
    (y,) = check_infer(op, {}, [RNG.integers(0, 2, (3, 4)).astype(dtype)])
    assert y.dtype == (np.float32 if op == "Cast" else dtype)


def test_facts_come_from_the_base_class():
    for op in ("Relu", "HardSwish", "Gelu", "Clip", "Erf"):
        assert get_op(op).elementwise and get_op(op).inplace, op
    assert get_op("Cast").elementwise and not get_op("Cast").inplace
    assert not get_op("IsNaN").inplace


def test_attrs_have_onnx_defaults():
    assert make_attrs("LeakyRelu").alpha == 0.01
    assert dataclasses.astuple(make_attrs("HardSigmoid")) == (0.2, 0.5)
    assert make_attrs("Clip") == make_attrs("Clip", min=None, max=None)
    assert make_attrs("Gelu").approximate == "none"


# ---- against onnxruntime -------------------------------------------------------------------------

AGAINST_ORT = [("Relu", {}, 14), ("LeakyRelu", {"alpha": 0.2}, 16), ("Sigmoid", {}, 13),
               ("HardSigmoid", {"alpha": 0.25, "beta": 0.6}, 13), ("HardSwish", {}, 14), ("Tanh", {}, 13),
               ("Elu", {"alpha": 0.7}, 13), ("Selu", {}, 13), ("Celu", {"alpha": 1.5}, 13),
               ("ThresholdedRelu", {"alpha": 0.5}, 13), ("Shrink", {"bias": 0.2, "lambd": 0.3}, 13),
               ("Softplus", {}, 13), ("Softsign", {}, 13), ("Mish", {}, 18), ("Erf", {}, 13),
               ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20), ("Reciprocal", {}, 13), ("Exp", {}, 13),
               ("Abs", {}, 13), ("Neg", {}, 13), ("Floor", {}, 13), ("Ceil", {}, 13), ("Round", {}, 13),
               ("Sign", {}, 13), ("Sin", {}, 13), ("Cos", {}, 13), ("Tan", {}, 13), ("Atan", {}, 13)]


@pytest.mark.parametrize("op,attrs,opset", AGAINST_ORT, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(AGAINST_ORT)])
def test_against_onnxruntime(op, attrs, opset):
    x = (RNG.standard_normal((2, 3, 8)) * 3).astype(np.float32)
    x[0, 0, :4] = [0.5, -0.5, 1.5, -2.5]  # ties for Round
    assert_same(*onnx_vs_ort(op, {"x": x}, attrs, opset=opset), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Log", "Sqrt"])
def test_positive_domain_against_onnxruntime(op):
    x = RNG.uniform(0.01, 10, (4, 5)).astype(np.float32)
    assert_same(*onnx_vs_ort(op, {"x": x}))


def test_erf_is_accurate_in_float64():
    x = np.linspace(-4, 4, 101)
    (y,) = get_op("Erf").reference(make_attrs("Erf"), [x])
    assert y.dtype == np.float64
    np.testing.assert_allclose(y[[0, 50, 100]], [-0.9999999845827421, 0.0, 0.9999999845827421], rtol=1e-15)


# ---- Clip ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (None, 0.5), (-0.5, None), (None, None), (1.0, -1.0)])
def test_clip_inputs_against_onnxruntime(bounds):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    consts = {name: np.float32(v) for name, v in zip(("lo", "hi"), bounds) if v is not None}
    inputs = {"x": x, "lo": None, "hi": None}
    ours, theirs = onnx_vs_ort("Clip", inputs, constants=consts)
    assert_same(ours, theirs)


def test_clip_int8_against_onnxruntime():
    x = RNG.integers(-128, 128, (10,)).astype(np.int8)
    ours, theirs = onnx_vs_ort("Clip", {"x": x, "lo": None, "hi": None},
                               constants={"lo": np.int8(-5), "hi": np.int8(100)})
    assert_same(ours, theirs)


def test_clip6_attributes_become_ir_attributes():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    model = onnx_model("Clip", {"x": x}, {"min": -0.25, "max": 0.5}, opset=10)  # Clip-6 rules opsets 6..10
    graph = import_onnx(model)
    assert graph.nodes[0].attrs == make_attrs("Clip", min=-0.25, max=0.5)
    np.testing.assert_array_equal(run(graph, {"x": x})["y0"], np.clip(x, -0.25, 0.5))


def test_clip_bounds_become_attributes():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    model = onnx_model("Clip", {"x": x, "lo": np.float32(0)}, constants={"lo": np.float32(0)})
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["Clip"] and graph.nodes[0].inputs == ["x"]
    assert graph.nodes[0].attrs == make_attrs("Clip", min=0.0)


def test_clip_runtime_bound_is_a_clear_error():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    model = onnx_model("Clip", {"x": x, "lo": np.zeros((), np.float32)})
    with pytest.raises(NeedsConstantError, match="Clip min"):
        import_onnx(model)


# ---- Cast ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source,target", [
    (np.float32, TensorProto.INT32), (np.float32, TensorProto.BOOL), (np.float32, TensorProto.FLOAT16),
    (np.float32, TensorProto.DOUBLE), (np.int16, TensorProto.INT8), (np.int32, TensorProto.FLOAT),
    (np.bool_, TensorProto.FLOAT), (np.uint8, TensorProto.INT64)])
def test_cast_against_onnxruntime(source, target):
    x = (RNG.standard_normal((3, 5)) * 200).astype(source)
    assert_same(*onnx_vs_ort("Cast", {"x": x}, {"to": target}))


def test_cast_like_casts_to_the_second_input_dtype():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    like = np.zeros((1,), np.float16)
    assert_same(*onnx_vs_ort("CastLike", {"x": x, "like": like}, opset=15))


@pytest.mark.parametrize("target", [TensorProto.BFLOAT16, TensorProto.STRING, TensorProto.FLOAT8E4M3FN])
def test_cast_to_unsupported_type_is_a_clear_error(target):
    model = onnx_model("Cast", {"x": np.zeros((2,), np.float32)}, {"to": target})
    with pytest.raises(PegasusError, match="Cast node .* not supported"):
        import_onnx(model)


def test_cast_ir_attribute_is_a_dtype_name():
    model = onnx_model("Cast", {"x": np.zeros((2,), np.float32)}, {"to": TensorProto.UINT8})
    (node,) = import_onnx(model).nodes
    assert node.attrs.to == "uint8" and DType(node.attrs.to) is DType.UINT8


def test_bad_enum_attributes_are_shape_errors():
    x = TensorType((2,), DType.FLOAT32)
    with pytest.raises(ShapeError, match="approximate"):
        get_op("Gelu").infer(make_attrs("Gelu", approximate="fast"), [x])
    u = TensorType((2,), DType.UINT8)
    with pytest.raises(ShapeError, match="direction"):
        get_op("BitShift").infer(make_attrs("BitShift", direction="UP"), [u, u])
