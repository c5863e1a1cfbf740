"""Gemm and MatMul: shape rules (numpy matmul semantics, Gemm's transposes and C broadcast) agree
with the kernels, and results agree with onnxruntime."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops import get_op
from pegasus.ops.registry import ShapeError, make_attrs
from tests.support.ops_against_ort import against_ort, assert_all_same, rand
from tests.support.ops_reference import check_infer

C_SHAPES = [None, (), (1,), (5,), (3, 1), (3, 5), (1, 5)]


@pytest.mark.parametrize("trans_a,trans_b,c_shape", list(itertools.product((0, 1), (0, 1), C_SHAPES)))
def test_gemm_infer_matches_reference(trans_a, trans_b, c_shape):
    a = rand(4, 3) if trans_a else rand(3, 4)
    b = rand(5, 4) if trans_b else rand(4, 5)
    c = None if c_shape is None else rand(*c_shape)
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.5, "beta": 2.0}
    (y,) = check_infer("Gemm", attrs, [a, b] + ([] if c is None else [c]))
    assert y.shape == (3, 5)


@pytest.mark.parametrize("trans_a,trans_b,c_shape", list(itertools.product((0, 1), (0, 1), C_SHAPES[::2])))
def test_gemm_against_onnxruntime(trans_a, trans_b, c_shape):
    a = rand(4, 3) if trans_a else rand(3, 4)
    b = rand(5, 4) if trans_b else rand(4, 5)
    constants = {"b": b} if c_shape is None else {"b": b, "c": rand(*c_shape)}
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.25, "beta": -1.5}
    assert_all_same(against_ort("Gemm", {"a": a}, attrs, opset=13, constants=constants))


def test_gemm_integer_keeps_its_type():
    a, b = np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.int32)
    (y,) = check_infer("Gemm", {}, [a, b, np.int32(1)])
    np.testing.assert_array_equal(y, a @ b + 1)


MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4,)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,)), ((2, 3, 4), (4, 5)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (6, 4, 2)), ((3, 4), (2, 2, 4, 1))]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES)
def test_matmul_infer_and_onnxruntime(a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape)
    (y,) = check_infer("MatMul", {}, [a, b])
    assert y.shape == np.matmul(a, b).shape
    assert_all_same(against_ort("MatMul", {"a": a, "b": b}, opset=13))


def test_matmul_float16_and_int_keep_their_type():
    (y,) = check_infer("MatMul", {}, [rand(2, 3, dtype=np.float16), rand(3, 2, dtype=np.float16)])
    assert y.dtype == np.float16
    (y,) = check_infer("MatMul", {}, [np.ones((2, 3), np.int64), np.ones((3,), np.int64)])
    assert y.tolist() == [3, 3]


@pytest.mark.parametrize("op,shapes,message", [
    ("MatMul", ((3, 4), (5, 2)), "inner dimensions"), ("MatMul", ((2, 3, 4), (3, 4, 2)), "broadcast"),
    ("MatMul", ((), (3,)), "rank"), ("Gemm", ((3, 4), (5, 2)), "inner dimensions"),
    ("Gemm", ((3, 4, 1), (4, 2)), "2-D"), ("Gemm", ((3, 4), (4, 2), (3, 3)), "broadcast")])
def test_linear_shape_errors(op, shapes, message):
    with pytest.raises(ShapeError, match=message):
        get_op(op).infer(make_attrs(op), [TensorType(s, DType.FLOAT32) for s in shapes])
