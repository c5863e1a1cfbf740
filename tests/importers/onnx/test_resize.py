"""Resize as segmentation and detection models use it (U-Net decoders, FPN upsampling, tf2onnx's crop and
resize), quantized: interpolating the levels of the input's grid stays within an output step or so of
onnxruntime's float Resize, in every mode."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.assign import build_table
from pegasus.quantizers.calibrate import calibrate
from pegasus.quantizers.schemes import Scheme
from pegasus.runtime import interpreter
from tests.importers.onnx.harness import make_model, onnxruntime_outputs


@pytest.mark.parametrize("attrs, scales", [
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, [1, 1, 2, 2]),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 1, 1.5, 2.5]),
    ({"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel", "cubic_coeff_a": -0.75}, [1, 1, 2, 2]),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 0.5},
     [1, 1, 1.5, 1.5]),
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": -1.0},
     [1, 1, 2, 2]),
])
def test_quantized_resize_against_onnxruntime(tmp_path, attrs, scales):
    # a crop whose coordinates never fall on a nearest tie (x.5 is rounded by float order, onnxruntime's own)
    roi = [0, 0, -0.13, 0.1, 1, 1, 0.87, 1.3] if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" else []
    initializers = [numpy_helper.from_array(np.array(roi, np.float32), "roi"),
                    numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="/decoder/Resize", **attrs)
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 7])], ["y"],
                       initializers, 13)
    rng = np.random.default_rng(4)
    samples = [{"x": rng.uniform(-2, 2, (1, 3, 6, 7)).astype(np.float32)} for _ in range(4)]
    graph = import_onnx(model, name="resize")
    scheme = Scheme.of("asymmetric_affine", "uint8")
    ranges = calibrate(graph, samples, total=4, batch_size=4, signed=False, progress=False).ranges
    table = build_table(graph, ranges, scheme, algorithm="normal", digest=serialize.graph_digest(graph))
    lowered = lower_to_integer(graph, table)
    assert not lowered.float_layers, lowered.float_layers
    step = table.get("y").scale[0]
    path = tmp_path / "resize.onnx"
    path.write_bytes(model.SerializeToString())
    (expected,) = onnxruntime_outputs(path, samples[0])
    got = interpreter.run(lowered.graph, samples[0])["y"]
    entry = table.get("y")   # the output shares the input's grid: a cubic overshoot saturates at its ends
    expected = np.clip(expected, entry.min_value[0], entry.max_value[0])
    assert np.abs(got - expected).max() <= 1.5 * step + 1e-6
