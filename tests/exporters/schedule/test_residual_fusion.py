"""Residual sums fused into float convolutions (exporters/glow/fuse.py, conv.py ``Epilogue``): Conv → Add/Sum
(another tensor of the same shape) → Relu as one layer, against onnxruntime (rtol 1e-4 / atol 1e-5; the
reference interpreter for channels-last and float64 graphs): the other operand a graph input, the
convolution's own input, an earlier layer's output read by others too, or a tensor later layers compute (the
group then runs after them: a projection block's shortcut); the operands either way round; Add and Sum;
3x3, pointwise, strided, 1-D, grouped and channels-last convolutions, so that every float kernel path a group
reaches on the host runs it (conv.py's row tiles with edge and tail tiles and its gathered row taps,
conv_plane.py's plane, pointwise and im2col tiles, conv_channels_last.py), and a basic block on Cortex-M7.
Also: what must not fuse (a broadcast operand, a second sum, a pooling after the sum), and that the layer's
output never takes its operand's bytes.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.kernels.reference import conv_plane
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.support import host_runner, toolchains

RNG = np.random.default_rng(23)


def _x(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _w(*shape) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


class Model:
    """An ONNX graph under construction: float32 inputs with their feeds, constant weights, nodes."""

    def __init__(self):
        self.nodes, self.inputs, self.initializers, self.feeds = [], [], [], {}

    def input(self, name: str, value: np.ndarray) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
        self.feeds[name] = value
        return name

    def conv(self, name: str, x: str, channels: tuple[int, int], kernel: tuple[int, ...], **attrs) -> str:
        w, b = _w(channels[1], channels[0], *kernel), _x(channels[1])
        self.initializers += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
        self.nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], **attrs))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], **attrs))
        return name

    def build(self, outputs: list[str]):
        graph = helper.make_graph(self.nodes, "residual", self.inputs,
                                  [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
                                  self.initializers)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _onnxruntime(model, feeds: dict) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [out.name for out in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _layer_ops(graph: Graph) -> list[str]:
    return [layer.op for layer in fuse_layers(lower_for_export(graph))]


def _check(model, feeds: dict, tmp_path, fused: list[str]) -> Graph:
    """The model's graph fuses into layers whose ops include ``fused``, and its host bundle matches onnxruntime."""
    graph = import_onnx(model, name="residual")
    ops = _layer_ops(graph)
    assert all(op in ops for op in fused), ops
    got = host_runner.run_bundle_host(graph, feeds, workdir=tmp_path)
    for name, want in _onnxruntime(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    return graph


# (x shape, conv channels (in, out), kernel, conv attrs): the conv's output is (1, out, ...) of the operand's shape
CONVS = {
    "3x3-plane": ((1, 8, 14, 14), (8, 12), (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3-row-tiles": ((1, 5, 6, 40), (5, 7), (3, 3), {"pads": [1, 1, 1, 1]}),
    "1x1-small-plane": ((1, 16, 7, 7), (16, 24), (1, 1), {}),
    "1x1-large-plane": ((1, 16, 20, 20), (16, 20), (1, 1), {}),
    "1x1-stride2": ((1, 8, 15, 15), (8, 12), (1, 1), {"strides": [2, 2]}),
    "3x3-stride2": ((1, 6, 16, 16), (6, 10), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "5x5-strides-1x3": ((1, 3, 20, 61), (3, 5), (5, 5), {"pads": [2, 2, 2, 2], "strides": [1, 3]}),
    "1d-edges": ((1, 4, 21), (4, 6), (3,), {"pads": [1, 1]}),
    "grouped": ((2, 6, 9, 9), (6, 6), (3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
}


def _out_shape(x_shape, channels, kernel, attrs) -> tuple[int, ...]:
    graph = Model()
    graph.input("x", np.zeros(x_shape, np.float32))
    c, m = channels
    graph.conv("c", "x", (c // attrs.get("group", 1), m), kernel, **attrs)
    return tuple(_onnxruntime(graph.build(["c"]), graph.feeds)["c"].shape)


@pytest.mark.parametrize("op", ["Add", "Sum"])
@pytest.mark.parametrize("key", list(CONVS))
def test_conv_sum_relu_fuses_and_matches_onnxruntime(key, op, tmp_path):
    """relu(conv(x) + r), r a graph input, for every kernel path."""
    x_shape, channels, kernel, attrs = CONVS[key]
    m = Model()
    x = m.input("x", _x(*x_shape))
    r = m.input("r", _x(*_out_shape(x_shape, channels, kernel, attrs)))
    c, out = channels
    conv = m.conv("c", x, (c // attrs.get("group", 1), out), kernel, **attrs)
    m.node("Relu", [m.node(op, [conv, r], "s")], "y")
    _check(m.build(["y"]), m.feeds, tmp_path, [f"Conv_{op}_Relu"])


def test_plane_kernel_runs_the_sum(monkeypatch, tmp_path):
    """A 3x3 Conv over a 14x14 plane (ResNet's shapes, tail tile overlapping) takes the sum in conv_plane.py."""
    if not llvm.get_host_cpu_features().get("avx"):
        pytest.skip("conv_plane.py needs AVX")
    emitted = []
    original = conv_plane.emit_plane
    monkeypatch.setattr(conv_plane, "emit_plane", lambda k, *args: (emitted.append(k.node.name), original(k, *args)))
    m = Model()
    x, r = m.input("x", _x(1, 16, 14, 14)), m.input("r", _x(1, 24, 14, 14))
    m.node("Relu", [m.node("Add", [m.conv("c", x, (16, 24), (3, 3), pads=[1, 1, 1, 1]), r], "s")], "y")
    _check(m.build(["y"]), m.feeds, tmp_path, ["Conv_Add_Relu"])
    assert emitted


def test_operand_order_swapped(tmp_path):
    """r + conv(x) (the convolution as the second operand) then Relu."""
    m = Model()
    x, r = m.input("x", _x(1, 4, 9, 9)), m.input("r", _x(1, 8, 9, 9))
    m.node("Relu", [m.node("Add", [r, m.conv("c", x, (4, 8), (3, 3), pads=[1, 1, 1, 1])], "s")], "y")
    _check(m.build(["y"]), m.feeds, tmp_path, ["Conv_Add_Relu"])


def test_operand_read_by_others_too(tmp_path):
    """A basic residual block: a = relu(conv1(x)) read by conv2 and by the sum, y = relu(conv2(a) + a); a also
    a graph output. conv1 + relu fuse (a read twice stops them), conv2 takes the sum."""
    m = Model()
    x = m.input("x", _x(1, 8, 12, 12))
    a = m.node("Relu", [m.conv("c1", x, (8, 8), (3, 3), pads=[1, 1, 1, 1])], "a")
    m.node("Relu", [m.node("Add", [m.conv("c2", a, (8, 8), (3, 3), pads=[1, 1, 1, 1]), a], "s")], "y")
    graph = _check(m.build(["y", "a"]), m.feeds, tmp_path, ["Conv_Relu", "Conv_Add_Relu"])
    assert len(fuse_layers(lower_for_export(graph))) == 2


def test_projection_block_sums_into_the_first_convolution(tmp_path):
    """relu(conv_a(x) + conv_b(x)) as ResNet's projection blocks: conv_a (the first) takes the sum, its operand
    conv_b's output, and runs after conv_b."""
    m = Model()
    x = m.input("x", _x(1, 6, 10, 10))
    a = m.conv("a", x, (6, 16), (1, 1))
    b = m.conv("b", x, (6, 16), (1, 1))
    m.node("Relu", [m.node("Sum", [a, b], "s")], "y")
    graph = _check(m.build(["y"]), m.feeds, tmp_path, ["Conv", "Conv_Sum_Relu"])
    first, second = fuse_layers(lower_for_export(graph))
    assert (first.outputs, second.nodes[0].outputs, second.residual) == (["b"], ["a"], "b")


def test_row_taps_kernel_takes_the_sum(monkeypatch, tmp_path):
    """A Conv strided along its rows without the gathered plane (conv.py ``row_taps_correlation``)."""
    monkeypatch.setattr(conv_plane, "IM2COL_BUDGET", 0)
    m = Model()
    x, r = m.input("x", _x(1, 3, 11, 40)), m.input("r", _x(1, 5, 11, 14))
    conv = m.conv("c", x, (3, 5), (3, 3), pads=[1, 1, 1, 1], strides=[1, 3])
    m.node("Relu", [m.node("Add", [conv, r], "s")], "y")
    _check(m.build(["y"]), m.feeds, tmp_path, ["Conv_Add_Relu"])


def test_operand_is_the_convolution_input(tmp_path):
    """conv(x) + x, the operand also the convolution's input."""
    m = Model()
    x = m.input("x", _x(1, 8, 11, 11))
    m.node("Add", [m.conv("c", x, (8, 8), (3, 3), pads=[1, 1, 1, 1]), x], "y")
    _check(m.build(["y"]), m.feeds, tmp_path, ["Conv_Add"])


def test_activation_before_the_sum(tmp_path):
    """relu(clip(conv(x)) + r): element-wise layers on either side of the sum, in the graph's order."""
    m = Model()
    x, r = m.input("x", _x(1, 4, 8, 8)), m.input("r", _x(1, 6, 8, 8))
    clipped = m.node("Sigmoid", [m.conv("c", x, (4, 6), (3, 3), pads=[1, 1, 1, 1])], "t")
    m.node("Relu", [m.node("Add", [clipped, r], "s")], "y")
    _check(m.build(["y"]), m.feeds, tmp_path, ["Conv_Sigmoid_Add_Relu"])


def test_what_does_not_fuse(tmp_path):
    """A broadcast operand (1, C, 1, 1), a second sum, and a pooling after the sum stay layers of their own."""
    m = Model()
    x, bias = m.input("x", _x(1, 4, 8, 8)), m.input("bias", _x(1, 6, 1, 1))
    m.node("Relu", [m.node("Add", [m.conv("c", x, (4, 6), (3, 3), pads=[1, 1, 1, 1]), bias], "s")], "y")
    x2, r, q = m.input("x2", _x(1, 4, 8, 8)), m.input("r", _x(1, 6, 8, 8)), m.input("q", _x(1, 6, 8, 8))
    twice = m.node("Add", [m.node("Add", [m.conv("c2", x2, (4, 6), (3, 3), pads=[1, 1, 1, 1]), r], "s2"), q], "s3")
    m.node("MaxPool", [twice], "p", kernel_shape=[2, 2], strides=[2, 2])
    x3, r3 = m.input("x3", _x(1, 4, 8, 8)), m.input("r3", _x(1, 6, 8, 8))
    pooled = m.node("Relu", [m.node("Add", [m.conv("c3", x3, (4, 6), (3, 3), pads=[1, 1, 1, 1]), r3], "s4")], "t")
    m.node("MaxPool", [pooled], "p3", kernel_shape=[2, 2], strides=[2, 2])
    graph = _check(m.build(["y", "p", "p3"]), m.feeds, tmp_path, ["Conv", "Relu", "Conv_Add", "Add", "MaxPool",
                                                                    "Conv_Add_Relu"])
    assert sorted(_layer_ops(graph)) == sorted(["Conv", "Add", "Relu", "Conv_Add", "Add", "MaxPool",
                                                "Conv_Add_Relu", "MaxPool"])


def test_operand_computed_after_the_convolution(tmp_path):
    """A sum whose other operand later nodes compute (a chain of two) runs after them, with its convolution; a
    convolution reading the sum still runs after it."""
    m = Model()
    x, z = m.input("x", _x(1, 4, 6, 6)), m.input("z", _x(1, 6, 6, 6))
    conv = m.conv("c", x, (4, 6), (3, 3), pads=[1, 1, 1, 1])
    later = m.node("Sigmoid", [m.conv("d", z, (6, 6), (1, 1))], "later")
    m.conv("e", m.node("Add", [conv, later], "s"), (6, 5), (1, 1))
    graph = _check(m.build(["e"]), m.feeds, tmp_path, ["Conv_Sigmoid", "Conv_Add", "Conv"])
    assert [layer.op for layer in fuse_layers(lower_for_export(graph))] == ["Conv_Sigmoid", "Conv_Add", "Conv"]


def test_output_does_not_take_the_operand_bytes(tmp_path):
    """The operand dies at the fused layer, but the output is planned beside it (tail tiles read it again)."""
    m = Model()
    x = m.input("x", _x(1, 8, 10, 10))
    a = m.node("Relu", [m.conv("c1", x, (8, 8), (3, 3), pads=[1, 1, 1, 1])], "a")
    b = m.conv("c2", a, (8, 8), (1, 1))
    m.node("Relu", [m.node("Add", [m.conv("c3", b, (8, 8), (3, 3), pads=[1, 1, 1, 1]), a], "s")], "y")
    graph = import_onnx(m.build(["y"]), name="residual")
    result = export_bundle(graph, tmp_path, "net", resolve_target())
    fused = next(layer for layer in result.plan.layers if layer.residual)
    operand, out = (result.plan.locations[name] for name in (fused.residual, fused.outputs[0]))
    assert fused.residual == "a"
    assert operand.offset + operand.size <= out.offset or out.offset + out.size <= operand.offset or \
        operand.region != out.region


# ---- channels last, float64 -----------------------------------------------------------------------------


def _graph(channels_last: bool, dtype=np.float32) -> tuple[Graph, dict[str, np.ndarray]]:
    """relu(conv(x) + r): a 3x3 (row tiles with padding) and a 1x1 with a channel remainder, channels last or
    first, in ``dtype``."""
    graph, feeds = Graph("residual"), {}

    def tensor(name: str, value: np.ndarray | None = None, ttype: TensorType | None = None, feed=False) -> str:
        if feed:
            graph.tensors[name] = Tensor(name, TensorType.of(value))
            graph.inputs.append(name)
            feeds[name] = value
        else:
            graph.tensors[name] = Tensor.constant(name, value) if value is not None else Tensor(name, ttype)
        return name

    def node(name: str, op: str, inputs: list[str], **attrs) -> str:
        made = make_attrs(op, **attrs)
        (ttype,) = get_op(op).infer(made, [graph.type_of(n) for n in inputs])
        graph.nodes.append(Node(name, op, made, inputs, [tensor(f"{name}_y", ttype=ttype)]))
        return f"{name}_y"

    def shape(h: int, w: int, c: int) -> tuple[int, ...]:
        return (1, h, w, c) if channels_last else (1, c, h, w)

    layers = {"k3": (9, 13, 5, 19, 3, [1, 1, 1, 1]), "k1": (6, 7, 16, 20, 1, [0] * 4)}
    for key, (h, w, c, m, kernel, pads) in layers.items():
        x = tensor(f"{key}_x", _x(*shape(h, w, c)).astype(dtype), feed=True)
        r = tensor(f"{key}_r", _x(*shape(h, w, m)).astype(dtype), feed=True)
        weights = tensor(f"{key}_w", _w(m, c, kernel, kernel).astype(dtype))
        conv = node(f"{key}_conv", "Conv", [x, weights, tensor(f"{key}_b", _x(m).astype(dtype))], pads=pads,
                    channels_last=channels_last)
        graph.outputs.append(node(f"{key}_relu", "Relu", [node(f"{key}_add", "Add", [conv, r])]))
    verify(graph)
    return graph, feeds


@pytest.mark.parametrize("channels_last, dtype", [(True, np.float32), (False, np.float64), (True, np.float64)],
                         ids=["last-f32", "first-f64", "last-f64"])
def test_channels_last_and_float64_take_the_sum(channels_last, dtype, tmp_path):
    graph, feeds = _graph(channels_last, dtype)
    assert sorted(_layer_ops(graph)) == ["Conv_Add_Relu"] * 2
    got = host_runner.run_bundle_host(graph, feeds, workdir=tmp_path)
    for name, want in interpreter.run(graph, feeds).items():
        assert got[name].dtype == dtype
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


# ---- Cortex-M --------------------------------------------------------------------------------------------


def test_cortex_m7_residual_block(tmp_path):
    """A basic block with the sum fused, on Cortex-M7 (scalar FPU tiles; channels first and last)."""
    m = Model()
    x = m.input("x", _x(1, 4, 9, 10))
    a = m.node("Relu", [m.conv("c1", x, (4, 4), (3, 3), pads=[1, 1, 1, 1])], "a")
    m.node("Relu", [m.node("Add", [m.conv("c2", a, (4, 4), (3, 3), pads=[1, 1, 1, 1]), a], "s")], "y")
    graph = import_onnx(m.build(["y"]), name="residual")
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    assert [layer.op for layer in result.plan.layers] == ["Conv_Relu", "Conv_Add_Relu"]
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    got = toolchains.run_cortex_m(tmp_path, "net", "cortex-m7", m.feeds, spec)
    want = interpreter.run(graph, m.feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)
