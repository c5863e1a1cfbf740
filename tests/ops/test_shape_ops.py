"""Data-movement ops: shape rules agree with the kernels, the ONNX parameter rules (Reshape 0/-1,
Slice clamping, Squeeze axes...) resolve as ONNX says, and converters of every opset version give
onnxruntime's results (an independent implementation) on one-node models."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.errors import NeedsConstantError, PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ops.registry import ShapeError, get_op
from pegasus.ops.shape_ops import resolve_reshape, resolve_slice, resolve_squeeze_axes
from tests.support.ops_against_ort import against_ort, assert_all_same
from tests.support.ops_reference import assert_same, check_infer, onnx_model, onnx_vs_ort

RNG = np.random.default_rng(3)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---- infer agrees with reference ------------------------------------------------------------------

CASES = [
    ("Reshape", {"shape": (6, 4)}, [rand(2, 3, 4)]),
    ("Reshape", {"shape": (0, 3)}, [rand(0, 3)]),
    ("Flatten", {"axis": 0}, [rand(2, 3, 4)]),
    ("Flatten", {"axis": -1}, [rand(2, 3, 4)]),
    ("Flatten", {"axis": 3}, [rand(2, 3, 4)]),
    ("Squeeze", {}, [rand(1, 3, 1, 2)]),
    ("Squeeze", {"axes": (-2,)}, [rand(1, 3, 1, 2)]),
    ("Unsqueeze", {"axes": (0, -1)}, [rand(3, 2)]),
    ("Unsqueeze", {"axes": (3, 1)}, [rand(3, 2)]),
    ("Transpose", {}, [rand(2, 3, 4)]),
    ("Transpose", {"perm": (1, 0, 2)}, [rand(2, 3, 4)]),
    ("Transpose", {}, [np.float32(3)]),
    ("Expand", {"shape": (2, 1, 4)}, [rand(3, 1)]),
    ("Expand", {"shape": (1,)}, [rand(3, 2)]),
    ("Tile", {"repeats": (2, 1, 3)}, [rand(2, 3, 1)]),
    ("Tile", {}, [rand(2, 3)]),
    ("Concat", {"axis": -1}, [rand(2, 3), rand(2, 0), rand(2, 5)]),
    ("Split", {"split": (1, 3, 0), "axis": 1}, [rand(2, 4)]),
    ("Slice", {"starts": (-1, 0), "ends": (-1000, 9), "axes": (1, 0), "steps": (-2, 3)}, [rand(5, 6)]),
    ("Slice", {"starts": (1,), "ends": (1,)}, [rand(5, 6)]),
    ("Pad", {"pads": (1, -1, 2, 0), "mode": "reflect"}, [rand(4, 5)]),
    ("Pad", {"pads": (1, 0, 0, 2), "mode": "constant", "constant_value": 7}, [np.arange(6, dtype=np.int32)
                                                                               .reshape(2, 3)]),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [rand(1, 8, 2, 3)]),
    ("SpaceToDepth", {"blocksize": 2}, [rand(1, 2, 4, 6)]),
    ("Gather", {"axis": 1}, [rand(2, 5, 3), np.array([[0, -1], [4, 2]], dtype=np.int64)]),
    ("Gather", {}, [rand(5, 3), np.array(-2, dtype=np.int32)]),
    ("Shape", {"start": -2}, [rand(2, 3, 4)]),
    ("Shape", {"start": 2, "end": 1}, [rand(2, 3, 4)]),
    ("Size", {}, [rand(2, 3, 4)]),
    ("ConstantOfShape", {"shape": (2, 3), "value": 5, "dtype": "int32"}, []),
    ("ConstantOfShape", {"shape": (0,)}, []),
    ("Range", {"start": 10, "limit": 4, "delta": -3, "dtype": "int64"}, []),
    ("Range", {"start": 0.5, "limit": 2.0, "delta": 0.25}, []),
]


@pytest.mark.parametrize("op, attrs, inputs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_infer_matches_reference(op, attrs, inputs):
    check_infer(op, attrs, inputs)


def test_reshapes_are_aliases_and_shape_reads_no_values():
    assert all(get_op(op).alias for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"))
    assert not get_op("Shape").needs_values and not get_op("Size").needs_values


# ---- ONNX parameter rules ------------------------------------------------------------------------

def test_reshape_resolves_zero_and_minus_one():
    assert resolve_reshape((2, 3, 4), (0, -1)) == (2, 12)
    assert resolve_reshape((0, 3), (3, 0), allowzero=True) == (3, 0)
    with pytest.raises(ShapeError):
        resolve_reshape((2, 3), (4, -1))
    with pytest.raises(ShapeError):
        resolve_reshape((2, 3), (-1, -1))


def test_slice_clamps_like_onnx_including_negative_steps():
    assert resolve_slice((10,), (-100,), (100,)) == ((0,), (10,), (1,))
    assert resolve_slice((10,), (100,), (-100,), (), (-1,)) == ((9,), (-11,), (-1,))
    assert resolve_slice((4, 10), (-3,), (-1,), (-1,), (2,)) == ((0, 7), (4, 9), (1, 2))
    canonical = resolve_slice((5, 6), (-1, 5), (-9, 0), (0, 1), (-2, -2))
    assert canonical == ((4, 5), (-6, 0), (-2, -2))
    # stable: the IR form means the same under the ONNX rules
    assert resolve_slice((5, 6), canonical[0], canonical[1], (), canonical[2]) == canonical


def test_squeeze_rejects_a_dimension_that_is_not_one():
    assert resolve_squeeze_axes((1, 3, 1), ()) == (0, 2)
    with pytest.raises(ShapeError):
        resolve_squeeze_axes((1, 3, 1), (1,))


# ---- converters (every opset version) against onnxruntime ------------------------------------------

ORT_CASES = [  # (op, inputs, constants, attrs, opset)
    ("Reshape", {"x": rand(2, 3, 4)}, {"s": i64(0, -1, 2)}, {}, 13),
    ("Reshape", {"x": rand(2, 3, 4)}, {"s": i64(2, 0, 2, 2)}, {}, 7),
    ("Squeeze", {"x": rand(1, 3, 1)}, {}, {}, 11),
    ("Squeeze", {"x": rand(1, 3, 1)}, {}, {"axes": [-1]}, 7),
    ("Squeeze", {"x": rand(1, 3, 1)}, {"a": i64(0)}, {}, 13),
    ("Unsqueeze", {"x": rand(3, 2)}, {}, {"axes": [-1, 0]}, 11),
    ("Unsqueeze", {"x": rand(3, 2)}, {"a": i64(1, 3)}, {}, 13),
    ("Flatten", {"x": rand(2, 3, 4)}, {}, {"axis": -2}, 13),
    ("Transpose", {"x": rand(2, 3, 4)}, {}, {"perm": [2, 0, 1]}, 13),
    ("Expand", {"x": rand(3, 1)}, {"s": i64(2, 1, 4)}, {}, 8),
    ("Tile", {"x": rand(2, 3)}, {"r": i64(2, 2)}, {}, 7),
    ("Slice", {"x": rand(5, 6)}, {}, {"starts": [1, -4], "ends": [100, -1], "axes": [0, 1]}, 9),
    ("Slice", {"x": rand(5, 6)}, {"b": i64(-1, 5), "e": i64(-9, 0), "a": i64(0, 1), "s": i64(-2, -2)}, {}, 13),
    ("Slice", {"x": rand(5, 6)}, {"b": i64(1), "e": i64(2 ** 62)}, {}, 10),
    ("Pad", {"x": rand(3, 4)}, {}, {"pads": [1, 2, 0, 1], "mode": "reflect"}, 7),
    ("Pad", {"x": rand(3, 4)}, {}, {"pads": [1, 0, 2, 2], "mode": "constant", "value": 1.5}, 7),
    ("Pad", {"x": rand(3, 4)}, {"p": i64(2, 2, 1, 0), "v": np.float32(-3)}, {"mode": "constant"}, 11),
    ("Pad", {"x": rand(3, 4)}, {"p": i64(1, -1, 0, 2)}, {"mode": "edge"}, 13),
    ("Pad", {"x": rand(2, 3, 4)}, {"p": i64(3, 1), "v": np.float32(0), "a": i64(-1)}, {"mode": "wrap"}, 19),
    ("DepthToSpace", {"x": rand(1, 8, 2, 3)}, {}, {"blocksize": 2}, 7),
    ("DepthToSpace", {"x": rand(1, 8, 2, 3)}, {}, {"blocksize": 2, "mode": "CRD"}, 13),
    ("SpaceToDepth", {"x": rand(2, 3, 4, 6)}, {}, {"blocksize": 2}, 13),
    ("Gather", {"x": rand(4, 5), "i": np.array([[3, -1], [0, 0]], np.int64)}, {}, {"axis": 1}, 13),
    ("Gather", {"x": rand(4, 5)}, {"i": np.array([-4, 2], np.int32)}, {}, 7),
    ("Concat", {"a": rand(2, 3), "b": rand(2, 1)}, {"c": rand(2, 2)}, {"axis": 1}, 7),
    ("Shape", {"x": rand(2, 3, 4)}, {}, {"start": 1}, 15),
    ("Size", {"x": rand(2, 3, 4)}, {}, {}, 13),
    ("Range", {}, {"a": np.float32(1), "b": np.float32(3.1), "c": np.float32(0.3)}, {}, 11),
]


@pytest.mark.parametrize("op, inputs, constants, attrs, opset", ORT_CASES,
                         ids=[f"{c[0]}-v{c[4]}-{i}" for i, c in enumerate(ORT_CASES)])
def test_converter_matches_onnxruntime(op, inputs, constants, attrs, opset):
    ours, theirs = onnx_vs_ort(op, inputs, attrs, opset=opset, constants=constants)
    assert_same(np.asarray(ours), theirs)


@pytest.mark.parametrize("shape, attrs, constants, opset, outputs", [
    ((4, 6), {"axis": 1}, {}, 7, 3),
    ((4, 6), {"axis": 0, "split": [1, 3]}, {}, 11, 2),
    ((2, 6), {"axis": -1}, {"s": i64(2, 1, 3)}, 13, 3),
    ((4, 8), {"axis": 1, "num_outputs": 4}, {}, 18, 4),
    ((2, 7), {"axis": 1, "num_outputs": 3}, {}, 18, 3),  # uneven: 3, 3, 1
])
def test_split_versions_match_onnxruntime(shape, attrs, constants, opset, outputs):
    pair = against_ort("Split", {"x": rand(*shape)}, attrs, opset=opset, constants=constants, outputs=outputs)
    assert_all_same(pair)


def test_constant_of_shape_and_range_fold_to_constants():
    model = onnx_model("ConstantOfShape", {"s": i64(2, 3)}, opset=20, constants={"s": i64(2, 3)})
    graph = import_onnx(model)
    assert not graph.nodes
    assert graph.tensors["y0"].data.dtype == np.float32 and graph.tensors["y0"].data.shape == (2, 3)


def test_runtime_reshape_shape_is_a_clear_error():
    model = onnx_model("Reshape", {"x": rand(2, 3), "s": i64(3, 2)}, opset=13)
    with pytest.raises(NeedsConstantError, match="target shape"):
        import_onnx(model)


def test_bad_reshape_names_the_node():
    model = onnx_model("Reshape", {"x": rand(2, 3), "s": i64(4, -1)}, opset=13, constants={"s": i64(4, -1)})
    with pytest.raises(PegasusError, match="Reshape node"):
        import_onnx(model)
