"""The Acuity flags of ``pegasus import tensorflow`` against TensorFlow's answers: --predef-file values (a
placeholder with a default overridden too), --subgraphs (the union of two cuts, one input inside the graph, run
by TensorFlow with that tensor fed), --mean-values/--std-values (the input in the quantized domain), and the
command line end to end with --input-size-list/--size-with-batch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pegasus.cli import main
from pegasus.importers.tensorflow.loader import import_tensorflow, load_predef, parse_subgraphs
from pegasus.importers.tensorflow.reader import read_tensorflow
from pegasus.ir import serialize
from pegasus.runtime.interpreter import run
from tests.importers.tensorflow import models
from tests.importers.tensorflow.harness import cached_case, check_case

pytestmark = pytest.mark.xdist_group("tensorflow")


def tensorflow_values(model, feeds: dict[str, np.ndarray], fetches: list[str]) -> list[np.ndarray]:
    """TensorFlow running the frozen graph with any tensors fed (the reference for cuts)."""
    from tests.importers.tflite.convert import tensorflow

    tf = tensorflow()
    graph_def = tf.compat.v1.GraphDef.FromString(model.read_bytes())
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        tf.compat.v1.import_graph_def(graph_def, name="")
        return session.run([f"{name}:0" for name in fetches], {f"{k}:0": v for k, v in feeds.items()})


def test_predef_overrides_a_placeholder_with_default():
    case = cached_case(models.tf1_checkpoint)
    predef = {**load_predef(case.folder / "prd.npz"), "scale_up": np.array(True)}
    with np.load(case.folder / "scaled.npz") as scaled:
        want = scaled["y"]
    graph = import_tensorflow(case.model, **case.options, predef=predef)
    np.testing.assert_allclose(run(graph, case.feeds)["y"], want, rtol=1e-4, atol=1e-5)


def test_subgraphs_union_of_cuts():
    """'x0#<relu6>;<maxpool>#Identity': the graph takes x0 and the max pool's output, gives the ReLU6's and the
    model's output; everything between the two cuts is left out."""
    case = cached_case(models.small_cnn)
    nodes = {node.op_type: node.name for node in read_tensorflow(case.model).nodes}
    relu6, pool = nodes["Relu6"], nodes["MaxPool"]
    subgraphs = parse_subgraphs(f"x0#{relu6};{pool}#Identity")
    graph = import_tensorflow(case.model, subgraphs=subgraphs, input_shapes=[[1, 12, 12, 3], [1, 3, 3, 12]])
    assert graph.inputs == ["x0", pool] and graph.outputs == [relu6, "Identity"]
    assert "Conv" in [n.op for n in graph.nodes] and len(graph.nodes) < 8   # the depthwise conv and the 1x1 left out
    feeds = {"x0": case.feeds["x0"], pool: np.random.default_rng(9).uniform(0, 3, (1, 3, 3, 12)).astype(np.float32)}
    got = run(graph, feeds)
    for name, want in zip(graph.outputs, tensorflow_values(case.model, feeds, graph.outputs)):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


def test_mean_and_std_values():
    """The input holds quantized-domain values q; the model sees (q - 127.5) / 127.5."""
    case = cached_case(models.module_saved_model)
    graph = import_tensorflow(case.model, mean_values=[127.5], std_values=[127.5])
    quantized = case.feeds["image"] * 127.5 + 127.5
    got = run(graph, {"image": quantized})
    for name, want in case.expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


def test_command_line_with_input_size_list(tmp_path, capfd):
    case = cached_case(models.keras_saved_model)
    (key, image), = case.feeds.items()
    images = np.concatenate([image, image[:, ::-1]])
    out = tmp_path / "out" / "k.json"
    code = main(["import", "tensorflow", "--model", str(case.model), "--input-size-list", "2,12,12,3",
                 "--size-with-batch", "True", "--output-model", str(out)])
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert captured.err == ""
    assert json.loads(out.read_text())["source"]["framework"] == "tensorflow"
    graph = serialize.load(out, out.with_suffix(".data"))
    assert graph.type_of(key).shape == (2, 12, 12, 3)
    got = run(graph, {key: images})["output_0"]
    np.testing.assert_allclose(got[:1], case.expected["output_0"], rtol=1e-4, atol=1e-5)
    check_case(case, inputs=[key], outputs=["output_0"])


@pytest.mark.parametrize("model", ["model.pb", "model_if.pb"])
def test_training_flag_decided_by_predef(model):
    """tf.cond on a bool input given by --predef-file: as Switch/Merge, or as StatelessIf whose branch function
    is inlined; the training branch (dropout, which pegasus does not convert) is left out."""
    case = cached_case(models.training_flag)
    predef = load_predef(case.folder / "prd.npz")
    graph = import_tensorflow(case.folder / model, **case.options, predef=predef)
    assert [n.op for n in graph.nodes] == ["Relu", "Mul", "Gemm"]                 # relu(x) * 2.0 @ w
    check_case(case, model=case.folder / model, predef=predef)
