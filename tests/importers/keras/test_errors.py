"""What ``pegasus import keras`` refuses, each in one line on stderr with exit code 2 and nothing written: files
that are not Keras models (an ONNX model, truncated or empty files, an HDF5 file without a model), Lambda
layers and custom classes (named, and never run: the Lambda's function would write a file), every
unsupported layer class at once (those inside a wrapper too), and cuts at names the model lacks. And the
import itself needs neither TensorFlow nor Keras."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli
from tests.importers.keras import models
from tests.importers.keras.harness import check_import
from tests.support.cli_errors import assert_one_line_error


def import_cli(tmp_path, model, *extra):
    result = run_cli("import", "keras", "--model", model, "--output-model", tmp_path / "out" / "m.json",
                     "--output-data", tmp_path / "out" / "m.data", *extra)
    if result.code:
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return result


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_onnx_file(tmp_path, demo_onnx):
    assert_one_line_error(import_cli(tmp_path, demo_onnx), "not a Keras model", "pegasus import onnx",
                          "lenet_mnist.onnx")


def test_empty_file(tmp_path):
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "empty.h5", b"")), "not a Keras model", "0 bytes")


@pytest.mark.parametrize("library, suffix, keep", [("tf_keras", ".h5", 0.5), ("keras", ".h5", 0.8),
                                                    ("keras", ".keras", 0.5), ("keras", ".keras", 0.95)])
def test_truncated_file(tmp_path, keras_model, library, suffix, keep):
    data = keras_model(models.convolutions, library).files[suffix].read_bytes()
    result = import_cli(tmp_path, write(tmp_path, f"cut{suffix}", data[:int(len(data) * keep)]))
    assert_one_line_error(result, f"cut{suffix}", "truncated")


def test_hdf5_without_model(tmp_path):
    path = tmp_path / "weights.h5"
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([b"dense"])
        f.create_dataset("dense/kernel:0", data=np.zeros((2, 2), np.float32))
    assert_one_line_error(import_cli(tmp_path, path), "weights only", "model.save")


def test_zip_without_config(tmp_path):
    import zipfile

    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    assert_one_line_error(import_cli(tmp_path, path), "no config.json", "m.keras")


@pytest.mark.parametrize("library, suffix", [("keras", ".keras"), ("keras", ".h5"), ("tf_keras", ".h5")])
def test_lambda_refused_and_never_run(tmp_path, keras_model, library, suffix):
    path = keras_model(models.with_lambda, library).files[suffix]
    models.SENTINEL.unlink(missing_ok=True)        # Keras ran the function while building the model
    result = import_cli(tmp_path, path)
    assert_one_line_error(result, "layer 'lam' (Lambda: Python code)", "--allow-unsafe", "never runs", path.name)
    result = import_cli(tmp_path, path, "--allow-unsafe")
    assert_one_line_error(result, "Lambda node 'lam'", "bytecode", "never runs")
    assert not models.SENTINEL.exists()


def test_cut_before_the_lambda(tmp_path, keras_model):
    """Only the layers the outputs need are checked: a cut before the Lambda imports without --allow-unsafe."""
    path = keras_model(models.with_lambda, "keras").files[".keras"]
    models.SENTINEL.unlink(missing_ok=True)
    result = import_cli(tmp_path, path, "--outputs", "dense")
    assert result.code == 0, result.stderr
    assert not models.SENTINEL.exists()


def test_lambda_sentinel_works(keras_model, tmp_path):
    """Running the saved Lambda (with Keras 2, which loads it) does write the file the test above checks."""
    path = keras_model(models.with_lambda, "tf_keras").files[".h5"]
    script = ("import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; import numpy as np, tf_keras; "
              f"m = tf_keras.models.load_model({str(path)!r}, compile=False); "
              "m.predict(np.ones((1, 4), np.float32), verbose=0)")
    models.SENTINEL.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=300)
    assert models.SENTINEL.exists()
    models.SENTINEL.unlink()


def test_lambda_of_an_activation_with_allow_unsafe(tmp_path, keras_model):
    built = keras_model(models.lambda_activation, "keras")
    assert_one_line_error(import_cli(tmp_path, built.files[".keras"]), "layer 'lam_relu' (Lambda")
    graph = check_import(built.files[".keras"], built, allow_unsafe=True)
    assert [n.op for n in graph.nodes] == ["Gemm", "Relu"]


def test_custom_class(tmp_path, keras_model):
    path = keras_model(models.custom_layer, "keras").files[".keras"]
    result = import_cli(tmp_path, path)
    assert_one_line_error(result, "layer 'doubler' (custom class", "tests.importers.keras.models")
    assert_one_line_error(import_cli(tmp_path, path, "--allow-unsafe"), "unsupported operators (1)", "Doubler")


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_unsupported_layers_listed_at_once(tmp_path, keras_model, suffix):
    path = keras_model(models.unsupported, "keras").files[suffix]
    result = import_cli(tmp_path, path)
    assert_one_line_error(result, f"{path}: unsupported operators (4)", "GroupNormalization at node 'groups'",
                          "Attention at node 'attend'", "UnitNormalization at node 'td/unit_normalization'",
                          "Cumsum (domain ops) at node 'cumsum'")


def test_unsupported_tensorflow_function_listed(tmp_path, keras_model):
    result = import_cli(tmp_path, keras_model(models.unsupported_tf, "tf_keras").files[".h5"])
    assert_one_line_error(result, "unsupported operators (2)", "UnitNormalization at node 'unit'",
                          "math.cumsum (domain tf) at node 'tf.math.cumsum'")


@pytest.mark.parametrize("library, suffix", [("keras", ".keras"), ("tf_keras", ".h5")])
def test_causal_attention_refused(tmp_path, keras_model, library, suffix):
    path = keras_model(models.causal_attention, library).files[suffix]
    assert_one_line_error(import_cli(tmp_path, path), path.name, "'decoder_attention'", "a causal mask",
                          "not supported")


def test_unknown_cut_names(tmp_path, keras_model):
    path = keras_model(models.sequential, "keras").files[".keras"]
    assert_one_line_error(import_cli(tmp_path, path, "--outputs", "nope"), "--outputs", "'nope' is not a tensor")
    assert_one_line_error(import_cli(tmp_path, path, "--inputs", "nope"), "--inputs", "'nope' is not a tensor")


def test_without_tensorflow_or_keras(keras_model):
    """A Keras 2 file with DepthwiseConv2D (which Keras 3 refuses to load) imports with TensorFlow and Keras
    unimportable, and computes what Keras 2 computed."""
    built = keras_model(models.convolutions, "tf_keras")
    reference = built.files[".h5"].with_suffix(".npz")
    script = f"""
import sys
for name in ("tensorflow", "keras", "tf_keras"):
    sys.modules[name] = None
import numpy as np
from pegasus.importers.keras.loader import import_keras
from pegasus.runtime.interpreter import run
graph = import_keras({str(built.files['.h5'])!r})
data = np.load({str(reference)!r})
got = run(graph, {{name: data[f"input_{{i}}"] for i, name in enumerate(graph.inputs)}})
for i, name in enumerate(graph.outputs):
    np.testing.assert_allclose(got[name], data[f"output_{{i}}"], rtol=1e-4, atol=1e-5)
assert not any(m.split(".")[0] in ("tensorflow", "keras", "tf_keras") for m in sys.modules if sys.modules[m])
print("ok", len(graph.outputs))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", str(len(built.outputs))]
