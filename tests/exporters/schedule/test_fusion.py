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
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.conftest import run_cli
from tests.exporters.kernels.reference.test_kernels_conv import TILINGS, tiling
from tests.support import toolchains
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(11)


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


def _x(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


def _w(*shape, dtype=np.float32) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(dtype)


class Builder:
    """A graph of independent chains, each from its own input: Conv then the given layers."""

    def __init__(self):
        self.graph = Graph("fusion")
        self.feeds: dict[str, np.ndarray] = {}

    def tensor(self, name: str, value: np.ndarray | None = None, ttype: TensorType | None = None,
               constant: bool = True) -> str:
        if value is not None and constant:
            self.graph.tensors[name] = Tensor.constant(name, value)
        else:
            self.graph.tensors[name] = Tensor(name, ttype or TensorType.of(value))
            if value is not None:
                self.graph.inputs.append(name)
                self.feeds[name] = value
        return name

    def node(self, prefix: str, op: str, inputs: list[str], outputs: int = 1, **attrs) -> list[str]:
        made = make_attrs(op, **attrs)
        types = get_op(op).infer(made, [self.graph.type_of(n) if n else None for n in inputs])
        names = [self.tensor(f"{prefix}_{op}{len(self.graph.nodes)}_{i}", ttype=t) for i, t in enumerate(types)]
        self.graph.nodes.append(Node(f"{prefix}_{op}{len(self.graph.nodes)}", op, made, inputs, names[:outputs]))
        return names[:outputs]

    def chain(self, key: str, x: np.ndarray, w: np.ndarray, bias: bool, conv: dict,
              layers: list[tuple[str, dict]]) -> str:
        inputs = [self.tensor(f"{key}_x", x, constant=False), self.tensor(f"{key}_w", w)]
        if bias:
            inputs.append(self.tensor(f"{key}_b", _x(w.shape[0], dtype=w.dtype)))
        (current,) = self.node(key, "Conv", inputs, **conv)
        for op, attrs in layers:
            (current,) = self.node(key, op, [current], **attrs)
        self.graph.outputs.append(current)
        return current


RELU, SIGMOID, TANH = ("Relu", {}), ("Sigmoid", {}), ("Tanh", {})
CLIP = ("Clip", {"min": -0.2, "max": 0.3})
LEAKY = ("LeakyRelu", {"alpha": 0.1})
HARD_SWISH = ("HardSwish", {})


def _max(**attrs) -> tuple[str, dict]:
    return "MaxPool", attrs


def _avg(**attrs) -> tuple[str, dict]:
    return "AveragePool", attrs


# id: (x, w, bias, conv attrs, layers after the Conv)
CHAINS = {
    "lenet-like": (_x(1, 3, 16, 16), _w(8, 3, 5, 5), True, {}, [RELU, _max(kernel_shape=[2, 2], strides=[2, 2])]),
    "pad-relu-clip-max3x3s2-overlap": (_x(1, 4, 13, 15), _w(6, 4, 3, 3), True, {"pads": [1, 1, 1, 1]},
                                       [RELU, CLIP, _max(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]),
    "stride-asym-pads-max-ceil": (_x(2, 3, 17, 19), _w(5, 3, 3, 3), False, {"strides": [2, 1], "pads": [0, 2, 1, 0]},
                                  [_max(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1)]),
    "dilated-leaky-avg-overlap": (_x(1, 3, 14, 16), _w(4, 3, 3, 3), True, {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
                                  [LEAKY, _avg(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])]),
    "group-avg-ceil-include-pad": (_x(1, 4, 11, 12), _w(6, 2, 3, 3), True, {"group": 2},
                                   [_avg(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1,
                                         count_include_pad=1)]),
    "group-avg-ceil-exclude-pad": (_x(1, 4, 11, 12), _w(6, 2, 3, 3), True, {"group": 2},
                                   [_avg(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)]),
    "depthwise-hardswish-max": (_x(1, 8, 12, 12), _w(8, 1, 3, 3), True, {"group": 8, "pads": [1, 1, 1, 1]},
                                [HARD_SWISH, _max(kernel_shape=[2, 2], strides=[2, 2])]),
    "pool-dilated-strided": (_x(1, 2, 15, 21), _w(3, 2, 3, 3), True, {},
                             [RELU, _max(kernel_shape=[2, 2], strides=[1, 3], dilations=[2, 2])]),
    "max-stride1-overlap": (_x(1, 3, 9, 30), _w(4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]},
                            [SIGMOID, _max(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])]),
    "wide-row-avg": (_x(1, 2, 6, 70), _w(5, 2, 3, 3), True, {"pads": [1, 1, 1, 1]},
                     [RELU, _avg(kernel_shape=[2, 2], strides=[2, 2])]),
    # pooled rows ending in a narrower tile (pool.py _pooled_lanes, conv.py narrow_tail): 24 pooled = 16 + 8 under
    # AVX-512, 10 = 4 + 4 + 2 under 4 lanes; the padded one has more convolution outputs than conv_plane takes
    "narrow-tail-pooled": (_x(1, 3, 6, 50), _w(5, 3, 3, 3), True, {},
                           [RELU, _max(kernel_shape=[2, 2], strides=[2, 2])]),
    "narrow-tail-pooled-short": (_x(1, 2, 6, 22), _w(3, 2, 3, 3), True, {},
                                 [_max(kernel_shape=[2, 2], strides=[2, 2])]),
    "narrow-tail-pooled-padded": (_x(1, 2, 38, 112), _w(4, 2, 3, 3), True, {"pads": [1, 1, 1, 1]},
                                  [RELU, _max(kernel_shape=[2, 2], strides=[2, 2])]),
    "window-in-pool-padding": (_x(1, 2, 4, 4), _w(3, 2, 3, 3), True, {"pads": [1, 1, 1, 1]},
                               [_avg(kernel_shape=[3, 3], strides=[3, 3], pads=[2, 2, 2, 2])]),
    "1d-relu-max": (_x(1, 3, 40), _w(4, 3, 5), True, {"pads": [2, 2]}, [RELU, _max(kernel_shape=[3], strides=[2])]),
    "3d-avg": (_x(1, 2, 6, 7, 8), _w(3, 2, 3, 3, 3), True, {"pads": [1, 1, 1, 1, 1, 1]},
               [TANH, _avg(kernel_shape=[2, 2, 2], strides=[2, 2, 2])]),
    "f64-relu-max": (_x(1, 3, 10, 10, dtype=np.float64), _w(4, 3, 3, 3, dtype=np.float64), True, {},
                     [RELU, _max(kernel_shape=[2, 2], strides=[2, 2])]),
    "act-only-relu-clip": (_x(1, 3, 12, 13), _w(7, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}, [RELU, CLIP]),
    "act-only-sigmoid": (_x(2, 4, 9, 9), _w(6, 2, 3, 3), False, {"group": 2, "strides": [2, 2]}, [SIGMOID]),
    "act-only-depthwise-hardswish": (_x(1, 6, 10, 11), _w(6, 1, 3, 3), True, {"group": 6, "pads": [1, 1, 1, 1]},
                                     [HARD_SWISH]),
    "pool-only": (_x(1, 3, 10, 10), _w(4, 3, 3, 3), True, {}, [_max(kernel_shape=[2, 2], strides=[2, 2])]),
}

#: what fusion must make of each chain: the ops of its single layer
EXPECTED = {key: "_".join(["Conv"] + [op for op, _ in layers]) for key, (*_, layers) in CHAINS.items()}


def _chains_graph() -> tuple[Graph, dict[str, np.ndarray]]:
    builder = Builder()
    for key, (x, w, bias, conv, layers) in CHAINS.items():
        builder.chain(key, x, w, bias, conv, layers)
    verify(builder.graph)
    return builder.graph, builder.feeds


GRAPH, FEEDS = _chains_graph()


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
    x = b.tensor("twice_x", _x(1, 2, 8, 8), constant=False)
    (c,) = b.node("twice", "Conv", [x, b.tensor("twice_w", _w(3, 2, 3, 3))])
    (r,) = b.node("twice", "Relu", [c])
    (p,) = b.node("twice", "MaxPool", [r], kernel_shape=[2, 2], strides=[2, 2])
    (s,) = b.node("twice", "Add", [c, c])
    b.graph.outputs += [p, s]
    # the activation is a graph output: conv + relu fuse, the pooling stays apart
    x = b.tensor("out_x", _x(1, 2, 9, 9), constant=False)
    (c,) = b.node("out", "Conv", [x, b.tensor("out_w", _w(3, 2, 3, 3)), b.tensor("out_b", _x(3))])
    (r,) = b.node("out", "Relu", [c])
    (p,) = b.node("out", "AveragePool", [r], kernel_shape=[2, 2], strides=[2, 2])
    b.graph.outputs += [r, p]
    # MaxPool with Indices: conv + sigmoid fuse, the pooling needs the whole tensor
    x = b.tensor("idx_x", _x(1, 2, 8, 8), constant=False)
    (c,) = b.node("idx", "Conv", [x, b.tensor("idx_w", _w(2, 2, 3, 3))])
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
    b.chain("half", _x(1, 2, 6, 6, dtype=np.float16), _w(3, 2, 3, 3, dtype=np.float16), True, {},
            [RELU, _max(kernel_shape=[2, 2], strides=[2, 2])])
    assert [layer.op for layer in fuse_layers(b.graph)] == ["Conv", "Relu", "MaxPool"]
