"""conversion_scripts/ end to end as the Acuity guide runs them (§3.4): 0_import_model.sh (with the input meta
from a dataset), 1_quantize_model.sh, inference.sh and 2_export_case_code.sh in a temporary folder, for the
demo LeNet (ONNX), a float TFLite model and a pre-quantized TFLite model, each bundle built for the host and run,
its outputs checked against onnxruntime / the TFLite interpreter; and extractoutput.py's outnamelist.txt."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.support.requirements import need_module
from tests.workflow.helpers import DEMO, SCRIPTS, digit, lenet_onnxruntime, run_bundle, run_script

pytestmark = pytest.mark.xdist_group("workflow")


def test_onnx_lenet_four_scripts(tmp_path):
    out = tmp_path / "out"
    # step 1: the variables set from the environment (as a user edits them at the top of the script)
    run_script("0_import_model.sh", cwd=tmp_path, MODEL=DEMO / "lenet_mnist.onnx", NAME="lenet", OUT_DIR=out,
               SOURCE_FILE=DEMO / "dataset.txt", CHANNEL_MEAN_VALUE="0 0.00392156862745098")
    assert {"lenet.json", "lenet.data", "lenet_inputmeta.yml"} <= {p.name for p in out.iterdir()}
    x = digit()
    reference = lenet_onnxruntime(x)

    run_script("inference.sh", DEMO / "images" / "digit_400_4.png", cwd=tmp_path, NAME="lenet", OUT_DIR=out)
    ours = np.load(out / "inference" / "outputs.npz")
    np.testing.assert_allclose(next(iter(ours.values())).ravel(), reference, rtol=1e-4, atol=1e-5)

    run_script("2_export_case_code.sh", cwd=tmp_path, NAME="lenet", OUT_DIR=out, BUNDLE_DIR=out / "float")
    np.testing.assert_allclose(run_bundle(out / "float", "lenet", [x], np.float32, 10), reference,
                               rtol=1e-4, atol=1e-5)

    quantize = run_script("1_quantize_model.sh", cwd=tmp_path, NAME="lenet", OUT_DIR=out, BATCH_SIZE=10,
                          ITERATIONS=5, QUANTIZER="asymmetric_affine", QTYPE="uint8")
    assert "50 samples" in quantize.stdout and (out / "lenet.quantize").is_file()
    run_script("inference.sh", DEMO / "images" / "digit_400_4.png", cwd=tmp_path, NAME="lenet", OUT_DIR=out,
               DTYPE="quantized")
    simulated = next(iter(np.load(out / "inference" / "outputs.npz").values())).ravel()
    run_script("2_export_case_code.sh", cwd=tmp_path, NAME="lenet", OUT_DIR=out, BUNDLE_DIR=out / "uint8",
               DTYPE="quantized")
    bundle = run_bundle(out / "uint8", "lenet", [x], np.float32, 10)
    assert bundle.argmax() == reference.argmax() == 4
    np.testing.assert_allclose(bundle, reference, atol=0.05)   # uint8 softmax: within a few output steps
    np.testing.assert_array_equal(bundle, simulated)           # the bundle computes what inference simulates


def test_positional_arguments_and_extractoutput(tmp_path):
    """The Makefile's form (MODEL OUT_DIR / NAME.json as arguments) and outnamelist.txt."""
    run_script("0_import_model.sh", DEMO / "lenet_mnist.onnx", tmp_path, cwd=tmp_path)
    model = json.loads((tmp_path / "lenet_mnist.json").read_text())
    proc = subprocess.run([sys.executable, str(SCRIPTS / "extractoutput.py"), str(tmp_path / "lenet_mnist.json")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split("\t") for line in (tmp_path / "outnamelist.txt").read_text().splitlines()[1:]]
    expected = {t: layer["name"] for layer in model["layers"] for t in layer["outputs"]}
    assert {row[0]: row[1] for row in lines[1:]} == expected
    assert lines[0][:3] == [model["inputs"][0]["name"], "(input)", "Input"]
    assert [row[0] for row in lines if row[-1] == "output"] == [port["name"] for port in model["outputs"]]


def test_unknown_suffix_is_refused(tmp_path):
    (tmp_path / "m.bin").write_bytes(b"x")
    proc = subprocess.run(["bash", str(SCRIPTS / "0_import_model.sh"), str(tmp_path / "m.bin")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "set FRAMEWORK" in proc.stderr


def _tflite(builder_name: str):
    need_module("tensorflow")
    from tests.importers.tflite import harness

    if builder_name == "int8_cnn":
        from tests.support.tflite_models import int8_cnn as builder
    else:
        from tests.importers.tflite import models

        builder = getattr(models, builder_name)
    return harness.cached_model(builder)


def _tflite_reference(path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"]).ravel()


def test_float_tflite_four_scripts(tmp_path):
    path = _tflite("ds_cnn")
    rng = np.random.default_rng(0)
    samples = []
    for index in range(8):
        samples.append(f"s{index}.npy")
        np.save(tmp_path / samples[-1], rng.uniform(-1, 1, (1, 49, 10, 1)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("\n".join(samples) + "\n")
    out = tmp_path / "out"
    run_script("0_import_model.sh", cwd=tmp_path, MODEL=path, NAME="kws", OUT_DIR=out,
               SOURCE_FILE=tmp_path / "dataset.txt")
    assert not (out / "kws.quantize").exists()          # a float model brings no table
    x = np.load(tmp_path / "s0.npy")
    reference = _tflite_reference(path, x)
    run_script("inference.sh", tmp_path / "s0.npy", cwd=tmp_path, NAME="kws", OUT_DIR=out)
    ours = next(iter(np.load(out / "inference" / "outputs.npz").values())).ravel()
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5)
    run_script("2_export_case_code.sh", cwd=tmp_path, NAME="kws", OUT_DIR=out, BUNDLE_DIR=out / "float")
    np.testing.assert_allclose(run_bundle(out / "float", "kws", [x], np.float32, 12), reference,
                               rtol=1e-4, atol=1e-5)
    run_script("1_quantize_model.sh", cwd=tmp_path, NAME="kws", OUT_DIR=out, BATCH_SIZE=4, ITERATIONS=2,
               QUANTIZER="perchannel_symmetric_affine", QTYPE="int8")
    run_script("2_export_case_code.sh", cwd=tmp_path, NAME="kws", OUT_DIR=out, BUNDLE_DIR=out / "int8",
               DTYPE="quantized")
    bundle = run_bundle(out / "int8", "kws", [x], np.float32, 12)
    np.testing.assert_allclose(bundle, reference, atol=0.03)   # int8 softmax of 12 classes


def _prequantized(tmp_path):
    path = _tflite("int8_cnn")
    out = tmp_path / "out"
    run_script("0_import_model.sh", path, out, cwd=tmp_path, NAME="q")
    table = (out / "q.quantize").read_bytes()
    proc = run_script("1_quantize_model.sh", out / "q.json", cwd=tmp_path)
    assert "pre-quantized TFLite model: keeping its own table" in proc.stdout
    assert (out / "q.quantize").read_bytes() == table
    x = np.random.default_rng(1).integers(-128, 128, (1, 12, 10, 3)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    return path, out, x, _tflite_reference(path, x)


def test_prequantized_tflite_keeps_its_table(tmp_path):
    path, out, x, reference = _prequantized(tmp_path)
    run_script("inference.sh", tmp_path / "x.npy", cwd=tmp_path, NAME="q", OUT_DIR=out, DTYPE="quantized")
    ours = next(iter(np.load(out / "inference" / "outputs.npz").values())).ravel()
    np.testing.assert_array_equal(ours, reference)


def test_prequantized_tflite_bundle(tmp_path):
    path, out, x, reference = _prequantized(tmp_path)
    run_script("2_export_case_code.sh", out / "q.json", out / "bundle", cwd=tmp_path, DTYPE="quantized")
    np.testing.assert_array_equal(run_bundle(out / "bundle", "q", [x], np.int8, reference.size), reference)
