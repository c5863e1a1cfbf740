"""The Resize emitter compiled into one host bundle and compared with the reference interpreter: nearest
(every nearest_mode), linear and cubic under every coordinate_transformation_mode, up and down,
antialias, exclude_outside, cubic_coeff_a, tf_crop_and_resize with extrapolation, resizing of
non-spatial axes, and dtypes: float32 and float16 within tolerance, integers exactly (rounding half
to even and clamping as the reference does). Upsampling models are also checked against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.ops.registry import make_attrs
from pegasus.ops.resize import Resize
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.host_runner import run_bundle_host
from tests.support.shape_samples import sample

X = sample((1, 2, 4, 5)) / 4
COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")
SIZES = {"up": (1, 2, 7, 9), "down": (1, 2, 3, 2), "mixed": (1, 2, 9, 3)}
ROI = (0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3)     # reaches outside the input: extrapolation


def _attrs(mode: str, coordinates: str, sizes: tuple[int, ...], **extra) -> dict:
    roi = ROI if coordinates == "tf_crop_and_resize" else ()
    return {"mode": mode, "coordinate_transformation_mode": coordinates, "sizes": sizes, "roi": roi,
            "extrapolation_value": -2.5, **extra}


BYTES = (np.arange(40, dtype=np.uint8).reshape(1, 2, 4, 5) * 6 + 9) ^ 0x55   # cubic overshoots past 0 and 255

FLOAT_CASES = (
    [Case(f"{mode}-{coordinates}-{name}", "Resize", [X], _attrs(mode, coordinates, sizes))
     for mode in ("nearest", "linear", "cubic") for coordinates in COORDINATES for name, sizes in SIZES.items()]
    + [Case(f"nearest-{rule}-{name}", "Resize", [X], _attrs("nearest", "asymmetric", sizes, nearest_mode=rule))
       for rule in ("round_prefer_ceil", "floor", "ceil") for name, sizes in SIZES.items()]
    + [Case(f"{mode}-antialias-{name}", "Resize", [sample((1, 1, 12, 10))], _attrs(mode, "half_pixel", sizes,
                                                                                    antialias=1))
       for mode in ("linear", "cubic") for name, sizes in (("down", (1, 1, 5, 3)), ("mixed", (1, 1, 3, 14)))]
    + [Case(f"cubic-exclude-outside-{name}", "Resize", [X], _attrs("cubic", "half_pixel", sizes, exclude_outside=1))
       for name, sizes in SIZES.items()]
    + [Case("cubic-coeff-a", "Resize", [X], _attrs("cubic", "align_corners", (1, 2, 7, 9), cubic_coeff_a=-0.5)),
       Case("linear-scales", "Resize", [X], {"mode": "linear", "scales": (1, 1, 2, 1.5)}),
       Case("nearest-scales-upsample", "Resize", [X], {"mode": "nearest", "scales": (1, 1, 2, 2),
                                                       "coordinate_transformation_mode": "asymmetric",
                                                       "nearest_mode": "floor"}),
       Case("linear-all-axes", "Resize", [sample((2, 3, 4))], {"mode": "linear", "sizes": (3, 5, 2)}),
       Case("linear-identity", "Resize", [X], {"mode": "linear", "sizes": X.shape}),
       Case("cubic-1d", "Resize", [sample((6,))], {"mode": "cubic", "sizes": (11,)}),
       Case("linear-to-one", "Resize", [X], _attrs("linear", "align_corners", (1, 2, 1, 1)))]
)


def _dtype_cases(dtype: str) -> list[Case]:
    x = BYTES if dtype == "uint8" else sample((1, 2, 4, 5), dtype)
    tolerance = {"rtol": 2e-3, "atol": 2e-3} if dtype == "float16" else {}
    return [Case(f"{mode}-{coordinates}-{dtype}", "Resize", [x], _attrs(mode, coordinates, (1, 2, 7, 9)), **tolerance)
            for mode in ("nearest", "linear", "cubic") for coordinates in ("half_pixel", "tf_crop_and_resize")]


CASES = FLOAT_CASES + [case for dtype in ("float16", "uint8", "int8", "int32", "int64") for case in _dtype_cases(dtype)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("resize"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_only_resized_axes_get_tables():
    """An NCHW upsample builds taps for H and W only; N and C are walked directly."""
    attrs = make_attrs("Resize", mode="cubic", sizes=(1, 3, 8, 10))
    taps = Resize.sampling(attrs, (1, 3, 4, 5))
    assert [t.axis for t in taps] == [2, 3]
    assert all(t.index.shape == (n, 4) and np.allclose(t.weights.sum(axis=1), 1) for t, n in zip(taps, (8, 10)))


@pytest.mark.parametrize(("mode", "coordinates", "opset"), [("linear", "half_pixel", 13),
                                                            ("cubic", "align_corners", 13),
                                                            ("nearest", "asymmetric", 11),
                                                            ("linear", "pytorch_half_pixel", 18)])
def test_matches_onnxruntime(tmp_path, mode, coordinates, opset):
    x = sample((1, 3, 5, 6)) / 10
    sizes = np.array([1, 3, 9, 13], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates}
    if mode == "nearest":
        attrs["nearest_mode"] = "floor"
    node = helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], **attrs)   # (opset 11 needs all)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(sizes, "sizes"),
                                           numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
                                           numpy_helper.from_array(np.zeros(0, np.float32), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    import onnxruntime as ort
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
