"""``pegasus generate inputmeta``: the YAML it writes, that inference preprocesses samples exactly as it says
(checked against Pillow + NumPy), that users' edits and comments survive, and one clear error line (exit 2,
nothing written) for every bad input around it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from pegasus.cli import main
from pegasus.ir import serialize
from pegasus.runtime import interpreter
from pegasus.runtime.inputmeta import dump_yaml, load_input_meta, read_yaml
from tests.conftest import DEMO_DIR

DEMO_DATASET = DEMO_DIR / "dataset.txt"


# ---- helpers -------------------------------------------------------------------------------------


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(result, *fragments) -> str:
    code, _, err = result
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pegasus: error:"), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def import_onnx(model: onnx.ModelProto | Path, folder: Path, stem: str) -> Path:
    source = model if isinstance(model, Path) else folder / f"{stem}.onnx"
    if not isinstance(model, Path):
        onnx.save(model, str(source))
    json_path = folder / f"{stem}.json"
    assert main(["import", "onnx", "--model", str(source), "--output-model", str(json_path),
                 "--output-data", str(folder / f"{stem}.data")]) == 0
    return json_path


def model_of(node: onnx.NodeProto, inputs: list[str], shape: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def save_image(path: Path, pixels: np.ndarray) -> Path:
    Image.fromarray(pixels.astype(np.uint8)).save(path)
    return path


def generate(capsys, json_path: Path, source: str | Path, *extra) -> tuple[int, str, str]:
    return run(capsys, "generate", "inputmeta", "--model", json_path, "--source-file", source, *extra)


def infer_dump(capsys, json_path: Path, meta: Path, out_dir: Path, *extra) -> tuple[int, str, str]:
    out_dir.mkdir(exist_ok=True)
    return run(capsys, "inference", "--model", json_path, "--model-data", json_path.with_suffix(".data"),
               "--with-input-meta", meta, "--postprocess", "dump_result", "--output-dir", out_dir, *extra)


def dumped(out_dir: Path, tensor: str, sample: int, shape: tuple[int, ...]) -> np.ndarray:
    name = f"attach_{tensor}_out0_{sample}_{'_'.join(map(str, shape))}.tensor"
    return np.loadtxt(out_dir / name).reshape(shape)


def nothing_written(folder: Path, before: set[str]) -> bool:
    return {p.name for p in folder.iterdir()} == before


# ---- models --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lenet(tmp_path_factory) -> Path:
    """The demo LeNet (input data [1,1,28,28]) imported once for this module."""
    return import_onnx(DEMO_DIR / "lenet_mnist.onnx", tmp_path_factory.mktemp("lenet"), "lenet_mnist")


@pytest.fixture(scope="module")
def adder(tmp_path_factory) -> Path:
    """y = a + b over two [1,3,4,4] inputs."""
    return import_onnx(model_of(helper.make_node("Add", ["a", "b"], ["y"]), ["a", "b"], [1, 3, 4, 4]),
                       tmp_path_factory.mktemp("adder"), "adder")


@pytest.fixture(scope="module")
def two_channel(tmp_path_factory) -> Path:
    """y = relu(x) over a [1,2,4,4] input: no image can feed it."""
    return import_onnx(model_of(helper.make_node("Relu", ["x"], ["y"]), ["x"], [1, 2, 4, 4]),
                       tmp_path_factory.mktemp("two_channel"), "two_channel")


@pytest.fixture
def rgb_samples(tmp_path) -> tuple[np.ndarray, np.ndarray, Path]:
    """Two 4x4 RGB PNGs and a dataset naming them on one line: (pixels a, pixels b, dataset)."""
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 256, (2, 4, 4, 3))
    save_image(tmp_path / "a.png", a)
    save_image(tmp_path / "b.png", b)
    (tmp_path / "pairs.txt").write_text("a.png b.png\n")
    return a.astype(np.float64), b.astype(np.float64), tmp_path / "pairs.txt"


def nchw(pixels_hwc: np.ndarray) -> np.ndarray:
    return pixels_hwc.transpose(2, 0, 1)[None]


# ---- the file written ----------------------------------------------------------------------------


def test_defaults_for_lenet(capsys, lenet):
    target = lenet.with_name("lenet_mnist_inputmeta.yml")
    assert run(capsys, "generate", "inputmeta", "--model", lenet, "--source-file", DEMO_DATASET)[0] == 0
    assert target.is_file()  # default: MODEL_STEM_inputmeta.yml next to the model
    text = target.read_text()
    assert "out = (x - mean) * scale" in text and "nchw = [batch, channels, height, width]" in text
    meta = load_input_meta(target)
    (port,) = meta.ports
    assert (port.name, port.shape, port.layout, port.dtype, port.category) == ("data", [1, 1, 28, 28], "nchw",
                                                                               "float32", "image")
    assert (port.mean, port.scale, port.reverse_channel, port.resize) == ([0.0], [1.0], False, True)
    assert meta.databases == [DEMO_DATASET.resolve()] and not meta.separated
    raw_path = read_yaml(target)["input_meta"]["databases"][0]["path"]
    # relative to the yml when they share a folder below the root, else absolute: either way it finds the dataset
    assert (target.parent / raw_path).resolve() == DEMO_DATASET.resolve()


def test_channel_mean_value_per_input_and_category(capsys, adder, two_channel, tmp_path, rgb_samples):
    out = tmp_path / "adder_inputmeta.yml"
    assert generate(capsys, adder, rgb_samples[2], "--channel-mean-value", "10 20 30 0.5#1 2 3 0.25",
                    "--input-meta-output", out)[0] == 0
    a, b = load_input_meta(out).ports
    assert (a.name, a.mean, a.scale, a.category) == ("a", [10.0, 20.0, 30.0], [0.5] * 3, "image")
    assert (b.name, b.mean, b.scale) == ("b", [1.0, 2.0, 3.0], [0.25] * 3)
    assert read_yaml(out)["input_meta"]["databases"][0]["path"] == "pairs.txt"

    np.save(tmp_path / "x.npy", np.zeros((1, 2, 4, 4), np.float32))
    (tmp_path / "x.txt").write_text("x.npy\n")
    assert generate(capsys, two_channel, tmp_path / "x.txt", "--channel-mean-value", "1 2 3")[0] == 0
    (port,) = load_input_meta(two_channel.with_name("two_channel_inputmeta.yml")).ports
    assert (port.category, port.mean, port.scale) == ("undefined", [1.0, 2.0], [3.0, 3.0])


def test_acuity_single_channel_form(capsys, lenet, tmp_path):
    out = tmp_path / "m.yml"
    assert generate(capsys, lenet, DEMO_DATASET, "--channel-mean-value", "7 0 0 0.25", "--input-meta-output",
                    out)[0] == 0
    assert (load_input_meta(out).ports[0].mean, load_input_meta(out).ports[0].scale) == ([7.0], [0.25])


# ---- inference follows the generated file --------------------------------------------------------


def test_lenet_inference_preprocesses_as_generated(capsys, lenet, tmp_path):
    out = tmp_path / "m.yml"
    assert generate(capsys, lenet, DEMO_DATASET, "--channel-mean-value", "33 0.0125", "--input-meta-output",
                    out)[0] == 0
    assert infer_dump(capsys, lenet, out, tmp_path / "dump", "--iterations", "2")[0] == 0
    first_two = DEMO_DATASET.read_text().split()[:2]
    outputs = np.load(tmp_path / "dump" / "outputs.npz")["softmax"]
    graph = serialize.load(lenet)
    for index, name in enumerate(first_two):
        pixels = np.asarray(Image.open(DEMO_DIR / name), dtype=np.float64)
        expected = ((pixels - 33) * 0.0125)[None, None]
        np.testing.assert_allclose(dumped(tmp_path / "dump", "data", index, (1, 1, 28, 28)), expected, atol=1e-6)
        reference = interpreter.run(graph, {"data": expected.astype(np.float32)})["softmax"]
        np.testing.assert_allclose(outputs[index], reference, rtol=1e-5, atol=1e-7)


def test_two_inputs_one_dataset(capsys, adder, tmp_path, rgb_samples):
    a, b, dataset = rgb_samples
    out = tmp_path / "m.yml"
    assert generate(capsys, adder, dataset, "--channel-mean-value", "10 20 30 0.5#1 2 3 0.25",
                    "--input-meta-output", out)[0] == 0
    assert infer_dump(capsys, adder, out, tmp_path / "dump")[0] == 0
    expected_a = nchw((a - [10, 20, 30]) * 0.5)
    expected_b = nchw((b - [1, 2, 3]) * 0.25)
    np.testing.assert_allclose(dumped(tmp_path / "dump", "a", 0, (1, 3, 4, 4)), expected_a, atol=1e-6)
    np.testing.assert_allclose(dumped(tmp_path / "dump", "b", 0, (1, 3, 4, 4)), expected_b, atol=1e-6)
    y = np.load(tmp_path / "dump" / "outputs.npz")["y"][0]
    np.testing.assert_allclose(y, expected_a + expected_b, rtol=1e-6)


def test_separated_databases(capsys, adder, tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (4, 4, 4, 3))
    for i, pixels in enumerate(images):
        save_image(tmp_path / f"img{i}.png", pixels)
    gray = rng.integers(0, 256, (4, 4))
    save_image(tmp_path / "gray.png", gray)  # 1 channel for a 3-channel input: repeated per channel
    (tmp_path / "d1.txt").write_text("img0.png\nimg1.png\n")
    (tmp_path / "d2.txt").write_text("img2.png\ngray.png\n")
    out = tmp_path / "sep.yml"
    assert generate(capsys, adder, f"{tmp_path / 'd1.txt'}#{tmp_path / 'd2.txt'}", "--separated-database",
                    "--channel-mean-value", "0 0 0 1#100 50 25 0.125", "--input-meta-output", out)[0] == 0
    meta = load_input_meta(out)
    assert meta.separated and meta.databases == [tmp_path / "d1.txt", tmp_path / "d2.txt"]
    databases = read_yaml(out)["input_meta"]["databases"]
    assert [(db["path"], [p["lid"] for p in db["ports"]]) for db in databases] == [("d1.txt", ["a"]),
                                                                                   ("d2.txt", ["b"])]
    assert infer_dump(capsys, adder, out, tmp_path / "dump")[0] == 0
    y = np.load(tmp_path / "dump" / "outputs.npz")["y"]
    second = np.repeat(gray[..., None], 3, axis=2).astype(np.float64)
    for index, b_pixels in enumerate([images[2], second]):
        expected = nchw(images[index].astype(np.float64)) + nchw((b_pixels - [100, 50, 25]) * 0.125)
        np.testing.assert_allclose(y[index], expected, rtol=1e-6)


def test_user_edits_and_comments_survive(capsys, adder, tmp_path, rgb_samples):
    a, b, dataset = rgb_samples
    out = tmp_path / "m.yml"
    assert generate(capsys, adder, dataset, "--input-meta-output", out)[0] == 0
    text = out.read_text()
    assert text.count("mean: [0.0, 0.0, 0.0]") == 2
    edited = text.replace("mean: [0.0, 0.0, 0.0]", "mean: [5, 6, 7]   # my own means", 1)
    edited = edited.replace("reverse_channel: false", "reverse_channel: true  # BGR please", 1)
    edited = "# project X, checked by Ann\n" + edited
    out.write_text(edited)
    port_a = load_input_meta(out).ports[0]
    assert (port_a.mean, port_a.reverse_channel) == ([5.0, 6.0, 7.0], True)

    doc = read_yaml(out)  # a rewrite through ruamel keeps every comment
    doc["input_meta"]["databases"][0]["ports"][1]["preprocess"]["scale"] = [0.5, 0.5, 0.5]
    out.write_text(dump_yaml(doc))
    rewritten = out.read_text()
    for comment in ("# my own means", "# BGR please", "# project X, checked by Ann", "out = (x - mean) * scale"):
        assert comment in rewritten
    assert load_input_meta(out).ports[1].scale == [0.5, 0.5, 0.5]

    assert infer_dump(capsys, adder, out, tmp_path / "dump")[0] == 0
    expected_a = nchw(a[..., ::-1] - [5, 6, 7])  # BGR, then the means in the order the model sees them
    np.testing.assert_allclose(dumped(tmp_path / "dump", "a", 0, (1, 3, 4, 4)), expected_a, atol=1e-6)
    np.testing.assert_allclose(dumped(tmp_path / "dump", "b", 0, (1, 3, 4, 4)), nchw(b * 0.5), atol=1e-6)


# ---- errors from generate: one line, exit 2, nothing written -------------------------------------


def test_generate_errors(capsys, lenet, adder, two_channel, tmp_path, rgb_samples):
    dataset = rgb_samples[2]
    folder = tmp_path
    rng = np.random.default_rng(0)
    save_image(folder / "rgb.png", rng.integers(0, 256, (4, 4, 3)))
    np.save(folder / "short.npy", np.zeros(47, np.float32))
    (folder / "missing.txt").write_text("a.png b.png\n\na.png nope.png\n")
    (folder / "one_per_line.txt").write_text("a.png\n")
    (folder / "image_for_2ch.txt").write_text("rgb.png\n")
    (folder / "short.txt").write_text("a.png short.npy\n")
    (folder / "d1.txt").write_text("a.png\nb.png\n")
    (folder / "d2.txt").write_text("b.png\n")
    (folder / "empty.txt").write_text("# nothing here\n")
    out = folder / "out.yml"
    cases = [
        ((adder, folder / "missing.txt"), ("missing.txt", "line 3", "nope.png", "not found")),
        ((adder, folder / "one_per_line.txt"), ("one_per_line.txt", "line 1", "1 file(s) for 2 model input(s)")),
        ((two_channel, folder / "image_for_2ch.txt"), ("image_for_2ch.txt", "line 1", "input 'x'", "2 channels",
                                                       ".npy")),
        ((adder, folder / "short.txt"), ("short.txt", "line 1", "short.npy", "47 values", "input 'b' needs 48")),
        ((adder, folder / "empty.txt"), ("empty.txt", "no samples")),
        ((adder, folder / "nowhere.txt"), ("dataset file not found", "nowhere.txt")),
        ((adder, f"{folder / 'd1.txt'}#{folder / 'd2.txt'}", "--separated-database"),
         ("different numbers of samples",)),
        ((adder, f"{folder / 'd1.txt'}#{folder / 'd2.txt'}"), ("--separated-database",)),
        ((adder, folder / "d1.txt", "--separated-database"), ("1 dataset file(s) for 2 model inputs",)),
        ((adder, dataset, "--channel-mean-value", "1 2 3 0.5"), ("1 group(s) for 2 model input(s)", "a, b", "#")),
        ((adder, dataset, "--channel-mean-value", "1 2 3 0.5#1 2 0.5"),
         ("input 'b'", "needs 4 values", "3 mean(s) then one scale", "got 3")),
        ((lenet, DEMO_DATASET, "--channel-mean-value", "128 128 128 0.0078125"), ("input 'data'", "needs 2 values")),
        ((lenet, DEMO_DATASET, "--channel-mean-value", "0 one"), ("input 'data'", "expected numbers")),
        ((folder / "nope.json", DEMO_DATASET), ("model file not found", "nope.json")),
        ((lenet, DEMO_DATASET, "--input-meta-output", folder / "a.png" / "m.yml"),
         ("--input-meta-output", "a.png is a file, not a folder")),
    ]
    before = {p.name for p in folder.iterdir()}
    model_dirs = {m: {p.name for p in m.parent.iterdir()} for m in (lenet, adder, two_channel)}
    for (model, source, *extra), fragments in cases:
        extra = extra if "--input-meta-output" in extra else [*extra, "--input-meta-output", out]
        assert_one_line_error(generate(capsys, model, source, *extra), *fragments)
        assert nothing_written(folder, before), (fragments, {p.name for p in folder.iterdir()} - before)
    for model, names in model_dirs.items():
        assert nothing_written(model.parent, names)


# ---- errors when the meta is used: one line, exit 2, nothing written -----------------------------


@pytest.fixture
def adder_meta(capsys, adder, tmp_path, rgb_samples) -> Path:
    out = tmp_path / "m.yml"
    assert generate(capsys, adder, rgb_samples[2], "--input-meta-output", out)[0] == 0
    return out


def edit(path: Path, old: str, new: str, count: int = -1) -> Path:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, count))
    return path


def test_inference_errors_from_edited_meta(capsys, adder, tmp_path, adder_meta):
    save_image(tmp_path / "big.png", np.zeros((6, 5, 3)))
    (tmp_path / "big.txt").write_text("big.png a.png\n")
    cases = [
        (lambda p: edit(p, "resize: true", "resize: false") and edit(p, "path: pairs.txt", "path: big.txt"),
         ("big.png", "5x6", "input 'a' takes 4x4", "resize")),
        (lambda p: edit(p, "shape: [1, 3, 4, 4]", "shape: [1, 3, 4, 4", 1), ("YAML syntax error", "line ")),
        (lambda p: edit(p, "lid: b", "lid: bb"), ("input meta names ['bb']", "not model inputs")),
        (lambda p: edit(p, "layout: nchw", "layout: nhcw", 1), ("port 'a'", "layout must be nchw or nhwc")),
        (lambda p: edit(p, "mean: [0.0, 0.0, 0.0]", "mean: [0.0, 0.0]", 1), ("port 'a'", "2 mean values for 3")),
        (lambda p: edit(p, "shape: [1, 3, 4, 4]", "shape: three", 1), ("port 'a'", "shape must be a list")),
    ]
    original = adder_meta.read_text()
    for change, fragments in cases:
        adder_meta.write_text(original)
        change(adder_meta)
        dump_dir = tmp_path / "dump"
        line = assert_one_line_error(infer_dump(capsys, adder, adder_meta, dump_dir), *fragments)
        assert list(dump_dir.iterdir()) == [], line
    adder_meta.write_text(original)
    broken = edit(adder_meta, "dtype: float32", "dtype: float32: twice", 1)
    line = assert_one_line_error(infer_dump(capsys, adder, broken, tmp_path / "dump"), "YAML syntax error")
    number = int(line.split("line ")[1].split(":")[0])
    assert "float32: twice" in broken.read_text().splitlines()[number - 1], line


def test_inference_errors_from_sample_files(capsys, adder, two_channel, tmp_path):
    save_image(tmp_path / "rgb.png", np.zeros((4, 4, 3)))
    (tmp_path / "wrong.tensor").write_text("\n".join(["1.0"] * 47) + "\n")
    dump_dir = tmp_path / "dump"
    dump_dir.mkdir()
    base = ["inference", "--postprocess", "dump_result", "--output-dir", dump_dir]
    for model, given, fragments in [
        (two_channel, [tmp_path / "rgb.png"], ("rgb.png", "input 'x'", "2 channels", ".npy/.pb/.tensor")),
        (adder, [f"{tmp_path / 'rgb.png'}#{tmp_path / 'wrong.tensor'}"], ("wrong.tensor", "47 values",
                                                                          "input 'b' needs 48")),
    ]:
        result = run(capsys, *base, "--model", model, "--model-data", model.with_suffix(".data"), "--input", *given)
        assert_one_line_error(result, *fragments)
        assert list(dump_dir.iterdir()) == []
