"""Every bad input to ``pegasus import tensorflow`` gives one line on stderr naming what is wrong and where, exit
code 2, and writes nothing: files that are not TensorFlow models (another framework's, empty, random bytes, a
folder without saved_model.pb), a frozen graph without --inputs or --outputs, names the model lacks, unsupported
ops (all listed at once), an unknown signature, a placeholder that is needed but not given. One case runs the
real command line, where TensorFlow is first imported: its C++ start-up lines must stay off stderr."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.cli import main
from tests.conftest import CliResult, run_cli
from tests.importers.tensorflow import models
from tests.importers.tensorflow.harness import cached_case, check_case
from tests.support.cli_errors import assert_one_line_error

pytestmark = pytest.mark.xdist_group("tensorflow")


def import_tf(capfd, tmp_path, model, *extra) -> CliResult:
    """``pegasus import tensorflow`` in this process (TensorFlow loads once for the whole file)."""
    capfd.readouterr()
    code = main(["import", "tensorflow", "--model", str(model), "--output-model", str(tmp_path / "out" / "m.json"),
                 "--output-data", str(tmp_path / "out" / "m.data"), *map(str, extra)])
    captured = capfd.readouterr()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return CliResult(code, captured.out, captured.err)


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_tflite_file(capfd, tmp_path):
    tflite = cached_case(models.small_cnn).folder / "model.tflite"
    assert_one_line_error(import_tf(capfd, tmp_path, tflite), "not a TensorFlow model", "pegasus import tflite",
                          "model.tflite")


def test_onnx_file(capfd, tmp_path, demo_onnx):
    assert_one_line_error(import_tf(capfd, tmp_path, demo_onnx), "not a TensorFlow model", "pegasus import onnx")


@pytest.mark.parametrize("data", [b"", b"\x00" * 3, np.random.default_rng(0).integers(0, 256, 4096,
                                                                                     dtype=np.uint8).tobytes()],
                         ids=["empty", "zeros", "random"])
def test_not_a_graph(capfd, tmp_path, data):
    result = import_tf(capfd, tmp_path, write(tmp_path, "model.pb", data), "--inputs", "x", "--outputs", "y")
    assert_one_line_error(result, "not a TensorFlow", "model.pb")


def test_folder_without_saved_model(capfd, tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_error(import_tf(capfd, tmp_path, tmp_path / "empty"), "no saved_model.pb", "empty")


def test_frozen_graph_needs_inputs_and_outputs(capfd, tmp_path):
    model = cached_case(models.pool_ops).model
    assert_one_line_error(import_tf(capfd, tmp_path, model, "--outputs", "Identity"), "--inputs is required",
                          "frozen graph", "placeholders: x0")
    assert_one_line_error(import_tf(capfd, tmp_path, model, "--inputs", "x0"), "--outputs is required")


def test_names_the_model_lacks(capfd, tmp_path):
    model = cached_case(models.pool_ops).model
    assert_one_line_error(import_tf(capfd, tmp_path, model, "--inputs", "x0", "--outputs", "Identity nope"),
                          "--outputs", "'nope' is not a node of the model")
    assert_one_line_error(import_tf(capfd, tmp_path, model, "--inputs", "x0", "--outputs", "Identity:3"),
                          "'Identity:3' is not an output of node 'Identity'")
    saved = cached_case(models.module_saved_model).model
    assert_one_line_error(import_tf(capfd, tmp_path, saved, "--outputs", "score"), "'score' is not a node",
                          "its signature: features, scores")
    assert_one_line_error(import_tf(capfd, tmp_path, saved, "--signature", "predict"), "--signature predict",
                          "its signatures: serving_default")


def test_missing_placeholder_value(capfd, tmp_path):
    case = cached_case(models.tf1_checkpoint)
    result = import_tf(capfd, tmp_path, case.model, "--inputs", "x", "--outputs", "y")
    assert_one_line_error(result, "placeholder(s) 'is_training' (bool) are needed", "--predef-file")
    result = import_tf(capfd, tmp_path, case.model, "--inputs", "x", "--outputs", "y", "--predef-file",
                       write(tmp_path, "bad.npz", b"not a zip"))
    assert_one_line_error(result, "--predef-file", "bad.npz")


def test_unsupported_ops_listed_at_once(tmp_path):
    """The real command line: TensorFlow is imported in this process, and only pegasus's line reaches stderr."""
    case = cached_case(models.unsupported_ops)
    result = run_cli("import", "tensorflow", "--model", case.model, "--inputs", "x0", "--outputs", "Identity",
                     "--output-model", tmp_path / "out" / "m.json")
    assert_one_line_error(result, "unsupported operators (2)", "Cumsum at node 'Cumsum'", "TopKV2 at node 'TopKV2'")
    assert not (tmp_path / "out").exists()


def test_unknown_dimension_needs_input_size_list(capfd, tmp_path):
    case = cached_case(models.dynamic_shape)
    result = import_tf(capfd, tmp_path, case.model, "--inputs", "x0", "--outputs", "Identity")
    assert_one_line_error(result, "input 'x0' has an unknown dimension at axis 1", "--input-size-list")
    check_case(case, input_shapes=[[1, 5, 3]])


def test_output_on_the_untaken_branch(capfd, tmp_path):
    case = cached_case(models.training_flag)
    result = import_tf(capfd, tmp_path, case.model, "--inputs", "x", "--outputs", "cond/then/_0/cond/dropout/Mul",
                       "--predef-file", case.folder / "prd.npz")
    assert_one_line_error(result, "output 'cond/then/_0/cond/dropout/Mul' is on the untaken side")
