"""SavedModels and TF1 graphs with variables, imported as data and compared with TensorFlow's outputs: a tf.Module
saved by tf.saved_model.save (signature keys name the inputs and outputs), Keras 3's model.export, a TF1 graph
saved by tf.compat.v1.train.Saver (.meta + checkpoint, its training flag from a predef file) and by
tf.compat.v1.saved_model.Builder (VariableV2 and resource variables, tf.cond as Switch/Merge); a SavedModel whose
Python objects tf.saved_model.load cannot restore; the same Keras CNN through import tensorflow and import
tflite."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from pegasus.importers.tensorflow.loader import import_tensorflow, load_predef
from pegasus.importers.tflite.loader import import_tflite
from pegasus.runtime.interpreter import run
from tests.importers.tensorflow import models
from tests.importers.tensorflow.harness import cached_case, check_case

pytestmark = pytest.mark.xdist_group("tensorflow")


def test_module_saved_model_by_signature():
    case = cached_case(models.module_saved_model)
    check_case(case)
    graph = import_tensorflow(case.model)
    assert graph.inputs == ["image"] and sorted(graph.outputs) == ["features", "scores"]


def test_keras_export():
    check_case(cached_case(models.keras_saved_model))


def test_keras_export_other_signature_and_tensor_names():
    """--signature serve (Keras' other endpoint), and the graph cut by tensor names instead of signature keys."""
    case = cached_case(models.keras_saved_model)
    (key, image), = case.feeds.items()
    graph = import_tensorflow(case.model, signature="serve")
    np.testing.assert_allclose(run(graph, {key: image})["output_0"], case.expected["output_0"], rtol=1e-4, atol=1e-5)
    graph = import_tensorflow(case.model, inputs=[f"serving_default_{key}:0"], outputs=["StatefulPartitionedCall_1"])
    assert graph.inputs == [f"serving_default_{key}"]
    np.testing.assert_allclose(run(graph, {graph.inputs[0]: image})[graph.outputs[0]], case.expected["output_0"],
                               rtol=1e-4, atol=1e-5)


def test_tf1_checkpoint_with_predef_file():
    case = cached_case(models.tf1_checkpoint)
    check_case(case, predef=load_predef(case.folder / "prd.npz"))


def test_tf1_saved_model_builder():
    """Switch/Merge resolved by the predef value (training branch taken), variables from the checkpoint."""
    case = cached_case(models.tf1_saved_model)
    graph = import_tensorflow(case.model, predef=load_predef(case.folder / "prd.npz"))
    assert not {"Switch", "Merge", "Identity"} & {node.op for node in graph.nodes}
    check_case(case, predef=load_predef(case.folder / "prd.npz"))


def test_saved_model_whose_objects_tensorflow_cannot_restore(tmp_path):
    """The object graph (what tf.saved_model.load revives Python objects from) damaged, as in SavedModels of
    older TensorFlow versions that today's loader refuses: the import reads the graph and the checkpoint only."""
    from tests.importers.tflite.convert import tensorflow

    tf = tensorflow()
    from tensorflow.core.protobuf import saved_model_pb2

    case = cached_case(models.module_saved_model)
    folder = tmp_path / "saved"
    shutil.copytree(case.model, folder)
    saved = saved_model_pb2.SavedModel.FromString((folder / "saved_model.pb").read_bytes())
    for node in saved.meta_graphs[0].object_graph_def.nodes:
        if node.WhichOneof("kind") == "user_object":
            node.user_object.identifier = "optimizer_from_an_older_tensorflow"
    saved.meta_graphs[0].object_graph_def.concrete_functions.clear()
    (folder / "saved_model.pb").write_bytes(saved.SerializeToString())
    with pytest.raises(Exception):  # noqa: B017  (whatever TensorFlow raises)
        tf.saved_model.load(str(folder))
    check_case(case, model=folder)


def test_same_cnn_through_tensorflow_tflite_and_keras():
    """The Keras CNN frozen, through TFLiteConverter and as a .keras file: the same layers, and the same outputs
    as TensorFlow's, whichever importer reads it."""
    from pegasus.importers.keras.loader import import_keras

    case = cached_case(models.small_cnn)
    graphs = {"tensorflow": import_tensorflow(case.model, **case.options),
              "tflite": import_tflite(case.folder / "model.tflite"),
              "keras": import_keras(case.folder / "model.keras")}
    (feed,) = case.feeds.values()
    (want,) = case.expected.values()
    for route, graph in graphs.items():
        got = run(graph, {graph.inputs[0]: feed})[graph.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=route)
        # the same weight layers (BatchNorm folded into the conv by every route); the global average pool is
        # a ReduceMean from TF and TFLite, a GlobalAveragePool + Reshape from Keras
        assert [n.op for n in graph.nodes if n.op in ("Conv", "Gemm")] == ["Conv", "Conv", "Conv", "Gemm"], route
    assert [n.op for n in graphs["tflite"].nodes] == [n.op for n in graphs["tensorflow"].nodes]
