"""How a Keras model lands in the graph: layer names as the user gave them (shared layers' later calls
``<layer>_1``, nested models' layers ``<call>/<layer>``), a shared layer's weights stored once,
BatchNormalization folded into the convolution or Dense before it, cuts at layer names, other batch sizes,
and the command line's files."""

from __future__ import annotations

import json
from importlib import metadata

import numpy as np
import pytest

from pegasus.importers.keras.loader import import_keras
from pegasus.runtime.interpreter import run
from tests.conftest import run_cli
from tests.importers.keras import models
from tests.importers.keras.harness import check_import


@pytest.mark.parametrize("library, suffix", [("keras", ".keras"), ("tf_keras", ".h5")])
def test_names_of_nested_and_shared_layers(keras_model, library, suffix):
    built = keras_model(models.nested_shared, library)
    graph = check_import(built.files[suffix], built)
    assert graph.inputs == ["left", "right"]
    # the head's two calls, the shared conv's first, the backbone's two calls
    assert graph.outputs == ["head", "head_1", "conv", "backbone", "backbone_1"]
    layers = {node.name: node for node in graph.nodes}
    for name in ("backbone/conv", "backbone_1/conv", "conv", "conv_1", "shared_dense", "shared_dense_1",
                 "head/hidden", "head/logits", "head_1/logits", "gate", "merge"):
        assert name in layers, (name, sorted(layers))
    assert layers["head/logits"].outputs == ["head"] and layers["backbone_1/relu6"].outputs == ["backbone_1"]
    # one copy of a shared layer's weights, read by each call
    assert layers["shared_dense"].inputs[1] == layers["shared_dense_1"].inputs[1] == "shared_dense/kernel"
    assert layers["head/logits"].inputs[1] == layers["head_1/logits"].inputs[1]
    assert layers["conv"].inputs[1] == layers["conv_1"].inputs[1]


@pytest.mark.parametrize("builder, library, suffix", [(models.convolutions, "keras", ".keras"),
                                                      (models.convolutions, "tf_keras", ".h5"),
                                                      (models.sequential, "keras", ".h5"),
                                                      (models.sequential, "tf_keras", ".h5"),
                                                      (models.mobilenet, "keras", ".keras"),
                                                      (models.mobilenet, "tf_keras", ".h5")])
def test_batchnorm_folds_into_the_layer_before(keras_model, builder, library, suffix):
    """Every BatchNormalization of these models follows a Conv, ConvTranspose or Dense (channels last, or
    channels first on axis 1): none is left, as a Mul/Add or otherwise."""
    built = keras_model(builder, library)
    graph = check_import(built.files[suffix], built)
    left = [(node.name, node.op) for node in graph.nodes if node.op in ("BatchNormalization", "Mul")]
    assert not left
    if builder is models.convolutions:   # the folded convolution writes the batch norm's tensor
        writers = {node.outputs[0]: node for node in graph.nodes}
        assert writers["bn_conv"].name == "conv_same" and writers["bn_dw"].name == "dw"
        assert writers["bn_first"].name == "dw_first" and writers["bn_deconv"].name == "deconv_same"
        assert not any(node.op == "Add" for node in graph.nodes)


def test_cut_at_layer_names(keras_model):
    """MobileNetV2 cut after its pooling and from there: the two parts compose to the model's output."""
    built = keras_model(models.mobilenet, "tf_keras")
    path = built.files[".h5"]
    front = import_keras(path, outputs=["pool"])
    back = import_keras(path, inputs=["pool"])
    assert back.inputs == ["pool"] and back.type_of("pool").shape == front.type_of("pool").shape
    pooled = run(front, {"image": built.inputs[0]})["pool"]
    np.testing.assert_allclose(run(back, {"pool": pooled})["classes"], built.outputs[0], rtol=1e-4, atol=1e-5)
    inner = import_keras(path, outputs=["mobilenetv2_0.35_64/block_3_project_BN"])
    assert inner.outputs == ["mobilenetv2_0.35_64/block_3_project_BN"]
    assert inner.type_of(inner.outputs[0]).shape == (1, 8, 8, 16)


def test_batch_from_input_size_list(keras_model):
    built = keras_model(models.sequential, "keras")
    graph = import_keras(built.files[".keras"], input_shapes=[(3, 10, 10, 2)])
    x = np.concatenate([built.inputs[0]] * 3)
    got = run(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    np.testing.assert_allclose(got, np.concatenate([built.outputs[0]] * 3), rtol=1e-4, atol=1e-5)


def test_dimension_of_any_size(tmp_path, keras_model):
    """An input of any length needs its shape: one line without it, the framework's answer with it."""
    built = keras_model(models.variable_length, "keras")
    result = run_cli("import", "keras", "--model", built.files[".keras"], "--output-model", tmp_path / "m.json")
    assert result.code == 2 and result.stderr.strip().splitlines() == [
        "pegasus: error: input 'steps' has shape [None, None, 4] (None = any size): give its shape with "
        "--input-size-list"]
    check_import(built.files[".keras"], built, input_shapes=[(1, 6, 4)])
    result = run_cli("import", "keras", "--model", built.files[".keras"], "--output-model", tmp_path / "m.json",
                     "--input-size-list", "6,4")
    assert result.code == 0 and "steps: float32[1,6,4]" in result.stdout, result.stderr


def test_command_line(tmp_path, keras_model):
    built = keras_model(models.recurrent, "keras")
    out = tmp_path / "model" / "rnn.json"
    result = run_cli("import", "keras", "--model", built.files[".keras"], "--output-model", out)
    assert result.code == 0, result.stderr
    assert "tokens: dynamic batch = 1" in result.stderr
    document = json.loads(out.read_text())
    assert document["source"] == {"framework": "keras", "file": built.files[".keras"].name,
                                  "keras_version": metadata.version("keras"), "layout": "nhwc"}
    assert [o["name"] for o in document["outputs"]][3:6] == ["lstm_state", "lstm_state_1", "lstm_state_2"]
    assert out.with_suffix(".data").exists()


def test_keras_2_1_sequential(tmp_path, keras_model):
    """Keras up to 2.1 saved a Sequential's config as the bare list of its layers (no InputLayer; the first
    layer holds batch_input_shape): the model tf-keras saved, with its config written that way, imports and
    computes what Keras computed, its input named after the first layer as Keras 2.1 named it."""
    import h5py

    built = keras_model(models.sequential, "tf_keras")
    path = tmp_path / "old.h5"
    path.write_bytes(built.files[".h5"].read_bytes())
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        layers = [layer for layer in config["config"]["layers"] if layer["class_name"] != "InputLayer"]
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": layers})
        f.attrs["keras_version"] = "2.1.6"
    graph = check_import(path, built)
    assert graph.inputs == [f"{layers[0]['config']['name']}_input"]
