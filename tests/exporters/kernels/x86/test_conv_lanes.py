"""Float convolutions on small channels-first planes with the output channels in the lanes
(exporters/glow/kernels/x86/conv_lanes.py) against a NumPy convolution in float64 (test_conv_plane.reference) and
onnxruntime: 1x1 on 7x7 and 14x14 planes, planes smaller than a position tile, position and channel remainders
(output channels not a whole number of vectors or blocks), batches, no bias, a fused Relu, a stride-2 projection
(read where they are); larger kernels over the input copied with its padding: 3x3 on 7x7 and 14x14, stride 2
onto 7x7 and 28x28, 5x5 with uneven pads, 2x2 stride 2, a stride that leaves input rows unread, dilated with
uneven strides; residual sums; and the layers the kernel must leave alone (a pooling group, too few output
channels, a large plane, a stride-1 3x3 on 64x64, a 3x3 without kernel_shape). Each case runs for the host and
compiled for an AVX2 and an AVX-512 x86-64 CPU (skipped where this machine cannot run the code), and asserts the
kernel ran (or did not).
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.kernels.x86 import conv_lanes
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.pipeline import schedule
from pegasus.importers.onnx.loader import import_onnx
from tests.support import host_runner
from tests.support.plane_cases import CPUS, plane_model, reference, use_cpu

RNG = np.random.default_rng(23)


def _case(id_: str, x_shape, channels: int, bias=True, strides=(1, 1), kernel=(1, 1), pads=(0, 0, 0, 0),
          dilations=(1, 1)):
    x = RNG.uniform(-1, 1, x_shape).astype(np.float32)
    fan_in = x_shape[1] * kernel[0] * kernel[1]
    w = (RNG.standard_normal((channels, x_shape[1], *kernel)) / np.sqrt(fan_in)).astype(np.float32)
    b = RNG.uniform(-1, 1, channels).astype(np.float32) if bias else None
    return pytest.param(x, w, b, list(strides), list(pads), list(dilations), id=id_)


def _with_kernel_shape(model):
    """The Conv with an explicit kernel_shape (as exporters write it; the kernel needs it for larger kernels)."""
    conv = next(node for node in model.graph.node if node.op_type == "Conv")
    weights = next(init for init in model.graph.initializer if init.name == conv.input[1])
    conv.attribute.append(helper.make_attribute("kernel_shape", list(weights.dims[2:])))
    return model


CASES = [
    _case("7x7-blocks", (1, 40, 7, 7), 96),                      # 49 positions: 7 tiles; two whole blocks
    _case("7x7-channel-remainder", (1, 33, 7, 7), 50),           # 4 vectors: a block of 3 and one of 1, padded
    _case("14x14-position-remainder", (1, 24, 14, 14), 64),      # 196 = 28 tiles of 7
    _case("plane-below-tile", (2, 8, 2, 2), 16, bias=False),      # 4 positions, batch of 2
    _case("5x3-odd", (1, 17, 5, 3), 19),
    _case("stride2-projection", (1, 32, 14, 14), 48, strides=(2, 2)),
    _case("stride2-odd-plane", (1, 12, 13, 13), 20, bias=False, strides=(2, 2)),
    # larger kernels over the input copied with its padding (read as 0), a tile within one output row
    _case("3x3-7x7", (1, 24, 7, 7), 40, kernel=(3, 3), pads=(1, 1, 1, 1)),
    _case("3x3-14x14", (1, 12, 14, 14), 36, kernel=(3, 3), pads=(1, 1, 1, 1)),     # rows of two whole tiles
    _case("3x3-56x56", (1, 4, 56, 56), 20, kernel=(3, 3), pads=(1, 1, 1, 1)),       # MOST_TAP_POSITIONS
    _case("3x3-stride2-to-7x7", (2, 16, 14, 14), 48, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2)),
    _case("3x3-stride2-to-28x28", (1, 5, 56, 56), 20, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2)),
    _case("5x5-uneven-pads", (1, 6, 6, 6), 21, kernel=(5, 5), pads=(2, 1, 2, 3), bias=False),
    _case("2x2-stride2", (1, 10, 8, 8), 16, kernel=(2, 2), strides=(2, 2)),
    _case("2x2-stride3-rows-unread", (1, 5, 10, 11), 16, kernel=(2, 2), strides=(3, 3)),   # inputs 8.. unread
    _case("3x3-dilated-uneven-strides", (1, 7, 13, 12), 17, kernel=(3, 3), pads=(2, 0, 1, 2), strides=(1, 2),
          dilations=(2, 1)),
]


def _spy(monkeypatch) -> list[str]:
    emitted = []
    original = conv_lanes.emit

    def spy(k, *args):
        emitted.append(k.node.name)
        original(k, *args)

    monkeypatch.setattr(conv_lanes, "emit", spy)
    return emitted


def _expect_kernel(cpu: str) -> bool:
    return bool(llvm.get_host_cpu_features().get("avx")) or cpu != "host"


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("x, w, b, strides, pads, dilations", CASES)
def test_matches_numpy(cpu, x, w, b, strides, pads, dilations, monkeypatch, tmp_path):
    use_cpu(cpu, monkeypatch)
    emitted = _spy(monkeypatch)
    model = _with_kernel_shape(plane_model(x, w, b, pads, dilations, 1, None, strides=strides))
    got = host_runner.run_bundle_host(import_onnx(model, name="lanes"), {"x": x}, workdir=tmp_path)["y"]
    want = reference(x, w, b, pads, dilations, 1, strides)
    assert bool(emitted) == _expect_kernel(cpu), "the kernel ran where it should not, or not where it should"
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("case", ["7x7-channel-remainder", "3x3-14x14", "3x3-stride2-to-7x7", "stride2-odd-plane"])
def test_chunked_inputs_match_numpy(cpu, case, monkeypatch, tmp_path):
    """Input channels in chunks (``CHUNK_WEIGHTS`` shrunk to a few channels' weights of a block, the last chunk
    shorter), the tiles' sums kept in the workspace between chunks, which is filled with NaN first."""
    use_cpu(cpu, monkeypatch)
    chunked = []
    original = conv_lanes.emit
    monkeypatch.setattr(conv_lanes, "emit", lambda k, *args: chunked.append(args[-1] is not None) or original(k, *args))
    x, w, b, strides, pads, dilations = next(param.values for param in CASES if param.id == case)
    taps = w.shape[2] * w.shape[3]
    channels = 2 if case.startswith("7x7") else 3
    monkeypatch.setattr(conv_lanes, "CHUNK_WEIGHTS", channels * taps * 3 * 64)
    model = _with_kernel_shape(plane_model(x, w, b, pads, dilations, 1, None, strides=strides))
    bundle = host_runner.load_bundle(import_onnx(model, name="lanes"), {"x": x}, tmp_path)
    assert chunked == ([True] if _expect_kernel(cpu) else []), "the layer did not run here in chunks"
    bundle.buffers[2][:] = 0xFF
    assert bundle() == 0
    want = reference(x, w, b, pads, dilations, 1, strides)
    np.testing.assert_allclose(bundle.outputs()["y"].astype(np.float64), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cpu", ["avx2", "avx512"])
def test_padding_written_over_stale_workspace(cpu, monkeypatch, tmp_path):
    """The padded copy writes its whole border on every call: with the activations (where the workspace lives)
    filled with NaN before the call, a 3x3 with padding on every side still matches (as it must inside a model,
    whose earlier layers leave their values there). Compiled for AVX2 and AVX-512 (the kernel's vector widths),
    whatever this machine's own."""
    use_cpu(cpu, monkeypatch)
    x = RNG.uniform(-1, 1, (1, 6, 9, 9)).astype(np.float32)
    w = (RNG.standard_normal((20, 6, 3, 3)) / 7).astype(np.float32)
    b = RNG.uniform(-1, 1, 20).astype(np.float32)
    model = _with_kernel_shape(plane_model(x, w, b, [1, 2, 2, 1], [1, 1], 1, None))
    bundle = host_runner.load_bundle(import_onnx(model, name="lanes"), {"x": x}, tmp_path)
    assert bundle.result.plan.activations_size, "the padded kernel did not run (no workspace)"
    for _ in range(2):
        bundle.buffers[2][:] = 0xFF
        assert bundle() == 0
        np.testing.assert_allclose(bundle.outputs()["y"].astype(np.float64), reference(x, w, b, [1, 2, 2, 1], [1, 1],
                                                                                      1, [1, 1]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cpu", list(CPUS))
def test_relu_matches_onnxruntime(cpu, monkeypatch, tmp_path):
    """ResNet-50's last stage in small: 1x1 Conv + Relu on a 7x7 plane, 2048 -> 512 as 128 -> 80."""
    use_cpu(cpu, monkeypatch)
    emitted = _spy(monkeypatch)
    x = RNG.uniform(-1, 1, (1, 128, 7, 7)).astype(np.float32)
    w = (RNG.standard_normal((80, 128, 1, 1)) / 11).astype(np.float32)
    b = RNG.uniform(-1, 1, 80).astype(np.float32)
    model = plane_model(x, w, b, [0, 0, 0, 0], [1, 1], 1, None, relu=True)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = host_runner.run_bundle_host(import_onnx(model, name="lanes"), {"x": x}, workdir=tmp_path)["y"]
    assert bool(emitted) == _expect_kernel(cpu)
    assert (got >= 0).all() and (got == 0).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_weights_relaid_in_blocks():
    """The exporter replaces the weights by the kernel's blocks: per block of 16*V channels, (C, 16*V) with
    zero channels past M (an AVX-512 host: V = 3, 16 lanes)."""
    target = host_runner.resolve_target(None, None, None, "pic")
    x = RNG.uniform(-1, 1, (1, 5, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((70, 5, 1, 1)).astype(np.float32)
    model = plane_model(x, w, None, [0, 0, 0, 0], [1, 1], 1, None)
    scheduled = schedule(import_onnx(model, name="lanes"), target)
    lowered = scheduled.graph
    conv = next(node for node in lowered.nodes if node.op == "Conv")
    if not conv_lanes.wanted(conv, x.shape, w.shape, lowered.type_of(conv.inputs[0]).dtype, target):
        pytest.skip("this host has no AVX")
    assert [s.choice.impl for s in scheduled.selections if s.kind == "Conv"] == ["conv.lanes"]
    packed = lowered.value_of(conv.inputs[1])
    lanes = conv_lanes.simd_of(target).width // 4
    flat, start = packed.reshape(-1), 0
    for first, vectors, offset in conv_lanes.packed_layout(70, 5, conv_lanes.simd_of(target)):
        assert offset == start
        block = flat[offset:offset + 5 * vectors * lanes].reshape(5, vectors * lanes)
        width = min(vectors * lanes, 70 - first)
        np.testing.assert_array_equal(block[:, :width], w[first:first + width, :, 0, 0].T)
        assert not block[:, width:].any()
        start += 5 * vectors * lanes
    assert start == flat.size


LEFT_ALONE = {   # input, output channels, kernel, pads, pooling, explicit kernel_shape
    "pooled": ((1, 8, 6, 6), 32, 1, 0, ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}), True),
    "few-channels": ((1, 8, 7, 7), 12, 1, 0, None, True),
    "large-plane": ((1, 8, 17, 17), 32, 1, 0, None, True),
    "3x3-on-64x64": ((1, 8, 64, 64), 32, 3, 1, None, True),
    "3x3-without-kernel-shape": ((1, 8, 7, 7), 32, 3, 1, None, False),
}


@pytest.mark.parametrize("case", list(LEFT_ALONE))
def test_other_layers_keep_their_kernels(case, monkeypatch, tmp_path):
    """A Conv heading a pooling, with fewer output channels than a vector, on more than MOST_POSITIONS
    positions (MOST_TAP_POSITIONS for a larger kernel) or whose larger kernel's size only its weights give keeps
    its weights and kernel (and its outputs)."""
    emitted = _spy(monkeypatch)
    shape, channels, kernel, pad, pool, explicit = LEFT_ALONE[case]
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    w = (RNG.standard_normal((channels, 8, kernel, kernel)) / 3 / kernel).astype(np.float32)
    b = RNG.uniform(-1, 1, channels).astype(np.float32)
    model = plane_model(x, w, b, [pad] * 4, [1, 1], 1, None, relu=pool is not None, pool=pool)
    model = _with_kernel_shape(model) if explicit else model
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = host_runner.run_bundle_host(import_onnx(model, name="lanes"), {"x": x}, workdir=tmp_path)["y"]
    assert not emitted
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel, size", [(1, 7), (3, 7), (1, 14), (1, 13)])
def test_residual_sum_matches_onnxruntime(kernel, size, monkeypatch, tmp_path):
    """relu(conv(x) + r) fused into one layer (fuse.py's residual sums) runs here, the operand read at each
    channel's positions after the tile is turned: a 1x1 and a 3x3 on a 7x7 plane, 40 output channels (a padded
    vector), a 1x1 on 14x14 and on 13x13 (169 positions: a last tile of one)."""
    emitted = _spy(monkeypatch)
    x = RNG.uniform(-1, 1, (1, 24, size, size)).astype(np.float32)
    r = RNG.uniform(-1, 1, (1, 40, size, size)).astype(np.float32)
    w = (RNG.standard_normal((40, 24, kernel, kernel)) / 5 / kernel).astype(np.float32)
    b = RNG.uniform(-1, 1, 40).astype(np.float32)
    model = _with_kernel_shape(plane_model(x, w, b, [kernel // 2] * 4, [1, 1], 1, None))
    conv = model.graph.node[0]
    conv.output[0] = "c"
    model.graph.input.append(helper.make_tensor_value_info("r", 1, [1, 40, size, size]))
    model.graph.node.extend([helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])])
    graph = import_onnx(model, name="lanes")
    assert [layer.op for layer in fuse_layers(lower_for_export(graph))] == ["Conv_Add_Relu"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "r": r})[0]
    got = host_runner.run_bundle_host(graph, {"x": x, "r": r}, workdir=tmp_path)["y"]
    assert bool(emitted) == _expect_kernel("host")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _dense_block(batch: int, inputs: int, growth: int, layers: int):
    """A DenseNet block in small: each layer a 1x1 Conv + Relu over the concatenation of the block's input and
    every earlier layer's output (its input channels grow by ``growth``), its output concatenated in turn."""
    x = RNG.uniform(-1, 1, (batch, inputs, 7, 7)).astype(np.float32)
    nodes, initializers, features = [], [], "x"
    for i in range(layers):
        channels = inputs + i * growth
        w = (RNG.standard_normal((growth, channels, 1, 1)) / np.sqrt(channels)).astype(np.float32)
        initializers += [numpy_helper.from_array(w, f"w{i}"),
                         numpy_helper.from_array(RNG.uniform(-1, 1, growth).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [features, f"w{i}", f"b{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
                  helper.make_node("Concat", [features, f"r{i}"], [f"cat{i}"], axis=1)]
        features = f"cat{i}"
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info(features, TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x, features


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("batch, chunk_last", [(1, False), (2, False), (1, True)])
def test_dense_block_layers_share_one_function(cpu, batch, chunk_last, monkeypatch, tmp_path):
    """1x1 layers that differ only in their input channels (a dense block: 24, 40, 56, 72) are emitted once and
    read those channels at run time (conv_lanes.shared_dims), each with its own weights' stride and, in a batch
    of 2, its own batch stride; with ``CHUNK_WEIGHTS`` shrunk so the last layer goes in chunks, that one keeps a
    function of its own. The block's output (every layer's) against onnxruntime."""
    use_cpu(cpu, monkeypatch)
    emitted = _spy(monkeypatch)
    if chunk_last:
        simd = conv_lanes.simd_of(host_runner.resolve_target(None, None, None, "pic"))
        monkeypatch.setattr(conv_lanes, "CHUNK_WEIGHTS", 60 * conv_lanes.vectors_per_block(simd) * simd.width)
    model, x, output = _dense_block(batch, 24, 16, 4)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = host_runner.run_bundle_host(import_onnx(model, name="block"), {"x": x}, workdir=tmp_path)[output]
    if _expect_kernel(cpu):
        assert len(emitted) == (2 if chunk_last else 1), f"the four 1x1 layers were emitted as {emitted}"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("inputs, pooled_apart", [(64, True), (8, False)])
def test_pooling_apart_from_a_layer_that_runs_here(inputs, pooled_apart, monkeypatch, tmp_path):
    """A 3x3 Conv (64 outputs) + Relu + 2x2 MaxPool on a 28x28 plane: with 64 input channels (29 M multiply-adds,
    at least ``POOL_APART_MACS``) the Conv runs here and the pooling is a layer of its own; with 8 (3.6 M) the
    three stay one group (conv_pool.py), the weights as they are. Both against onnxruntime."""
    emitted = _spy(monkeypatch)
    x = RNG.uniform(-1, 1, (1, inputs, 28, 28)).astype(np.float32)
    w = (RNG.standard_normal((64, inputs, 3, 3)) / np.sqrt(9 * inputs)).astype(np.float32)
    b = RNG.uniform(-1, 1, 64).astype(np.float32)
    model = _with_kernel_shape(plane_model(x, w, b, [1, 1, 1, 1], [1, 1], 1, None, relu=True,
                                      pool=("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]})))
    graph = import_onnx(model, name="lanes")
    target = host_runner.resolve_target(None, None, None, "pic")
    layers = [layer.op for layer in fuse_layers(lower_for_export(graph, target), target)]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = host_runner.run_bundle_host(graph, {"x": x}, workdir=tmp_path)["y"]
    if _expect_kernel("host"):
        assert layers == (["Conv_Relu", "MaxPool"] if pooled_apart else ["Conv_Relu_MaxPool"])
        assert bool(emitted) == pooled_apart
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
