"""Layer fusion (exporters/glow/fuse.py): a Conv computed together with its element-wise consumers and
pooling. The fused bundles must equal the reference interpreter running the unfused graph (rtol 1e-4 /
atol 1e-5): LeNet on the host and bare metal on Cortex-M7, and conv + activation (+ pooling) chains
over strides, padding, dilations, groups, depthwise, MaxPool/AveragePool with pads, ceil_mode,
count_include_pad and overlapping windows, tiled for several register files. Also: the memory plan
(LeNet's activations are the two pooled tensors, 14,720 bytes; 57,600 with ``--no-fuse``), which chains
fuse and which must not (a tensor read twice, or a graph output), and the CLI flag.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.fuse import fuse_layers, single_layers
from pegasus.exporters.glow.memory.plan import plan_memory
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph
from pegasus.ir.verify import verify
from pegasus.runtime import interpreter
from tests.conftest import run_cli
from tests.support import toolchains
from tests.support.conv_tilings import TILINGS, tiling
from tests.support.fusion_cases import CHAINS, FEEDS, GRAPH, RELU, RNG, Builder, act, maxpool, wts
from tests.support.host_runner import run_bundle_host


@pytest.fixture(scope="module")
def lenet(demo_onnx):
    return import_onnx(demo_onnx, name="lenet_mnist")


def _image() -> dict[str, np.ndarray]:
    return {"data": RNG.uniform(0, 1, (1, 1, 28, 28)).astype(np.float32)}


def _close(actual: dict, expected: dict) -> None:
    for name, want in expected.items():
        np.testing.assert_allclose(actual[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def _output_spec(graph: Graph) -> dict:
    return {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}


# ---- LeNet ------------------------------------------------------------------------------------------


def test_lenet_activations_are_the_pooled_tensors(lenet):
    fused = plan_memory(lenet, fuse_layers(lenet))
    unfused = plan_memory(lenet, single_layers(lenet))
    assert [layer.op for layer in fused.layers][:2] == ["Conv_MaxPool", "Conv_MaxPool"]
    assert fused.activations_size <= 14720                   # pool1 11,520 + pool2 3,200
    assert unfused.activations_size == 57600                 # Glow's number: conv1's output and pool1
    conv_outputs = [node.outputs[0] for node in lenet.nodes if node.op == "Conv"]
    assert not any(name in fused.locations for name in conv_outputs)
    assert fused.mutable_size == unfused.mutable_size == 3200


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "no-fuse"])
def test_lenet_header_sizes(lenet, tmp_path, fuse):
    export_bundle(lenet, tmp_path, "lenet_mnist", resolve_target(), fuse=fuse)
    header = (tmp_path / "lenet_mnist.h").read_text()
    size = 14720 if fuse else 57600
    assert f"LENET_MNIST_ACTIVATIONS_MEM_SIZE {size}" in " ".join(header.split()), header


def test_lenet_fused_on_host(lenet, tmp_path):
    export_bundle(lenet, tmp_path, "lenet_mnist", resolve_target())
    feeds = _image()
    _close(toolchains.run_host(tmp_path, "lenet_mnist", feeds, _output_spec(lenet)), interpreter.run(lenet, feeds))


def test_lenet_fused_on_cortex_m7(lenet, tmp_path):
    export_bundle(lenet, tmp_path, "lenet_mnist", resolve_target("arm", "cortex-m7"))
    feeds = _image()
    out = toolchains.run_cortex_m(tmp_path, "lenet_mnist", "cortex-m7", feeds, _output_spec(lenet))
    _close(out, interpreter.run(lenet, feeds))


def test_cli_no_fuse(demo_model, tmp_path):
    model, data = demo_model
    for flag, size in (([], 14720), (["--no-fuse"], 57600)):
        out = tmp_path / ("fused" if not flag else "unfused")
        out.mkdir()
        result = run_cli("export", "glow", "--model", model, "--model-data", data, "--output-path", out,
                         "--network-name", "lenet", *flag)
        assert result.code == 0, result.stderr
        assert f"LENET_ACTIVATIONS_MEM_SIZE {size}" in " ".join((out / "lenet.h").read_text().split())


# ---- conv + activation (+ pooling) chains ------------------------------------------------------------


#: what fusion must make of each chain: the ops of its single layer
EXPECTED = {key: "_".join(["Conv"] + [op for op, _ in layers]) for key, (*_, layers) in CHAINS.items()}


def test_every_chain_fuses_into_one_layer():
    assert sorted(layer.op for layer in fuse_layers(GRAPH)) == sorted(EXPECTED.values())


@pytest.fixture(scope="module", params=list(TILINGS), ids=list(TILINGS))
def chain_results(request, tmp_path_factory):
    with tiling(TILINGS[request.param]):
        actual = run_bundle_host(GRAPH, FEEDS, workdir=tmp_path_factory.mktemp(f"fusion-{request.param}"))
    return actual, interpreter.run(GRAPH, FEEDS)


@pytest.mark.parametrize("key", list(CHAINS))
def test_fused_chain_matches_reference(chain_results, key):
    actual, expected = chain_results
    name = GRAPH.outputs[list(CHAINS).index(key)]
    np.testing.assert_allclose(actual[name], expected[name], rtol=1e-4, atol=1e-5, err_msg=key)


# ---- where fusion must stop ----------------------------------------------------------------------


def _blocked_graph() -> tuple[Graph, dict[str, np.ndarray], dict[str, str]]:
    """Chains whose fusion must stop early; returns the graph, feeds and per chain the first layer's ops."""
    b = Builder()
    # the conv output read twice (by Relu and by Add): nothing fuses into the conv
    x = b.tensor("twice_x", act(1, 2, 8, 8), constant=False)
    (c,) = b.node("twice", "Conv", [x, b.tensor("twice_w", wts(3, 2, 3, 3))])
    (r,) = b.node("twice", "Relu", [c])
    (p,) = b.node("twice", "MaxPool", [r], kernel_shape=[2, 2], strides=[2, 2])
    (s,) = b.node("twice", "Add", [c, c])
    b.graph.outputs += [p, s]
    # the activation is a graph output: conv + relu fuse, the pooling stays apart
    x = b.tensor("out_x", act(1, 2, 9, 9), constant=False)
    (c,) = b.node("out", "Conv", [x, b.tensor("out_w", wts(3, 2, 3, 3)), b.tensor("out_b", act(3))])
    (r,) = b.node("out", "Relu", [c])
    (p,) = b.node("out", "AveragePool", [r], kernel_shape=[2, 2], strides=[2, 2])
    b.graph.outputs += [r, p]
    # MaxPool with Indices: conv + sigmoid fuse, the pooling needs the whole tensor
    x = b.tensor("idx_x", act(1, 2, 8, 8), constant=False)
    (c,) = b.node("idx", "Conv", [x, b.tensor("idx_w", wts(2, 2, 3, 3))])
    (r,) = b.node("idx", "Sigmoid", [c])
    y, i = b.node("idx", "MaxPool", [r], outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    b.graph.outputs += [y, i]
    verify(b.graph)
    return b.graph, b.feeds, {"twice": "Conv", "out": "Conv_Relu", "idx": "Conv_Sigmoid"}


def test_fusion_stops_at_shared_or_visible_tensors(tmp_path):
    graph, feeds, heads = _blocked_graph()
    layers = fuse_layers(graph)
    firsts = {layer.nodes[0].name.split("_")[0]: layer.op for layer in layers if layer.nodes[0].op == "Conv"}
    assert firsts == heads
    assert len(layers) == len(graph.nodes) - 2      # two nodes joined a convolution
    _close(run_bundle_host(graph, feeds, workdir=tmp_path), interpreter.run(graph, feeds))


def test_float16_convolutions_stay_unfused():
    """float16 layers round every tensor they store: fusing would skip the rounding in between."""
    b = Builder()
    b.chain("half", act(1, 2, 6, 6, dtype=np.float16), wts(3, 2, 3, 3, dtype=np.float16), True, {},
            [RELU, maxpool(kernel_shape=[2, 2], strides=[2, 2])])
    assert [layer.op for layer in fuse_layers(b.graph)] == ["Conv", "Relu", "MaxPool"]
