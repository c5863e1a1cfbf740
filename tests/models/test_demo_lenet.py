"""The demo LeNet: pegasus' float reference matches onnxruntime on held-out digits, and the CLI
runs it end to end on a PNG (import → inference → top-5 and dumps)."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import pytest

from pegasus.ir import serialize
from pegasus.runtime import interpreter
from tests.conftest import DEMO_DIR, run_cli

sys.path.insert(0, str(DEMO_DIR))
from heldout import heldout_digits  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    images, labels = heldout_digits()
    return images, labels


def test_matches_onnxruntime_on_100_digits(demo_model, demo_onnx, digits):
    graph = serialize.load(*demo_model)
    session = ort.InferenceSession(str(demo_onnx), providers=["CPUExecutionProvider"])
    images, _ = digits
    for image in images[:100]:
        ours = interpreter.run(graph, {"data": image[None]})["softmax"]
        theirs = session.run(["softmax"], {"data": image[None]})[0]
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def test_float_accuracy_on_heldout(demo_model, digits):
    graph = serialize.load(*demo_model)
    images, labels = digits
    predicted = [int(np.argmax(interpreter.run(graph, {"data": image[None]})["softmax"])) for image in images]
    accuracy = float(np.mean(np.asarray(predicted) == labels))
    print(f"demo LeNet float top-1 on {len(labels)} held-out digits: {accuracy:.2%}")
    assert accuracy >= 0.97


def test_imported_model_is_folded_and_typed(demo_model):
    graph = serialize.load(*demo_model)
    assert [n.op for n in graph.nodes] == ["Conv", "MaxPool", "Conv", "MaxPool", "Flatten", "Gemm", "Relu", "Gemm",
                                           "Softmax"]
    assert graph.type_of("softmax").shape == (1, 10)
    assert sum(t.data.size for t in graph.constants()) == 431_080


def test_cli_inference_on_png_prints_class_and_dumps(demo_model, tmp_path):
    json_path, data_path = demo_model
    label_of = dict(line.split() for line in (DEMO_DIR / "labels.txt").read_text().splitlines())
    image = sorted(label_of)[45]
    result = run_cli("inference", "--model", json_path, "--model-data", data_path, "--with-input-meta",
                     DEMO_DIR / "lenet_mnist_inputmeta.yml", "--input", DEMO_DIR / image, "--output-dir", tmp_path)
    assert result.code == 0, result.stderr
    assert f"class {label_of[image]}" in result.stdout
    dumped = sorted(p.name for p in tmp_path.iterdir())
    assert "attach_data_out0_0_1_1_28_28.tensor" in dumped
    assert "attach_softmax_out0_0_1_10.tensor" in dumped
    values = np.loadtxt(tmp_path / "attach_softmax_out0_0_1_10.tensor")
    assert values.shape == (10,) and abs(values.sum() - 1) < 1e-4
    stacked = np.load(tmp_path / "outputs.npz")
    assert stacked["softmax"].shape == (1, 1, 10)


def test_cli_inference_over_dataset_in_batches(demo_model, tmp_path):
    json_path, data_path = demo_model
    result = run_cli("inference", "--model", json_path, "--model-data", data_path, "--with-input-meta",
                     DEMO_DIR / "lenet_mnist_inputmeta.yml", "--batch-size", "4", "--iterations", "3",
                     "--postprocess", "dump_result", "--output-dir", tmp_path)
    assert result.code == 0, result.stderr
    stacked = np.load(tmp_path / "outputs.npz")["softmax"]
    assert stacked.shape == (12, 1, 10)
    images, _ = heldout_digits()
    first = interpreter.run(serialize.load(json_path, data_path), {"data": images[0][None]})["softmax"]
    np.testing.assert_allclose(stacked[0], first, atol=1e-6)


def test_cli_inference_without_input_explains(demo_model):
    result = run_cli("inference", "--model", demo_model[0], "--model-data", demo_model[1])
    assert result.code == 2
    assert "--input" in result.stderr and "--with-input-meta" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_inference_npy_and_tensor_inputs(demo_model, tmp_path, digits):
    images, _ = digits
    np.save(tmp_path / "d.npy", images[3][None])
    np.savetxt(tmp_path / "d.tensor", images[3].ravel())
    outputs = []
    for name in ("d.npy", "d.tensor"):
        out = tmp_path / name.replace(".", "_")
        out.mkdir()
        result = run_cli("inference", "--model", demo_model[0], "--model-data", demo_model[1], "--input",
                         tmp_path / name, "--output-dir", out)
        assert result.code == 0, result.stderr
        outputs.append(np.load(out / "outputs.npz")["softmax"])
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-6)


def test_cli_inference_pb_input_matches_npy(demo_model, tmp_path, digits):
    from onnx import numpy_helper

    images, _ = digits
    (tmp_path / "d.pb").write_bytes(numpy_helper.from_array(images[7][None]).SerializeToString())
    result = run_cli("inference", "--model", demo_model[0], "--model-data", demo_model[1], "--input",
                     tmp_path / "d.pb", "--postprocess", "print_topn")
    assert result.code == 0, result.stderr
    expected = interpreter.run(serialize.load(*demo_model), {"data": images[7][None]})["softmax"]
    assert f"class {int(np.argmax(expected))} ({expected.max():.4f})" in result.stdout
