"""Channels-last inputs (``1x96x96x3``, ``1x49x10x1``, as tf2onnx writes them): ``generate inputmeta`` writes
``layout: nhwc`` with one mean/scale per real channel, and images fill them as the meta says — checked against
onnxruntime fed the image converted by hand (Pillow → array → (x - mean) * scale, NHWC)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from pegasus.cli import main
from pegasus.runtime.inputmeta import guess_layout, load_input_meta, read_yaml


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def channels_last_model(shape: list[int]) -> onnx.ModelProto:
    """x (N, H, W, C) -> Transpose to NCHW -> Conv 3x3 stride 2 (2 output channels) -> y."""
    rng = np.random.default_rng(sum(shape))
    weight = numpy_helper.from_array(rng.normal(size=(2, shape[3], 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Transpose", ["x"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nchw", "w"], ["y"], strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def imported(tmp_path: Path, shape: list[int]) -> tuple[Path, Path]:
    """(the .onnx, the imported .json) of a channels-last model."""
    source = tmp_path / "model.onnx"
    onnx.save(channels_last_model(shape), str(source))
    json_path = tmp_path / "model.json"
    assert main(["import", "onnx", "--model", str(source), "--output-model", str(json_path)]) == 0
    return source, json_path


def onnxruntime_output(source: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})[0]


def pegasus_output(capsys, json_path: Path, out_dir: Path, *extra) -> np.ndarray:
    code, _, err = run(capsys, "inference", "--model", json_path, "--model-data", json_path.with_suffix(".data"),
                       "--postprocess", "dump_result", "--output-dir", out_dir, *extra)
    assert code == 0, err
    return np.load(out_dir / "outputs.npz")["y"][0]


# (input shape, image mode, --channel-mean-value, means, scale)
CASES = {
    "rgb_96x96x3": ([1, 96, 96, 3], "RGB", "10 20 30 0.5", [10.0, 20.0, 30.0], 0.5),
    "gray_49x10x1": ([1, 49, 10, 1], "L", "100 0.25", [100.0], 0.25),
}


@pytest.mark.parametrize("case", list(CASES))
def test_generate_writes_nhwc_and_one_mean_per_channel(capsys, tmp_path, case):
    shape, mode, means_flag, means, scale = CASES[case]
    _, json_path = imported(tmp_path, shape)
    height, width, channels = shape[1:]
    Image.new(mode, (width, height)).save(tmp_path / "img.png")
    (tmp_path / "dataset.txt").write_text("img.png\n")
    code, _, err = run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file",
                       tmp_path / "dataset.txt")
    assert code == 0, err
    (port,) = load_input_meta(tmp_path / "model_inputmeta.yml").ports
    assert (port.layout, port.category, port.shape) == ("nhwc", "image", shape)
    assert (port.mean, port.scale) == ([0.0] * channels, [1.0] * channels)

    code, _, err = run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file",
                       tmp_path / "dataset.txt", "--channel-mean-value", means_flag)
    assert code == 0, err
    (port,) = load_input_meta(tmp_path / "model_inputmeta.yml").ports
    assert (port.layout, port.mean, port.scale) == ("nhwc", means, [scale] * channels)


@pytest.mark.parametrize("case", list(CASES))
def test_inference_with_meta_matches_onnxruntime_on_the_hand_converted_image(capsys, tmp_path, case):
    shape, mode, means_flag, means, scale = CASES[case]
    source, json_path = imported(tmp_path, shape)
    height, width, channels = shape[1:]
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (height, width, channels)).astype(np.uint8)
    Image.fromarray(pixels if channels == 3 else pixels[..., 0], mode).save(tmp_path / "img.png")
    (tmp_path / "dataset.txt").write_text("img.png\n")
    meta = tmp_path / "model_inputmeta.yml"
    code, _, err = run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file",
                       tmp_path / "dataset.txt", "--channel-mean-value", means_flag)
    assert code == 0, err

    by_hand = np.asarray(Image.open(tmp_path / "img.png"), dtype=np.float64).reshape(height, width, channels)
    expected = onnxruntime_output(source, ((by_hand - means) * scale)[None])
    got = pegasus_output(capsys, json_path, tmp_path / "dump", "--with-input-meta", meta)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)

    if channels == 3:  # BGR: the channel order is reversed on the last axis, then the means apply
        meta.write_text(meta.read_text().replace("reverse_channel: false", "reverse_channel: true"))
        expected = onnxruntime_output(source, ((by_hand[..., ::-1] - means) * scale)[None])
        got = pegasus_output(capsys, json_path, tmp_path / "bgr", "--with-input-meta", meta)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)


def test_images_are_resized_to_the_nhwc_height_and_width(capsys, tmp_path):
    source, json_path = imported(tmp_path, [1, 12, 20, 3])  # H 12, W 20: a transposed resize would show
    big = np.random.default_rng(9).integers(0, 256, (30, 50, 3)).astype(np.uint8)
    Image.fromarray(big, "RGB").save(tmp_path / "big.png")
    (tmp_path / "dataset.txt").write_text("big.png\n")
    code, _, err = run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file",
                       tmp_path / "dataset.txt", "--channel-mean-value", "1 2 3 0.1")
    assert code == 0, err
    resized = Image.open(tmp_path / "big.png").convert("RGB").resize((20, 12), Image.BILINEAR)
    x = (np.asarray(resized, dtype=np.float64) - [1, 2, 3]) * 0.1
    expected = onnxruntime_output(source, x[None])
    got = pegasus_output(capsys, json_path, tmp_path / "dump", "--with-input-meta",
                         tmp_path / "model_inputmeta.yml")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_image_without_meta_fills_an_nhwc_input_as_is(capsys, tmp_path):
    source, json_path = imported(tmp_path, [1, 49, 10, 1])
    pixels = np.random.default_rng(4).integers(0, 256, (49, 10)).astype(np.uint8)
    Image.fromarray(pixels, "L").save(tmp_path / "img.png")
    expected = onnxruntime_output(source, pixels.astype(np.float64)[None, :, :, None])
    got = pegasus_output(capsys, json_path, tmp_path / "dump", "--input", tmp_path / "img.png")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)


def test_ambiguous_shape_takes_the_recorded_layout(capsys, tmp_path):
    _, json_path = imported(tmp_path, [1, 4, 4, 3])  # 4 channels of 4x3, or 3 channels of 4x4?
    Image.new("RGB", (4, 4)).save(tmp_path / "img.png")
    (tmp_path / "dataset.txt").write_text("img.png\n")
    meta = tmp_path / "model_inputmeta.yml"
    assert run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file", tmp_path / "dataset.txt")[0] == 0
    (port,) = load_input_meta(meta).ports
    assert (port.layout, len(port.mean)) == ("nchw", 4)  # nothing recorded: nchw

    doc = json.loads(json_path.read_text())
    doc["source"]["layout"] = "nhwc"
    json_path.write_text(json.dumps(doc))
    assert run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file", tmp_path / "dataset.txt")[0] == 0
    (port,) = load_input_meta(meta).ports
    assert (port.layout, port.category, len(port.mean)) == ("nhwc", "image", 3)


def test_calibration_sees_the_nhwc_image_as_preprocessed(capsys, tmp_path):
    _, json_path = imported(tmp_path, [1, 12, 20, 3])
    pixels = np.random.default_rng(1).integers(0, 256, (12, 20, 3)).astype(np.uint8)
    Image.fromarray(pixels, "RGB").save(tmp_path / "img.png")
    (tmp_path / "dataset.txt").write_text("img.png\n")
    assert run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file", tmp_path / "dataset.txt",
               "--channel-mean-value", "1 2 3 0.1")[0] == 0
    code, _, err = run(capsys, "quantize", "--model", json_path, "--model-data", json_path.with_suffix(".data"),
                       "--with-input-meta", tmp_path / "model_inputmeta.yml")
    assert code == 0, err
    x = (pixels.astype(np.float64) - [1, 2, 3]) * 0.1
    entry = read_yaml(tmp_path / "model.quantize")["quantize_parameters"]["x"]
    np.testing.assert_allclose([entry["min_value"][0], entry["max_value"][0]], [x.min(), x.max()], rtol=1e-6)


@pytest.mark.parametrize("shape,recorded,layout", [
    ([1, 96, 96, 3], None, "nhwc"), ([1, 49, 10, 1], None, "nhwc"), ([1, 8, 8, 4], None, "nhwc"),
    ([1, 3, 224, 224], "nhwc", "nchw"), ([1, 1, 28, 28], None, "nchw"),
    ([1, 4, 4, 3], None, "nchw"), ([1, 4, 4, 3], "nhwc", "nhwc"),  # ambiguous: the recorded layout, else nchw
    ([1, 2, 4, 4], None, "nchw"), ([1, 16, 16, 8], "nhwc", "nhwc"), ([1, 96, 96, 3], "nchw", "nhwc"),
])
def test_guess_layout(shape, recorded, layout):
    assert guess_layout(shape, recorded) == layout
