"""Pooling emitters (MaxPool with and without Indices, AveragePool, GlobalMaxPool, GlobalAveragePool)
in host bundles against the reference interpreter: float outputs within rtol 1e-4 / atol 1e-5, Indices
and integer outputs exactly. Covers padding, ceil_mode, SAME_*, dilations, 1-D/3-D, count_include_pad,
row- and column-major Indices, ties, NaN, -inf with padding, integer and float16/float64 types; under
the tilings of test_kernels_conv.py; plus onnxruntime on one model.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.conv_tilings import TILINGS, half_precision, run_tiled
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(13)


def _x(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-3, 3, shape).astype(dtype)


def _ints(*shape, dtype="int8", low=-100, high=100) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


def _with_nans(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.flat[::7] = np.nan
    return x


def _max(id_, x, indices=False, **attrs) -> Case:
    return Case(id_, "MaxPool", [x], attrs, outputs=(True, indices))


def _avg(id_, x, **attrs) -> Case:
    return Case(id_, "AveragePool", [x], attrs)


MAX_CASES = [
    _max("lenet-pool1", _x(1, 20, 24, 24), kernel_shape=[2, 2], strides=[2, 2]),
    _max("lenet-pool2", _x(1, 50, 8, 8), kernel_shape=[2, 2], strides=[2, 2]),
    _max("pads-ceil", _x(2, 3, 11, 13), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    _max("dilated", _x(1, 3, 11, 13), kernel_shape=[3, 2], dilations=[2, 2], pads=[2, 1, 2, 1]),
    _max("same-upper-3d", _x(1, 2, 5, 6, 7), kernel_shape=[2, 3, 2], auto_pad="SAME_UPPER"),
    _max("same-lower", _x(1, 2, 7, 9), kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_LOWER"),
    _max("1d", _x(1, 3, 20), kernel_shape=[3], strides=[2], pads=[1, 1]),
    _max("wide-stride3", _x(1, 2, 4, 70), kernel_shape=[2, 3], strides=[1, 3]),
    _max("stride6-gather", _x(1, 2, 3, 50), kernel_shape=[1, 2], strides=[1, 6]),
    _max("int8", _ints(1, 3, 9, 9), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    _max("uint8-ceil", _ints(1, 3, 9, 9, dtype="uint8", low=0, high=255), kernel_shape=[2, 2], strides=[2, 2],
         ceil_mode=1),
    _max("int32", _ints(1, 2, 6, 7, dtype="int32"), kernel_shape=[2, 2]),
    _max("f64", _x(1, 2, 9, 9, dtype=np.float64), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    _max("f16", _x(1, 2, 9, 9, dtype=np.float16), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    _max("nan", _with_nans(_x(1, 2, 8, 19)), kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 1]),
    _max("indices", _x(2, 3, 11, 13), True, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    _max("indices-column-major", _x(1, 3, 7, 10), True, kernel_shape=[2, 3], strides=[2, 1], storage_order=1),
    _max("indices-ties", _ints(1, 2, 9, 20, low=0, high=3), True, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    _max("indices-nan", _with_nans(_x(1, 2, 6, 17)), True, kernel_shape=[2, 3], strides=[1, 2]),
    _max("indices-minus-inf-in-padding", np.full((1, 1, 4, 9), -np.inf, np.float32), True, kernel_shape=[3, 3],
         pads=[1, 1, 1, 1]),
    _max("indices-1d-dilated", _x(1, 2, 30), True, kernel_shape=[3], dilations=[3], pads=[2, 2], strides=[2]),
    _max("indices-3d", _x(1, 2, 4, 5, 6), True, kernel_shape=[2, 2, 3], pads=[0, 1, 1, 1, 0, 1]),
]

AVERAGE_CASES = [
    _avg("pads-ceil", _x(1, 3, 11, 13), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    _avg("count-pads-ceil", _x(1, 3, 11, 13), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
         count_include_pad=1),
    _avg("same-lower-count-pads", _x(1, 3, 11, 13), kernel_shape=[2, 4], auto_pad="SAME_LOWER", count_include_pad=1),
    _avg("same-upper", _x(1, 3, 10, 12), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    _avg("dilated", _x(1, 2, 12, 14), kernel_shape=[2, 3], dilations=[3, 2], pads=[1, 2, 1, 2]),
    _avg("uneven-pads-count", _x(1, 2, 7, 30), kernel_shape=[3, 5], pads=[0, 2, 2, 1], strides=[1, 2],
         count_include_pad=1),
    _avg("1d", _x(2, 3, 21), kernel_shape=[4], strides=[3], pads=[1, 2]),
    _avg("3d", _x(1, 2, 5, 6, 7), kernel_shape=[2, 3, 3], pads=[1, 1, 1, 0, 1, 1]),
    _avg("global-window", _x(1, 4, 7, 7), kernel_shape=[7, 7]),
    _avg("f64", _x(1, 2, 9, 9, dtype=np.float64), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    half_precision(_avg("f16", _x(1, 3, 11, 13, dtype=np.float16), kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
]

GLOBAL_CASES = [
    Case("avg-7x7", "GlobalAveragePool", [_x(2, 5, 7, 7)]),
    Case("avg-1x1", "GlobalAveragePool", [_x(1, 3, 1, 1)]),
    Case("avg-odd", "GlobalAveragePool", [_x(1, 3, 13, 17)]),
    Case("avg-3d", "GlobalAveragePool", [_x(1, 2, 3, 4, 5)]),
    Case("avg-f64", "GlobalAveragePool", [_x(1, 3, 9, 9, dtype=np.float64)]),
    half_precision(Case("avg-f16", "GlobalAveragePool", [_x(1, 3, 9, 9, dtype=np.float16)])),
    Case("max-7x9", "GlobalMaxPool", [_x(2, 5, 7, 9)]),
    Case("max-1d", "GlobalMaxPool", [_x(1, 4, 70)]),
    Case("max-nan", "GlobalMaxPool", [np.where(np.arange(3 * 45).reshape(1, 3, 45) % 45 == 30, np.nan,
                                               _x(1, 3, 45)).astype(np.float32)]),
    Case("max-int32", "GlobalMaxPool", [_ints(1, 3, 9, 9, dtype="int32")]),
    Case("max-uint8", "GlobalMaxPool", [_ints(1, 3, 5, 5, dtype="uint8", low=0, high=255)]),
]

CASES = MAX_CASES + AVERAGE_CASES + GLOBAL_CASES


@pytest.fixture(scope="module", params=list(TILINGS), ids=list(TILINGS))
def results(request, tmp_path_factory):
    return run_tiled(CASES, tmp_path_factory, f"pool-{request.param}", TILINGS[request.param])


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_nan_reaches_the_output(results):
    """A window holding a NaN pools to NaN (the reference's argmax picks the first NaN)."""
    got = results["nan"][0][0]
    assert np.isnan(got).any() and not np.isnan(got).all()


def test_average_of_integers_is_refused(tmp_path):
    with pytest.raises(PegasusError, match="AveragePool on int8"):
        run_cases([_avg("int", _ints(1, 1, 4, 4), kernel_shape=[2, 2])], tmp_path)


def test_matches_onnxruntime(tmp_path):
    """MaxPool with Indices, AveragePool (count_include_pad, ceil_mode) and GlobalAveragePool against
    onnxruntime."""
    x = _x(1, 3, 12, 15)
    nodes = [helper.make_node("MaxPool", ["x"], ["m", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                              ceil_mode=1, count_include_pad=1),
             helper.make_node("GlobalAveragePool", ["x"], ["g"])]
    outputs = [("m", TensorProto.FLOAT), ("i", TensorProto.INT64), ("a", TensorProto.FLOAT), ("g", TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    for (name, _), want in zip(outputs, theirs):
        np.testing.assert_allclose(ours[name], want, rtol=1e-4, atol=1e-5)
