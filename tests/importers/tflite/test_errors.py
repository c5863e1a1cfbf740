"""Every bad input to ``pegasus import tflite`` gives one line on stderr naming what is wrong and where, exit
code 2, and writes nothing: files that are not TFLite models, unsupported and custom ops (each listed with
its layer and operator position), a cut at a tensor the model lacks, variants of ops the float import
cannot reproduce (and TFLite's LSTM cell clipping, which it does); and the float converters' refusal of
integer activations."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.errors import PegasusError
from pegasus.importers.tflite.loader import import_tflite, refuse_integer_activations
from pegasus.importers.tflite.reader import read_tflite
from tests.conftest import run_cli
from tests.importers.tflite import models
from tests.importers.tflite.flatbuffer import ModelBuilder, options, pack, unpack
from tests.importers.tflite.harness import check_against_interpreter
from tests.support.cli_errors import assert_one_line_error


def import_cli(tmp_path, model, *extra):
    result = run_cli("import", "tflite", "--model", model, "--output-model", tmp_path / "out" / "m.json",
                     "--output-data", tmp_path / "out" / "m.data", *extra)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return result


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_onnx_file(tmp_path, demo_onnx):
    assert_one_line_error(import_cli(tmp_path, demo_onnx), "not a TFLite model", "pegasus import onnx",
                          "lenet_mnist.onnx")


def test_empty_file(tmp_path):
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "empty.tflite", b"")), "not a TFLite model",
                          "0 bytes", "empty.tflite")


def test_random_bytes(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "noise.tflite", data)), "not a TFLite model",
                          "noise.tflite")


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_truncated_file(tmp_path, tflite_model, keep):
    data = tflite_model(models.lstm).read_bytes()
    result = import_cli(tmp_path, write(tmp_path, "cut.tflite", data[:int(len(data) * keep)]))
    assert_one_line_error(result, "cut.tflite")
    assert "truncated" in result.stderr or "not a valid TFLite model" in result.stderr


def test_custom_op_listed(tmp_path, tflite_model):
    result = import_cli(tmp_path, tflite_model(models.custom_op))
    assert_one_line_error(result, "unsupported operators (1)", "Convolution2DTransposeBias (domain custom)",
                          "node 'b'", "operator 1")


def test_unknown_inputs_name(tmp_path, tflite_model):
    result = import_cli(tmp_path, tflite_model(models.custom_op), "--inputs", "nope")
    assert_one_line_error(result, "--inputs", "'nope' is not a tensor of the model", "x")


def test_subgraph_out_of_range(tmp_path, tflite_model):
    assert_one_line_error(import_cli(tmp_path, tflite_model(models.custom_op), "--subgraph", "3"),
                          "--subgraph 3", "1 subgraph")


def test_concatenation_with_fused_activation(tmp_path):
    m = ModelBuilder()
    x, y = m.tensor("x", (1, 2, 2, 3)), m.tensor("y", (1, 2, 2, 6))
    m.op("CONCATENATION", [x, x], [y], options("ConcatenationOptions", axis=3, fusedActivationFunction=1))
    result = import_cli(tmp_path, write(tmp_path, "concat.tflite", m.build([x], [y])))
    assert_one_line_error(result, "CONCATENATION node 'y'", "operator 0", "fused activation RELU")


@pytest.mark.xdist_group("tflite")
def test_float_path_refuses_integer_activations(tflite_model):
    """The float converters never see a full-int8 model's integer activations (the pre-quantized path,
    importers/tflite/quantized.py, takes such models)."""
    model = read_tflite(tflite_model(models.full_int8))
    with pytest.raises(PegasusError, match="CONV_2D node .* computes on int8 tensor .*pre-quantized"):
        refuse_integer_activations(model.nodes, {t.name: t for t in model.tensors})


@pytest.mark.xdist_group("tflite")
def test_control_flow_listed(tmp_path, tflite_model):
    """Keras' LSTM becomes a WHILE loop; its condition and body subgraphs are not followed."""
    result = import_cli(tmp_path, tflite_model(models.keras_lstm_while))
    assert_one_line_error(result, "unsupported operators (1)", "WHILE at node", "operator")


def _lstm_model(edit) -> bytes:
    """The LSTM test model with ``edit(operator, model)`` applied to its first LSTM."""
    model = unpack(models.lstm())
    edit(model.subgraphs[0].operators[0], model)
    return pack(model)


def _add_input(index: int):
    def edit(op, model):
        op.inputs[index] = op.inputs[1]   # any constant will do: its presence is what is refused
    return edit


def _options(**fields):
    def edit(op, model):
        for key, value in fields.items():
            setattr(op.builtinOptions, key, value)
    return edit


@pytest.mark.parametrize("edit, named", [
    (_add_input(16), "projection weights"),
    (_add_input(20), "input layer-norm coefficients"),
    (lambda op, model: op.inputs.__setitem__(1, -1), "CIFG (no input gate)"),
    (_options(fusedActivationFunction=3), "cell activation RELU6"),
], ids=["projection", "layer_norm", "cifg", "relu6"])
def test_lstm_variants_refused(tmp_path, edit, named):
    path = write(tmp_path, "lstm.tflite", _lstm_model(edit))
    with pytest.raises(PegasusError, match="LSTM variant not supported") as error:
        import_tflite(path)
    assert named in str(error.value) and "UNIDIRECTIONAL_SEQUENCE_LSTM node 'lstm'" in str(error.value)


def test_lstm_cell_clip_matches_interpreter(tmp_path):
    """cell_clip (10.0 in every Keras LSTM the converter writes; 0.3 here, so it binds) clips the new cell state
    before the output gate reads it: pegasus equals the interpreter, which differs from the unclipped model."""
    clipped = write(tmp_path, "clipped.tflite", _lstm_model(_options(cellClip=0.3)))
    plain = write(tmp_path, "plain.tflite", models.lstm())
    check_against_interpreter(clipped)
    with pytest.raises(AssertionError):
        check_against_interpreter(plain, reference=clipped, runs=1)
