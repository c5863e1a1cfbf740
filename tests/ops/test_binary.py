"""Broadcasting element-wise ops: shape/dtype rules agree with the kernels, results agree with
onnxruntime, and shapes that do not broadcast are reported."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ops.registry import get_op
from tests.support.ops_reference import assert_same, check_infer, onnx_model, onnx_vs_ort

RNG = np.random.default_rng(1)

SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2)), ((1, 3, 1), (2, 1, 4))]
TWO_INPUT = ["Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
             "GreaterOrEqual", "Max", "Min", "Sum", "Mean"]


def _positive(shape, dtype):
    return RNG.uniform(1, 4, shape).astype(dtype)


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("op", TWO_INPUT)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
def test_infer_matches_reference(op, dtype, a_shape, b_shape):
    (y,) = check_infer(op, {}, [_positive(a_shape, dtype), _positive(b_shape, dtype)])
    assert y.shape == np.broadcast_shapes(a_shape, b_shape)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_infer_matches_reference(op):
    (y,) = check_infer(op, {}, [RNG.integers(0, 2, (3, 4)).astype(bool), RNG.integers(0, 2, (4,)).astype(bool)])
    assert y.dtype == np.bool_


def test_variadic_and_where_infer_match_reference():
    xs = [RNG.standard_normal(s).astype(np.float32) for s in ((3, 1, 4), (5, 1), (4,), ())]
    for op in ("Max", "Min", "Sum", "Mean"):
        for n in (1, 2, 4):
            check_infer(op, {}, xs[:n])
    check_infer("Where", {}, [RNG.integers(0, 2, (5, 1)).astype(bool), xs[0], xs[2]])
    check_infer("PRelu", {}, [xs[0], np.float32([0.1, 0.2, 0.3, 0.4])])
    check_infer("BitShift", {"direction": "RIGHT"}, [np.uint16([256, 3]), np.uint16([2])])


def test_facts():
    for op in ("Add", "Mul", "Max", "Sum", "PRelu"):
        assert get_op(op).elementwise and get_op(op).inplace, op
    for op in ("Equal", "Less", "And", "Where"):
        assert not get_op(op).inplace, op


# ---- against onnxruntime -------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8, np.float64])
def test_arithmetic_against_onnxruntime(op, dtype):
    a = (RNG.standard_normal((2, 3, 4)) * 50).astype(dtype)
    b = (RNG.standard_normal((3, 1)) * 10).astype(dtype)
    b[b == 0] = 3
    assert_same(*onnx_vs_ort(op, {"a": a, "b": b}, opset=14))


def test_integer_div_truncates_toward_zero():
    a = np.int32([7, -7, 7, -7, 6, -6, 0])
    b = np.int32([2, 2, -2, -2, 3, 3, 5])
    ours, theirs = onnx_vs_ort("Div", {"a": a, "b": b}, opset=14)
    assert_same(ours, theirs)
    np.testing.assert_array_equal(ours, [3, -3, -3, 3, 2, -2, 0])


@pytest.mark.parametrize("base,exponent", [(np.float32, np.float32), (np.float32, np.int64), (np.int32, np.int32),
                                           (np.int64, np.float32), (np.float32, np.int32)])
def test_pow_against_onnxruntime(base, exponent):
    a = RNG.uniform(0.5, 3, (3, 4)).astype(base)
    b = RNG.integers(0, 4, (4,)).astype(exponent)
    ours, theirs = onnx_vs_ort("Pow", {"a": a, "b": b}, opset=15)
    assert ours.dtype == base
    assert_same(ours, theirs)


@pytest.mark.parametrize("slope_shape", [(1,), (4,), (3, 1), (2, 3, 4)])
def test_prelu_against_onnxruntime(slope_shape):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = RNG.uniform(0, 1, slope_shape).astype(np.float32)
    assert_same(*onnx_vs_ort("PRelu", {"x": x}, constants={"slope": slope}, opset=16))


def test_prelu_slope_must_broadcast_to_x():
    model = onnx_model("PRelu", {"x": np.zeros((3,), np.float32), "s": np.zeros((2, 3), np.float32)}, opset=16)
    with pytest.raises(PegasusError, match="does not broadcast"):
        import_onnx(model)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_variadic_against_onnxruntime(op, count):
    shapes = [(2, 1, 4), (3, 1), (4,)][:count]
    inputs = {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    assert_same(*onnx_vs_ort(op, inputs, opset=13))


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_comparisons_against_onnxruntime(op, dtype):
    a = RNG.integers(-3, 3, (3, 4)).astype(dtype)
    b = RNG.integers(-3, 3, (4,)).astype(dtype)
    ours, theirs = onnx_vs_ort(op, {"a": a, "b": b}, opset=16)
    assert ours.dtype == np.bool_
    assert_same(ours, theirs)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_against_onnxruntime(op):
    a = RNG.integers(0, 2, (2, 3, 4)).astype(bool)
    b = RNG.integers(0, 2, (3, 1)).astype(bool)
    assert_same(*onnx_vs_ort(op, {"a": a, "b": b}, opset=7))


def test_where_against_onnxruntime():
    cond = RNG.integers(0, 2, (3, 1)).astype(bool)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    y = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    assert_same(*onnx_vs_ort("Where", {"c": cond, "x": x, "y": y}, opset=16))


@pytest.mark.parametrize("fmod,dtype", [(0, np.int32), (1, np.int32), (1, np.float32), (0, np.int64)])
def test_mod_against_onnxruntime(fmod, dtype):
    a = RNG.integers(-20, 20, (3, 5)).astype(dtype)
    b = RNG.choice([-7, -3, 2, 5], (5,)).astype(dtype)
    assert_same(*onnx_vs_ort("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_against_onnxruntime(direction):
    a = RNG.integers(0, 200, (3, 4)).astype(np.uint8)
    b = RNG.integers(0, 4, (4,)).astype(np.uint8)
    assert_same(*onnx_vs_ort("BitShift", {"a": a, "b": b}, {"direction": direction}, opset=11))


def test_shapes_that_do_not_broadcast_are_reported():
    model = onnx_model("Add", {"a": np.zeros((2, 3), np.float32), "b": np.zeros((4,), np.float32)})
    with pytest.raises(PegasusError, match=r"cannot broadcast shapes \[2, 3\] with \[4\]"):
        import_onnx(model)
