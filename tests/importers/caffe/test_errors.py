"""Every bad input to ``pegasus import caffe`` gives one line on stderr naming what is wrong and where, exit code
2, and writes nothing: a malformed prototxt (line and column), a misspelt field, unsupported layer types (all
listed at once, even when their parameters are unknown to pegasus), a caffemodel whose blobs do not fit the
prototxt (layer, expected and found shapes or counts), files of the wrong kind, and broken wiring."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.importers.caffe.harness import caffe_model
from tests.support.cli_errors import assert_one_line_error

CONV = """input: "data"
input_shape { dim: 1 dim: 3 dim: 8 dim: 8 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
"""
GOOD_BLOBS = {"conv1": [np.ones((4, 3, 3, 3)), np.zeros(4)]}


def import_cli(tmp_path, prototxt, weights=None, *extra):
    args = ["import", "caffe", "--model", prototxt]
    if weights is not None:
        args += ["--weights", weights]
    result = run_cli(*args, "--output-model", tmp_path / "out" / "m.json", "--output-data", tmp_path / "out" / "m.data",
                     *extra)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return result


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


@pytest.mark.parametrize("old, new, where", [
    ("num_output: 4", "num_output 4", "line 4, column 34"),
    ('top: "conv1"\n', 'top: "conv1\n', "line 3, column 63"),
    ("kernel_size: 3 } }", "kernel_size: 3 }", "line 5, column 1"),
])
def test_syntax_error_has_line_and_column(tmp_path, old, new, where):
    text = CONV.replace(old, new, 1)
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "bad.prototxt", text)), "bad.prototxt", where)


def test_bad_value_has_line_and_column(tmp_path):
    text = CONV.replace("num_output: 4", "num_output: four")
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "bad.prototxt", text)), "bad.prototxt",
                          "line 4, column 35", "num_output")


def test_misspelt_field_of_a_supported_layer(tmp_path):
    text = CONV.replace("kernel_size: 3", "kernal_size: 3")
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "typo.prototxt", text)), "typo.prototxt",
                          "line 4, column 37", 'no field named "kernal_size"')


def test_unsupported_layers_listed_at_once(tmp_path):
    text = CONV + """
layer { name: "proposal" type: "Proposal" bottom: "conv1" top: "rois" proposal_param { feat_stride: 16 } }
layer { name: "roi_pool" type: "ROIPooling" bottom: "conv1" bottom: "rois" top: "pooled"
  roi_pooling_param { pooled_h: 7 pooled_w: 7 } }
layer { name: "mvn" type: "MVN" bottom: "pooled" top: "mvn" }
"""
    prototxt, caffemodel = caffe_model(tmp_path, CONV, GOOD_BLOBS)
    result = import_cli(tmp_path, write(tmp_path, "frcnn.prototxt", text), caffemodel)
    assert_one_line_error(result, "unsupported operators (3)", "Proposal at node 'proposal', line 7",
                          "ROIPooling at node 'roi_pool', line 8", "MVN at node 'mvn', line 10")


def test_blob_shape_mismatch(tmp_path):
    prototxt, caffemodel = caffe_model(tmp_path, CONV, {"conv1": [np.ones((4, 3, 5, 5)), np.zeros(4)]})
    assert_one_line_error(import_cli(tmp_path, prototxt, caffemodel), "m.caffemodel", "layer 'conv1' (Convolution, "
                          "line 3)", "blob 0 (weights) has shape [4, 3, 5, 5]", "the prototxt implies [4, 3, 3, 3]")


def test_blob_count_mismatch(tmp_path):
    prototxt, caffemodel = caffe_model(tmp_path, CONV, {"conv1": [np.ones((4, 3, 3, 3))]})
    assert_one_line_error(import_cli(tmp_path, prototxt, caffemodel), "layer 'conv1'", "has 1 blobs",
                          "implies 2 (weights, bias)")


def test_layer_without_blobs(tmp_path):
    prototxt, caffemodel = caffe_model(tmp_path, CONV, {})
    assert_one_line_error(import_cli(tmp_path, prototxt, caffemodel), "layer 'conv1'", "has no blobs")


NOISE = np.random.default_rng(0).integers(0, 256, 999, np.uint8).tobytes()


@pytest.mark.parametrize("data", [b"", b"\xff" * 64, NOISE], ids=["empty", "ff", "noise"])
def test_caffemodel_that_is_not_one(tmp_path, data):
    prototxt = write(tmp_path, "m.prototxt", CONV)
    assert_one_line_error(import_cli(tmp_path, prototxt, write(tmp_path, "w.caffemodel", data)), "w.caffemodel",
                          "not a binary caffemodel")


def test_binary_given_as_prototxt(tmp_path):
    _, caffemodel = caffe_model(tmp_path, CONV, GOOD_BLOBS)
    result = import_cli(tmp_path, caffemodel)
    assert_one_line_error(result, "m.caffemodel", "not a text prototxt")


def test_bottom_nobody_writes(tmp_path):
    text = CONV + 'layer { name: "add" type: "Eltwise" bottom: "conv1" bottom: "nowhere" top: "add" }\n'
    prototxt, caffemodel = caffe_model(tmp_path, text, GOOD_BLOBS)
    assert_one_line_error(import_cli(tmp_path, prototxt, caffemodel), "layer 'add' (line 6) reads blob 'nowhere'")


def test_input_without_shape(tmp_path):
    text = 'input: "data"\nlayer { name: "r" type: "ReLU" bottom: "data" top: "r" }\n'
    assert_one_line_error(import_cli(tmp_path, write(tmp_path, "m.prototxt", text)), "input 'data' has no shape")


def test_missing_files(tmp_path):
    assert_one_line_error(import_cli(tmp_path, tmp_path / "absent.prototxt"), "absent.prototxt")
    prototxt = write(tmp_path, "m.prototxt", CONV)
    assert_one_line_error(import_cli(tmp_path, prototxt, tmp_path / "absent.caffemodel"), "absent.caffemodel")


def test_layer_parameter_out_of_range(tmp_path):
    text = CONV.replace("num_output: 4 kernel_size: 3", "num_output: 4 kernel_size: 3 group: 2")
    prototxt, caffemodel = caffe_model(tmp_path, text, GOOD_BLOBS)
    assert_one_line_error(import_cli(tmp_path, prototxt, caffemodel), "Convolution node 'conv1', line 3",
                          "group 2 does not divide 3 input")
