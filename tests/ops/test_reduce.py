"""Reductions, ArgMax/ArgMin and Softmax/LogSoftmax: shape rules agree with the kernels, empty
reductions give the identity, and converters of every opset (axes as attribute or input, the old
2-D Softmax) give onnxruntime's results on one-node models."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.importers.onnx.loader import import_onnx
from tests.support.ops_reference import assert_same, check_infer, onnx_model, onnx_vs_ort

RNG = np.random.default_rng(5)
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---- infer agrees with reference ------------------------------------------------------------------

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("attrs", [{}, {"axes": (-1, 0), "keepdims": False}, {"axes": (1,)},
                                   {"noop_with_empty_axes": True}, {"axes": (2,), "keepdims": False}])
def test_reduce_infer_matches_reference(op, attrs):
    check_infer(op, attrs, [positive(2, 3, 4)])


@pytest.mark.parametrize("op, attrs", [("ArgMax", {}), ("ArgMin", {"axis": -1, "keepdims": False}),
                                       ("ArgMax", {"axis": 1, "select_last_index": True}),
                                       ("Softmax", {}), ("Softmax", {"axis": 0}), ("LogSoftmax", {"axis": 1})])
def test_axis_ops_infer_matches_reference(op, attrs):
    check_infer(op, attrs, [rand(2, 3, 4)])


@pytest.mark.parametrize("op, identity", [("ReduceSum", 0), ("ReduceProd", 1), ("ReduceMax", -np.inf),
                                          ("ReduceMin", np.inf), ("ReduceL2", 0), ("ReduceLogSumExp", -np.inf)])
def test_reduction_over_an_empty_set_gives_the_identity(op, identity):
    (result,) = check_infer(op, {"axes": (1,)}, [np.zeros((2, 0, 3), np.float32)])
    assert result.shape == (2, 1, 3) and np.all(result == identity)


def test_bool_max_and_argmax_of_ties():
    (result,) = check_infer("ReduceMax", {"axes": (1,), "keepdims": False}, [np.array([[0, 1], [0, 0]], bool)])
    assert result.tolist() == [True, False]
    x = np.array([[1, 3, 3, 0]], np.float32)
    assert check_infer("ArgMax", {"axis": 1}, [x])[0].tolist() == [[1]]
    assert check_infer("ArgMax", {"axis": 1, "select_last_index": True}, [x])[0].tolist() == [[2]]


def test_softmax_is_stable_for_large_inputs():
    (y,) = check_infer("Softmax", {}, [np.array([[1000.0, 1001.0, 1002.0]], np.float32)])
    np.testing.assert_allclose(y, [[0.09003057, 0.24472847, 0.66524096]], rtol=1e-6)


# ---- converters against onnxruntime ----------------------------------------------------------------

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset, axes_as_input", [(11, False), (13, None), (18, True)])
def test_reduce_versions_match_onnxruntime(op, opset, axes_as_input):
    if axes_as_input is None:  # opset 13: only ReduceSum takes axes as an input
        axes_as_input = op == "ReduceSum"
    x = positive(2, 3, 4)
    if axes_as_input:
        ours, theirs = onnx_vs_ort(op, {"x": x}, {"keepdims": 0}, opset=opset, constants={"a": i64(-1, 0)})
    else:
        ours, theirs = onnx_vs_ort(op, {"x": x}, {"keepdims": 0, "axes": [-1, 0]}, opset=opset)
    assert_same(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
def test_reduce_all_axes_and_noop(op):
    opset = 13 if op == "ReduceSum" else 18
    x = rand(2, 3)
    assert_same(*onnx_vs_ort(op, {"x": x}, {}, opset=opset), rtol=1e-5)
    assert_same(*onnx_vs_ort(op, {"x": x}, {"noop_with_empty_axes": 1}, opset=opset))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset, attrs", [(11, {"axis": -1}), (12, {"axis": 1, "select_last_index": 1}),
                                          (13, {"axis": 0, "keepdims": 0})])
def test_arg_reduce_matches_onnxruntime(op, opset, attrs):
    x = RNG.integers(0, 3, (3, 4, 2)).astype(np.float32)  # many ties
    assert_same(*onnx_vs_ort(op, {"x": x}, attrs, opset=opset))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset, axis", [(11, None), (11, 0), (11, -2), (11, 3), (7, 2), (13, None), (13, 1)])
def test_softmax_versions_match_onnxruntime(op, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    assert_same(*onnx_vs_ort(op, {"x": rand(2, 3, 4, 5)}, attrs, opset=opset), rtol=1e-5, atol=1e-6)


def test_old_softmax_is_built_from_registry_ops():
    graph = import_onnx(onnx_model("Softmax", {"x": rand(2, 3, 4)}, {"axis": 1}, opset=11), optimize=False)
    assert [n.op for n in graph.nodes] == ["Flatten", "Softmax", "Reshape"]
    graph = import_onnx(onnx_model("Softmax", {"x": rand(2, 3, 4)}, {"axis": -1}, opset=11), optimize=False)
    assert [n.op for n in graph.nodes] == ["Softmax"]
