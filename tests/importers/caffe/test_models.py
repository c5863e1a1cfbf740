"""Whole Caffe networks: an SSD-style MobileNet (depthwise blocks with in-place BatchNorm/Scale/ReLU, loc/conf
heads, PriorBox and DetectionOutput) cut before its post-processing, the legacy V1 format with 4-D blob shapes,
the input forms (input_dim, Input layers), TEST-phase layer rules, in-place renaming, and the command line
with and without ``--weights``: each against OpenCV's dnn module (rtol = atol = 1e-4)."""

from __future__ import annotations

import json

import numpy as np

from pegasus.importers.caffe.loader import import_caffe
from pegasus.runtime.interpreter import run
from tests.conftest import run_cli
from tests.importers.caffe.harness import caffe_model, check_against_opencv


def _conv_bn_relu(name: str, bottom: str, outputs: int, kernel: int, stride: int, group: int, channels: int,
                  rng, blobs: dict) -> str:
    """A MobileNet-SSD block: convolution, then BatchNorm, Scale and ReLU in place on the same blob."""
    pad = kernel // 2
    blobs[name] = [rng.normal(0, 0.3, (outputs, channels // group, kernel, kernel))]
    blobs[f"{name}/bn"] = [rng.normal(0, 0.1, outputs), rng.uniform(0.5, 2, outputs), np.array([1.0])]
    blobs[f"{name}/scale"] = [rng.uniform(0.5, 1.5, outputs), rng.normal(0, 0.1, outputs)]
    return f"""
layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{name}"
  param {{ lr_mult: 1 decay_mult: 1 }}
  convolution_param {{ num_output: {outputs} bias_term: false pad: {pad} kernel_size: {kernel} stride: {stride}
    group: {group} engine: CAFFE weight_filler {{ type: "msra" }} }} }}
layer {{ name: "{name}/bn" type: "BatchNorm" bottom: "{name}" top: "{name}"
  param {{ lr_mult: 0 decay_mult: 0 }} param {{ lr_mult: 0 decay_mult: 0 }} param {{ lr_mult: 0 decay_mult: 0 }} }}
layer {{ name: "{name}/scale" type: "Scale" bottom: "{name}" top: "{name}" scale_param {{ filler {{ value: 1 }}
  bias_term: true bias_filler {{ value: 0 }} }} }}
layer {{ name: "{name}/relu" type: "ReLU" bottom: "{name}" top: "{name}" }}
"""


def _head(name: str, bottom: str, channels: int, priors: int, classes: int, min_size: float, rng, blobs: dict) -> str:
    text = ""
    for kind, per_prior in (("loc", 4), ("conf", classes)):
        head = f"{name}_mbox_{kind}"
        blobs[head] = [rng.normal(0, 0.2, (priors * per_prior, channels, 3, 3)), rng.normal(0, 0.1, priors * per_prior)]
        text += f"""
layer {{ name: "{head}" type: "Convolution" bottom: "{bottom}" top: "{head}"
  convolution_param {{ num_output: {priors * per_prior} kernel_size: 3 pad: 1 }} }}
layer {{ name: "{head}_perm" type: "Permute" bottom: "{head}" top: "{head}_perm"
  permute_param {{ order: 0 order: 2 order: 3 order: 1 }} }}
layer {{ name: "{head}_flat" type: "Flatten" bottom: "{head}_perm" top: "{head}_flat" flatten_param {{ axis: 1 }} }}
"""
    return text + f"""
layer {{ name: "{name}_mbox_priorbox" type: "PriorBox" bottom: "{bottom}" bottom: "data" top: "{name}_mbox_priorbox"
  prior_box_param {{ min_size: {min_size} max_size: {min_size * 2} aspect_ratio: 2 flip: true clip: false
    variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 offset: 0.5 }} }}
"""


def mobilenet_ssd(rng, classes: int = 3) -> tuple[str, dict]:
    blobs: dict = {}
    text = 'name: "MobileNet-SSD"\ninput: "data"\ninput_shape { dim: 1 dim: 3 dim: 64 dim: 64 }\n'
    text += _conv_bn_relu("conv0", "data", 8, 3, 2, 1, 3, rng, blobs)
    text += _conv_bn_relu("conv1/dw", "conv0", 8, 3, 1, 8, 8, rng, blobs)
    text += _conv_bn_relu("conv1", "conv1/dw", 16, 1, 1, 1, 8, rng, blobs)
    text += _conv_bn_relu("conv2/dw", "conv1", 16, 3, 2, 16, 16, rng, blobs)
    text += _conv_bn_relu("conv2", "conv2/dw", 24, 1, 1, 1, 16, rng, blobs)
    text += _conv_bn_relu("conv3/dw", "conv2", 24, 3, 2, 24, 24, rng, blobs)
    text += _conv_bn_relu("conv3", "conv3/dw", 32, 1, 1, 1, 24, rng, blobs)
    priors = 4  # min, sqrt(min * max), aspect 2 and 1/2
    text += _head("conv2", "conv2", 24, priors, classes, 16.0, rng, blobs)
    text += _head("conv3", "conv3", 32, priors, classes, 32.0, rng, blobs)
    text += f"""
layer {{ name: "mbox_loc" type: "Concat" bottom: "conv2_mbox_loc_flat" bottom: "conv3_mbox_loc_flat" top: "mbox_loc"
  concat_param {{ axis: 1 }} }}
layer {{ name: "mbox_conf" type: "Concat" bottom: "conv2_mbox_conf_flat" bottom: "conv3_mbox_conf_flat"
  top: "mbox_conf" concat_param {{ axis: 1 }} }}
layer {{ name: "mbox_priorbox" type: "Concat" bottom: "conv2_mbox_priorbox" bottom: "conv3_mbox_priorbox"
  top: "mbox_priorbox" concat_param {{ axis: 2 }} }}
layer {{ name: "mbox_conf_reshape" type: "Reshape" bottom: "mbox_conf" top: "mbox_conf_reshape"
  reshape_param {{ shape {{ dim: 0 dim: -1 dim: {classes} }} }} }}
layer {{ name: "mbox_conf_softmax" type: "Softmax" bottom: "mbox_conf_reshape" top: "mbox_conf_softmax"
  softmax_param {{ axis: 2 }} }}
layer {{ name: "mbox_conf_flatten" type: "Flatten" bottom: "mbox_conf_softmax" top: "mbox_conf_flatten"
  flatten_param {{ axis: 1 }} }}
layer {{ name: "detection_out" type: "DetectionOutput" bottom: "mbox_loc" bottom: "mbox_conf_flatten"
  bottom: "mbox_priorbox" top: "detection_out" include {{ phase: TEST }}
  detection_output_param {{ num_classes: {classes} share_location: true background_label_id: 0
    nms_param {{ nms_threshold: 0.45 top_k: 100 }} code_type: CENTER_SIZE keep_top_k: 100
    confidence_threshold: 0.25 }} }}
"""
    return text, blobs


def test_mobilenet_ssd_cut_before_post_processing(tmp_path):
    text, blobs = mobilenet_ssd(np.random.default_rng(0))
    prototxt, caffemodel = caffe_model(tmp_path, text, blobs)
    notes: list[str] = []
    worst = check_against_opencv(prototxt, caffemodel, notes=notes, low=0.0, high=1.0)
    graph = import_caffe(prototxt, caffemodel)
    assert graph.outputs == ["mbox_loc", "mbox_conf_flatten"]
    assert graph.type_of("mbox_loc").shape == (1, (16 * 16 + 8 * 8) * 4 * 4)
    ops = [node.op for node in graph.nodes]
    assert "BatchNormalization" not in ops and ops.count("Conv") == 7 + 4   # BatchNorm + Scale folded
    assert len(notes) == 1
    for fragment in ("DetectionOutput detection_out", "PriorBox conv2_mbox_priorbox", "Concat mbox_priorbox",
                     "graph outputs: mbox_loc, mbox_conf_flatten"):
        assert fragment in notes[0], notes[0]
    assert worst < 1e-4


def test_mobilenet_ssd_command_line(tmp_path):
    text, blobs = mobilenet_ssd(np.random.default_rng(1))
    prototxt, caffemodel = caffe_model(tmp_path, text, blobs)
    out = tmp_path / "out"
    result = run_cli("import", "caffe", "--model", prototxt, "--weights", caffemodel, "--output-model",
                     out / "ssd.json", "--output-data", out / "ssd.data")
    assert result.code == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("post-processing left out of the graph"), result.stderr
    model = json.loads((out / "ssd.json").read_text())
    assert [output["name"] for output in model["outputs"]] == ["mbox_loc", "mbox_conf_flatten"]
    assert (out / "ssd.data").stat().st_size > 0


V1_TEXT = """name: "legacy"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 10 input_dim: 10
layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1" blobs_lr: 1 blobs_lr: 2
  convolution_param { num_output: 4 kernel_size: 3 stride: 1 } }
layers { name: "relu1" type: RELU bottom: "conv1" top: "conv1" }
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layers { name: "norm1" type: LRN bottom: "pool1" top: "norm1" lrn_param { local_size: 3 alpha: 0.0001 beta: 0.75 } }
layers { name: "fc1" type: INNER_PRODUCT bottom: "norm1" top: "fc1" inner_product_param { num_output: 5 } }
layers { name: "drop1" type: DROPOUT bottom: "fc1" top: "fc1" dropout_param { dropout_ratio: 0.5 } }
layers { name: "prob" type: SOFTMAX bottom: "fc1" top: "prob" }
"""


def test_lstm_caffe_proto_flag(tmp_path):
    """Acuity's ``--proto lstm_caffe`` reads the same messages: the same model files import the same way."""
    rng = np.random.default_rng(6)
    blobs = {"conv1": [rng.normal(size=(4, 3, 3, 3)), rng.normal(size=4)], "fc1": [rng.normal(size=(5, 64)),
                                                                                   rng.normal(size=5)]}
    prototxt, caffemodel = caffe_model(tmp_path, V1_TEXT, blobs)
    files = []
    for proto in ("caffe", "lstm_caffe"):
        out = tmp_path / proto
        result = run_cli("import", "caffe", "--model", prototxt, "--weights", caffemodel, "--proto", proto,
                         "--output-model", out / "m.json", "--output-data", out / "m.data")
        assert result.code == 0, result.stderr
        files.append((out / "m.data").read_bytes())
    assert files[0] == files[1]


def test_v1_layers_with_legacy_blob_shapes(tmp_path):
    rng = np.random.default_rng(2)
    blobs = {"conv1": [rng.normal(size=(4, 3, 3, 3)), rng.normal(size=4)],
             "fc1": [rng.normal(size=(5, 4 * 4 * 4)), rng.normal(size=5)]}
    prototxt, caffemodel = caffe_model(tmp_path, V1_TEXT, blobs, legacy=True)
    check_against_opencv(prototxt, caffemodel)
    graph = import_caffe(prototxt, caffemodel)
    assert [node.op for node in graph.nodes] == ["Conv", "Relu", "MaxPool", "LRN", "Flatten", "Gemm", "Softmax"]


def test_input_layer_and_phase_rules(tmp_path):
    """Layers for another phase are left out as Caffe's TEST net does (OpenCV ignores the rules: it is given
    the net without them)."""
    text = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 5 dim: 5 } } }
layer { name: "train_only" type: "Dropout" bottom: "data" top: "data" include { phase: TRAIN } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 3 kernel_size: 3 } }
layer { name: "not_in_test" type: "ReLU" bottom: "conv" top: "conv" exclude { phase: TEST } }
layer { name: "sig" type: "Sigmoid" bottom: "conv" top: "conv" include { phase: TEST } }
"""
    rng = np.random.default_rng(3)
    blobs = {"conv": [rng.normal(size=(3, 2, 3, 3)), rng.normal(size=3)]}
    prototxt, caffemodel = caffe_model(tmp_path, text, blobs)
    test_net = "\n".join(line for line in text.splitlines() if "phase: TRAIN" not in line and "exclude" not in line)
    reference, reference_weights = caffe_model(tmp_path, test_net, blobs, name="test_net")
    graph = import_caffe(prototxt, caffemodel)
    check_against_opencv(reference, reference_weights, graph=graph)
    assert [node.op for node in graph.nodes] == ["Conv", "Sigmoid"] and graph.inputs == ["data"]


def test_in_place_versions_are_renamed(tmp_path):
    """conv → ReLU in place → Power in place: the last version keeps the blob's name, earlier ones are named
    after the layer that wrote them, and a layer reading the blob in between reads the version it saw."""
    text = """input: "data"
input_shape { dim: 1 dim: 2 dim: 4 dim: 4 }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 2 kernel_size: 1 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "side" type: "Sigmoid" bottom: "conv" top: "side" }
layer { name: "power" type: "Power" bottom: "conv" top: "conv" power_param { scale: 2 shift: 1 } }
"""
    rng = np.random.default_rng(4)
    prototxt, caffemodel = caffe_model(tmp_path, text, {"conv": [rng.normal(size=(2, 2, 1, 1)), rng.normal(size=2)]})
    check_against_opencv(prototxt, caffemodel)
    graph = import_caffe(prototxt, caffemodel, optimize=False)
    assert graph.outputs == ["side", "conv"]
    assert [(n.name, n.inputs[0], n.outputs[0]) for n in graph.nodes if n.op in ("Relu", "Sigmoid")] == \
        [("relu", "conv/out", "relu/out"), ("side", "relu/out", "side")]


def test_random_weights_without_caffemodel(tmp_path):
    text, blobs = mobilenet_ssd(np.random.default_rng(0))
    prototxt, caffemodel = caffe_model(tmp_path, text, blobs)
    outputs = []
    for attempt in range(2):
        out = tmp_path / f"run{attempt}"
        result = run_cli("import", "caffe", "--model", prototxt, "--output-model", out / "m.json",
                         "--output-data", out / "m.data")
        assert result.code == 0, result.stderr
        warnings = [line for line in result.stderr.splitlines() if "random weights" in line]
        assert len(warnings) == 1 and "no --weights" in warnings[0] and "seed 0" in warnings[0]
        outputs.append((out / "m.data").read_bytes())
    assert outputs[0] == outputs[1]   # seeded: the same file twice
    random, trained = import_caffe(prototxt, None), import_caffe(prototxt, caffemodel)
    assert [(n.op, n.outputs) for n in random.nodes] == [(n.op, n.outputs) for n in trained.nodes]
    got = run(random, {"data": np.random.default_rng(5).uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)})
    assert all(np.isfinite(value).all() and value.std() > 0 for value in got.values())
