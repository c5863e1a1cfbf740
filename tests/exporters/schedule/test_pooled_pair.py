"""Pooled pairs (exporters/glow/pooled_pair.py, kernels/cortex_m/integer_pooled_pair.py): two QConv + MaxPool layers in
a row, computed on Cortex-M with the DSP extension as one layer over windows of 16-bit centred rows.

Checked: small float CNNs of varied geometry — one input channel (LDR groups), an even number (LDRD groups),
3 channels, a 5x3 kernel, a strided second convolution, 3x3 poolings (each position max-ed in), runs padded to
whole groups, a conv output wider than its pooling reads, kernel rows of 36 groups (a loop over them) —
quantized by pegasus (per-channel int8, dynamic fixed point int8), with integer I/O, in one graph: on Cortex-M7
and M4 every pair is formed and the outputs are bit for bit the reference interpreter's (qemu), channels first
and channels last; on Cortex-M0, with uint8 (weights with a zero point), with float I/O for LeNet (its quantized
input would live in the activations: more RAM) or with reused inputs no pair is formed; an export without
fusion runs; a kernel row laid in another order fails; the halfword bound is exact at its extremes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pegasus.exporters.glow import pooled_pair
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.pooled_pair import PooledPair
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.quantized.lower import expose_integer_io, lower_to_integer
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.integer_cases import output_spec
from tests.support.quantized_bundles import quantize

RNG = np.random.default_rng(23)

# (name, input (C, H, W), conv A (M, kh, kw, stride), pool A, conv B (M, kh, kw, stride), pool B)
CASES = [
    ("lenet", (1, 28, 28), (20, 5, 5, 1), 2, (50, 5, 5, 1), 2),
    ("rgb-3x3-unread-column", (3, 40, 20), (8, 3, 3, 1), 2, (10, 3, 3, 1), 2),
    ("two-channels-5x3", (2, 40, 18), (4, 3, 3, 1), 2, (6, 5, 3, 1), 2),
    ("strided-second", (1, 48, 24), (4, 3, 3, 1), 2, (8, 3, 3, 2), 2),
    ("pools-3x3", (1, 50, 26), (4, 3, 3, 1), 3, (6, 3, 3, 1), 3),
    ("padded-runs", (1, 40, 20), (6, 5, 5, 1), 2, (4, 5, 5, 1), 2),
    ("long-rows", (1, 40, 16), (48, 3, 3, 1), 2, (4, 3, 3, 1), 2),
]


def _model() -> onnx.ModelProto:
    """The cases as independent branches of one float model: conv, relu, maxpool, conv, relu, maxpool."""
    nodes, inputs, outputs, inits = [], [], [], []
    for index, (_, (c, h, w), conv_a, pool_a, conv_b, pool_b) in enumerate(CASES):
        x = f"x{index}"
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, h, w]))
        previous, channels = x, c
        for stage, ((m, kh, kw, stride), pool) in enumerate(((conv_a, pool_a), (conv_b, pool_b))):
            name = f"b{index}s{stage}"
            weight = RNG.normal(0, 1 / np.sqrt(channels * kh * kw), (m, channels, kh, kw)).astype(np.float32)
            inits += [onnx.numpy_helper.from_array(weight, f"{name}_w"),
                      onnx.numpy_helper.from_array(RNG.normal(0, 0.1, m).astype(np.float32), f"{name}_b")]
            nodes += [helper.make_node("Conv", [previous, f"{name}_w", f"{name}_b"], [f"{name}_conv"],
                                       strides=[stride, stride]),
                      helper.make_node("Relu", [f"{name}_conv"], [f"{name}_relu"]),
                      helper.make_node("MaxPool", [f"{name}_relu"], [f"{name}_pool"], kernel_shape=[pool, pool],
                                       strides=[pool, pool])]
            previous, channels = f"{name}_pool", m
        outputs.append(helper.make_tensor_value_info(previous, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "pairs", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def float_graph() -> Graph:
    return import_onnx(_model(), name="pairs")


def _samples(graph: Graph, count: int) -> list[dict[str, np.ndarray]]:
    return [{name: RNG.uniform(0, 1, graph.type_of(name).shape).astype(np.float32) for name in graph.inputs}
            for _ in range(count)]


def _integer(graph: Graph, scheme: tuple[str, str]):
    """The integer graph with integer I/O, its inputs, the lowered graph (float I/O)."""
    table = quantize(graph, _samples(graph, 8), *scheme)
    lowered = lower_to_integer(graph, table)
    integer = expose_integer_io(lowered)
    sample = _samples(graph, 1)[0]
    every = interpreter.run(lowered.graph, sample, keep_all=True)
    return integer, {name: every[name] for name in integer.inputs}, lowered.graph, sample


@pytest.fixture(scope="module", params=[("perchannel_symmetric_affine", "int8"), ("dynamic_fixed_point", "int8")],
                ids=["pc8", "dfp8"])
def integer(request, float_graph):
    return _integer(float_graph, request.param)


def _pairs(result) -> int:
    return sum(isinstance(layer, PooledPair) for layer in result.plan.layers)


def _check(graph: Graph, feeds: dict, cpu: str, folder, **kwargs) -> int:
    """Export for ``cpu``, run under qemu, assert every output equals the interpreter's; the pairs formed."""
    result = export_bundle(graph, folder, "net", resolve_target("arm", cpu), **kwargs)
    got = toolchains.run_cortex_m(folder, "net", cpu, feeds, output_spec(graph))
    expected = interpreter.run(graph, feeds)
    for name, want in expected.items():
        assert got[name].tobytes() == want.tobytes(), (
            f"{name} on {cpu}: {np.count_nonzero(got[name] != want)} of {want.size} values differ")
    return _pairs(result)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
def test_pairs_match_reference(integer, cpu, tmp_path):
    graph, feeds, _, _ = integer
    assert _check(graph, feeds, cpu, tmp_path) == len(CASES)


def test_no_pair_without_dsp_or_without_fusion(integer, tmp_path):
    """Cortex-M0 has no SMLAD: the layers run apart, bit for bit. An export without fusion (``--no-fuse``) runs
    every layer on its own, its weights laid for its own kernel (before, the packers laid a pooled convolution's
    for the fused kernel, and the unfused one read them wrong: a HardFault on Cortex-M7). Unfused, the branches'
    convolutions of 27 and 25 taps (6 groups of four each) take SMLAD helpers of their own (before, the second read
    its weight rows at the first's stride: 1,235 of 5,472 values wrong)."""
    graph, feeds, _, _ = integer
    assert _check(graph, feeds, "cortex-m0", tmp_path / "m0") == 0
    assert _check(graph, feeds, "cortex-m7", tmp_path / "unfused", fuse=False) == 0


def _channels_last(graph: Graph, feeds: dict) -> tuple[Graph, dict]:
    """The same integer graph with channels-last activations (a TFLite import's layout; weights stay (M, C, k...))."""
    import copy
    from dataclasses import replace

    last = copy.deepcopy(graph)
    for name, tensor in list(last.tensors.items()):
        t = tensor.type
        if not tensor.is_constant and t.rank == 4:
            last.tensors[name] = Tensor(name, TensorType((t.shape[0], *t.shape[2:], t.shape[1]), t.dtype, t.quant))
    for node in last.nodes:
        if hasattr(node.attrs, "channels_last"):
            node.attrs = replace(node.attrs, channels_last=True)
    return last, {name: np.ascontiguousarray(value.transpose(0, 2, 3, 1)) for name, value in feeds.items()}


def test_channels_last_pairs(integer, tmp_path):
    """Channels last: the pairs formed on Cortex-M7, the outputs the channels-first reference's, transposed."""
    graph, feeds, _, _ = integer
    last, last_feeds = _channels_last(graph, feeds)
    assert _check(last, last_feeds, "cortex-m7", tmp_path) == len(CASES)
    first = interpreter.run(graph, feeds)
    for name, value in interpreter.run(last, last_feeds).items():
        np.testing.assert_array_equal(value, first[name].transpose(0, 2, 3, 1))


def test_no_pair_where_it_takes_more_ram(integer, tmp_path):
    """With float I/O LeNet's quantized input lives in the activations beside the rings, which would then take
    more than the layers apart: that pair is not formed."""
    _, _, lowered, _ = integer
    result = export_bundle(lowered, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    paired = {node.name for layer in result.plan.layers if isinstance(layer, PooledPair) for node in layer.nodes}
    lenet = [node.name for node in result.graph.nodes if node.op == "QConv"][:2]
    assert not paired & set(lenet) and _pairs(result) < len(CASES)


def test_no_pair_for_weights_with_a_zero_point(float_graph, tmp_path):
    graph, feeds, _, _ = _integer(float_graph, ("asymmetric_affine", "uint8"))
    assert _check(graph, feeds, "cortex-m7", tmp_path) == 0


def test_kernel_row_order_matters(integer, tmp_path, monkeypatch):
    """Weights laid with each kernel row's taps reversed give other bytes: the checks above can fail."""
    graph, feeds, _, _ = integer
    lay = pooled_pair.StagePlan.lay

    def reversed_rows(self, w):
        laid = lay(self, w)
        return None if laid is None else np.ascontiguousarray(laid[..., ::-1])

    monkeypatch.setattr(pooled_pair.StagePlan, "lay", reversed_rows)
    with pytest.raises(AssertionError, match="values differ"):
        _check(graph, feeds, "cortex-m7", tmp_path)


def test_reused_inputs_count_in_the_ram(integer, tmp_path):
    """With --reuse-input-memory the layers apart may take X's bytes: LeNet's pair would take more and is not
    formed; its convolutions then get their own kernels' layouts (the packers left them for the pair), bit for
    bit."""
    graph, feeds, _, _ = integer
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"), reuse_input_memory=True)
    paired = {node.name for layer in result.plan.layers if isinstance(layer, PooledPair) for node in layer.nodes}
    lenet = [node.name for node in result.graph.nodes if node.op == "QConv"][:2]
    assert not paired & set(lenet)
    got = toolchains.run_cortex_m(tmp_path, "net", "cortex-m7", feeds, output_spec(graph))
    for name, want in interpreter.run(graph, feeds).items():
        assert got[name].tobytes() == want.tobytes(), name


def test_halfword_bound_is_exact_at_the_extremes():
    """integer_halves.halves_within: when it admits weights for inputs in [lo, hi], A1 = (T - A0) >> 8 computed
    in wrapping 32-bit arithmetic equals the exact sum at the inputs that push each odd row to its extremes; a
    row just past the bound is refused."""
    from pegasus.exporters.glow.kernels.cortex_m.integer_halves import halfwords, halves_within

    rng = np.random.default_rng(3)
    for lo, hi in ((0, 255), (-127, 128), (-255, 0)):
        for taps in (100, 500):
            w = rng.integers(-127, 128, (4, taps)).astype(np.int8)
            if not halves_within(w, lo, hi):
                continue
            h = halfwords(w).astype(np.int64)
            for row in range(1, 4, 2):
                for x in (np.where(w[row] > 0, hi, lo), np.where(w[row] > 0, lo, hi)):
                    total = int((h[row // 2] * x).sum())
                    low = int((w[row - 1].astype(np.int64) * x).sum())
                    wrapped = np.int64((total - low + (1 << 31)) % (1 << 32) - (1 << 31))
                    assert wrapped >> 8 == int((w[row].astype(np.int64) * x).sum())
    w = np.zeros((2, 70_000 // 127 + 1), np.int8)
    w[1] = 127
    assert not halves_within(w, 0, 255)          # 255 x 127 x 552 > 2**23
    assert halves_within(w[:, :258], 0, 255)     # 255 x 127 x 258 < 2**23
