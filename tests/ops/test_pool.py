"""MaxPool, AveragePool and the global pools: shape rules agree with the kernels, results (and
MaxPool's Indices) agree with onnxruntime."""

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

RNG_INT = np.random.default_rng(3)
WINDOWS = list(itertools.product((1, 2, 3), ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"), (1, 2), (0, 1)))


def _attrs(nd, auto_pad, stride, ceil_mode, **extra):
    attrs = {"kernel_shape": [3, 2, 3][:nd], "auto_pad": auto_pad, "strides": [stride] * nd, **extra}
    if auto_pad == "NOTSET":
        attrs["pads"] = [1] * nd + [0, 1, 1][:nd]
        attrs["ceil_mode"] = ceil_mode
    return attrs


@pytest.mark.parametrize("nd,auto_pad,stride,ceil_mode", WINDOWS)
def test_pool_infer_matches_reference(nd, auto_pad, stride, ceil_mode):
    x = rand(2, 3, *(7, 6, 5)[:nd])
    check_infer("MaxPool", _attrs(nd, auto_pad, stride, ceil_mode), [x])
    check_infer("AveragePool", _attrs(nd, auto_pad, stride, ceil_mode, count_include_pad=ceil_mode), [x])
    check_infer("AveragePool", _attrs(nd, auto_pad, stride, ceil_mode, dilations=[2] * nd), [x])


@pytest.mark.parametrize("nd,auto_pad,stride,ceil_mode", WINDOWS[::2])
def test_maxpool_and_indices_against_onnxruntime(nd, auto_pad, stride, ceil_mode):
    x = rand(2, 3, *(7, 6, 5)[:nd])
    assert_all_same(against_ort("MaxPool", {"x": x}, _attrs(nd, auto_pad, stride, ceil_mode), outputs=2))


@pytest.mark.parametrize("storage_order,dilation", [(0, 2), (1, 1), (1, 2)])
def test_maxpool_indices_storage_order_and_dilations_against_onnxruntime(storage_order, dilation):
    x = rand(2, 3, 7, 6)
    attrs = {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 1, 0, 1], "dilations": [dilation] * 2,
             "storage_order": storage_order}
    assert_all_same(against_ort("MaxPool", {"x": x}, attrs, outputs=2))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_maxpool_integers_against_onnxruntime(dtype):
    x = RNG_INT.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 2, 6, 6)).astype(dtype)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    assert_all_same(against_ort("MaxPool", {"x": x}, attrs))


@pytest.mark.parametrize("nd,auto_pad,stride,ceil_mode", WINDOWS[::2])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_against_onnxruntime(nd, auto_pad, stride, ceil_mode, count_include_pad):
    x = rand(2, 3, *(7, 6, 5)[:nd])
    attrs = _attrs(nd, auto_pad, stride, ceil_mode, count_include_pad=count_include_pad)
    assert_all_same(against_ort("AveragePool", {"x": x}, attrs))


def test_averagepool_dilations_against_onnxruntime():
    x = rand(1, 2, 9, 8)
    attrs = {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 1, 0], "count_include_pad": 1}
    assert_all_same(against_ort("AveragePool", {"x": x}, attrs, opset=19))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 5, 6), (1, 2, 3, 4, 5)])
def test_global_pools(op, shape):
    x = rand(*shape)
    (y,) = check_infer(op, {}, [x])
    assert y.shape == shape[:2] + (1,) * (len(shape) - 2)
    assert_all_same(against_ort(op, {"x": x}))


def test_pool_shape_errors():
    x = TensorType((1, 3, 4, 4), DType.FLOAT32)
    with pytest.raises(ShapeError, match="kernel_shape is required"):
        get_op("MaxPool").infer(make_attrs("MaxPool"), [x])
    with pytest.raises(ShapeError, match="does not fit"):
        get_op("AveragePool").infer(make_attrs("AveragePool", kernel_shape=(5, 5)), [x])
    with pytest.raises(ShapeError, match="spatial axis"):
        get_op("GlobalMaxPool").infer(make_attrs("GlobalMaxPool"), [TensorType((1, 3), DType.FLOAT32)])
