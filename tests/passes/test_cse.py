"""Common-subexpression elimination (pegasus/passes/cse.py), at import and in the exporter's lowering, against
onnxruntime: branches repeating a layer on the same input (weights equal in value under other names) merge,
whole chains of them too, and a BatchNormalization then stays off the shared convolution; what differs, writes a
graph output, or writes an optional output the earlier layer leaves out is kept. The merged graphs' bundles
match onnxruntime on the host."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.lower import lower_for_export
from pegasus.importers.onnx.loader import import_onnx
from pegasus.passes.cse import eliminate_common_subexpressions
from tests.support.host_runner import run_bundle_host
from tests.support.onnx_passes import check_against_onnxruntime, make_model, onnxruntime_outputs

RNG = np.random.default_rng(5)
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])
FEEDS = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}


def _branches(second_weights: np.ndarray, batchnorm: bool = False):
    """Two branches of Conv (3x3, same input) -> [BatchNormalization ->] Relu, summed."""
    w = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    nodes, inits = [], [("w1", w), ("w2", second_weights if second_weights is not None else w.copy())]
    for branch in (1, 2):
        nodes.append(helper.make_node("Conv", ["x", f"w{branch}"], [f"c{branch}"], pads=[1, 1, 1, 1]))
        head = f"c{branch}"
        if batchnorm:
            scale, bias = RNG.uniform(0.5, 2, 5).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
            mean, var = RNG.standard_normal(5).astype(np.float32), RNG.uniform(0.5, 2, 5).astype(np.float32)
            inits += [(f"s{branch}", scale), (f"b{branch}", bias), (f"m{branch}", mean), (f"v{branch}", var)]
            nodes.append(helper.make_node("BatchNormalization", [head, f"s{branch}", f"b{branch}", f"m{branch}",
                                                                 f"v{branch}"], [f"n{branch}"]))
            head = f"n{branch}"
        nodes.append(helper.make_node("Relu", [head], [f"r{branch}"]))
    nodes.append(helper.make_node("Add", ["r1", "r2"], ["y"]))
    return make_model(nodes, [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def test_repeated_chain_merges(tmp_path):
    model = _branches(None)
    graph = check_against_onnxruntime(model, FEEDS)
    assert [node.op for node in graph.nodes] == ["Conv", "Relu", "Add"]
    assert graph.nodes[2].inputs[0] == graph.nodes[2].inputs[1]
    got = run_bundle_host(graph, FEEDS, workdir=tmp_path)["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, FEEDS)[0], rtol=1e-5, atol=1e-5)


def test_batchnorms_stay_off_the_shared_convolution(tmp_path):
    model = _branches(None, batchnorm=True)
    graph = check_against_onnxruntime(model, FEEDS)
    assert sorted(node.op for node in graph.nodes).count("Conv") == 1
    assert sorted(node.op for node in graph.nodes).count("BatchNormalization") == 2
    got = run_bundle_host(graph, FEEDS, workdir=tmp_path)["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, FEEDS)[0], rtol=1e-5, atol=1e-5)


def test_weights_differing_in_one_element_keep_both():
    w = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    model = _branches(w)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w1"))
    w2 = w.copy()
    w2[4, 3, 2, 1] = np.nextafter(w2[4, 3, 2, 1], np.inf)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(w2, "w2"))
    graph = check_against_onnxruntime(model, FEEDS)
    assert [node.op for node in graph.nodes].count("Conv") == 2


def test_graph_output_and_optional_output_keep_their_layers():
    y1 = helper.make_tensor_value_info("y1", TensorProto.FLOAT, None)
    y2 = helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)
    idx = helper.make_tensor_value_info("i", TensorProto.INT64, None)
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    # two identical Relus, both graph outputs: each keeps its name and layer
    model = make_model([helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Relu", ["x"], ["y2"])],
                       [X], [y1, y2])
    graph = check_against_onnxruntime(model, FEEDS)
    assert [node.outputs for node in graph.nodes] == [["y1"], ["y2"]]
    # a MaxPool writing Indices after one that does not: kept; the other way round: merged
    for first, second, kept in (([], ["i"], 2), (["i"], [], 1)):
        nodes = [helper.make_node("MaxPool", ["x"], ["p1", *first], **pool),
                 helper.make_node("MaxPool", ["x"], ["p2", *second], **pool),
                 helper.make_node("Add", ["p1", "p2"], ["y1"])]
        outputs = [y1] + ([idx] if first or second else [])
        model = make_model(nodes, [X], outputs)
        graph = check_against_onnxruntime(model, FEEDS)
        assert [node.op for node in graph.nodes].count("MaxPool") == kept


def test_lowering_merges_what_import_left(tmp_path):
    """The exporter's lowering runs the pass too (its float rewrites fold per-channel layers into convolutions,
    which can make two equal): a graph imported unoptimized keeps both branches until then."""
    model = _branches(None)
    graph = import_onnx(model, optimize=False)
    assert [node.op for node in graph.nodes].count("Conv") == 2
    lowered = lower_for_export(graph)
    assert [node.op for node in lowered.nodes].count("Conv") == 1
    assert not eliminate_common_subexpressions(lowered)
    got = run_bundle_host(graph, FEEDS, workdir=tmp_path)["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, FEEDS)[0], rtol=1e-5, atol=1e-5)
