"""Resize and Upsample: the plan from ONNX scales/sizes/axes, shape rule vs kernel, and converters
of every opset against onnxruntime (an independent implementation) on one-node models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pegasus.importers.onnx.loader import import_onnx
from pegasus.ops.registry import ShapeError
from pegasus.ops.resize import resize_plan
from tests.support.ops_reference import assert_same, check_infer, onnx_model, onnx_vs_ort

RNG = np.random.default_rng(7)
NO_ROI = np.array([], np.float32)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


# ---- plan and shape rule --------------------------------------------------------------------------

def test_plan_from_scales_sizes_axes_and_aspect_policy():
    assert resize_plan((1, 3, 5, 7), scales=(1, 1, 2.5, 0.5)) == ((1, 3, 12, 3), (1, 1, 2.5, 0.5),
                                                                  (0, 0, 0, 0, 1, 1, 1, 1))
    sizes, scales, _ = resize_plan((1, 3, 4, 8), sizes=(6, 6), axes=(3, 2), keep_aspect_ratio_policy="not_larger")
    assert sizes == (1, 3, 3, 6) and scales[2] == scales[3] == 0.75
    sizes, _, _ = resize_plan((1, 3, 4, 8), sizes=(6, 6), axes=(2, 3), keep_aspect_ratio_policy="not_smaller")
    assert sizes == (1, 3, 6, 12)
    with pytest.raises(ShapeError):
        resize_plan((1, 3), scales=(2.0,))


ATTRS = [{"mode": m, "coordinate_transformation_mode": c}
         for m, c in itertools.product(["nearest", "linear", "cubic"], ["half_pixel", "align_corners"])]


EXTRA = [{"mode": "linear", "antialias": True}, {"mode": "cubic", "exclude_outside": True}]


@pytest.mark.parametrize("attrs", ATTRS + EXTRA)
@pytest.mark.parametrize("sizes", [(2, 3, 9, 4), (2, 3, 1, 1)])
def test_infer_matches_reference(attrs, sizes):
    check_infer("Resize", {**attrs, "sizes": sizes}, [rand(2, 3, 5, 6)])


def test_scales_alone_give_floor_of_the_scaled_size_and_integers_stay_integers():
    (y,) = check_infer("Resize", {"scales": (1.0, 2.5), "mode": "linear"}, [np.arange(6, dtype=np.uint8).reshape(2, 3)])
    assert y.shape == (2, 7) and y.dtype == np.uint8


# ---- converters against onnxruntime ----------------------------------------------------------------

COORDINATES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"]


@pytest.mark.parametrize("mode, coordinates", list(itertools.product(["nearest", "linear", "cubic"], COORDINATES)))
@pytest.mark.parametrize("scales", [(1, 1, 2.3, 0.6), (1, 1, 0.5, 1.7), (1, 1, 0.2, 0.5)])
def test_resize_scales_match_onnxruntime(mode, coordinates, scales):
    if mode == "nearest" and coordinates == "half_pixel_symmetric" and scales[2] != 0.2:
        pytest.skip("onnxruntime's nearest path ignores the half_pixel_symmetric offset (its linear path applies it)")
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates}
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 2, 5, 7)}, attrs, opset=19,
                               constants={"r": NO_ROI, "s": f32(*scales)})
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "asymmetric", "tf_half_pixel_for_nn", "align_corners"])
def test_nearest_modes_match_onnxruntime(nearest_mode, coordinates):
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coordinates, "nearest_mode": nearest_mode}
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 1, 4, 6)}, attrs, opset=11,
                               constants={"r": NO_ROI, "s": f32(1, 1, 2.0, 0.5)})
    assert_same(ours, theirs)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("scales", [(0.4, 0.6), (0.3, 1.5)])
def test_antialias_matches_onnxruntime(mode, exclude_outside, scales):
    attrs = {"mode": mode, "antialias": 1, "axes": [2, 3], "exclude_outside": exclude_outside}
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 2, 9, 11)}, attrs, opset=18,
                               constants={"r": NO_ROI, "s": f32(*scales)})
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


def test_sizes_with_axes_and_aspect_policy_match_onnxruntime():
    attrs = {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_smaller"}
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 2, 9, 11)}, attrs, opset=18,
                               constants={"r": NO_ROI, "s": np.array([], np.float32), "z": np.array([5, 4], np.int64)})
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


def test_crop_and_resize_with_extrapolation_matches_onnxruntime():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": -3.0}
    constants = {"r": f32(0, 0, -0.2, 0.3, 1, 1, 1.2, 0.8), "s": np.array([], np.float32),
                 "z": np.array([1, 2, 4, 3], np.int64)}
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 2, 5, 7)}, attrs, opset=13, constants=constants)
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, opset", [("Resize", 10), ("Upsample", 9), ("Upsample", 7)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 1.5, 2.5)])
def test_legacy_upsampling_matches_onnxruntime(op, opset, mode, scales):
    attrs = {"mode": mode, **({"scales": [float(s) for s in scales]} if opset == 7 else {})}
    constants = {} if opset == 7 else {"s": f32(*scales)}
    ours, theirs = onnx_vs_ort(op, {"x": rand(1, 2, 3, 4)}, attrs, opset=opset, constants=constants)
    assert_same(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize("scales", [(1, 1, 0.5, 0.4), (1, 1, 1.5, 0.6)])
def test_resize10_nearest_shrinks_with_ceil_even_mixed_with_enlarging(scales):
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 2, 5, 7)}, {"mode": "nearest"}, opset=10,
                               constants={"s": f32(*scales)})
    assert_same(ours, theirs)


def test_mixed_legacy_nearest_becomes_two_resizes():
    model = onnx_model("Upsample", {"x": rand(1, 1, 4, 4)}, {"mode": "nearest", "scales": [1, 1, 2, 0.5]}, opset=7)
    graph = import_onnx(model, optimize=False)
    assert [n.attrs.nearest_mode for n in graph.nodes] == ["floor", "ceil"]


def test_output_size_from_a_scale_is_computed_like_onnxruntime():
    ours, theirs = onnx_vs_ort("Resize", {"x": rand(1, 1, 10, 10)}, {"mode": "nearest"}, opset=13,
                               constants={"r": NO_ROI, "s": f32(1, 1, 0.7, 0.3)})
    assert ours.shape == theirs.shape == (1, 1, 7, 3)
    assert_same(ours, theirs)
