"""Float convolutions over the flattened plane (exporters/glow/kernels/reference/conv_plane.py) against a NumPy direct
convolution written here (rtol 1e-4 / atol 1e-5; float16 2e-3), and onnxruntime on a Conv + Relu and on Conv +
Relu + pooling layers (staged): tiles crossing row ends, the plane's first and last tiles (masked loads), tail
tiles, planes smaller than a tile, dilations, 5x5, 1x3 and 3x1 kernels, even kernels with SAME_UPPER padding,
output rows fewer than the input's, groups, batches, channel remainders, float16 and float64; strided
convolutions through the gathered taps (im2col) and pointwise ones over large planes.

The kernel is chosen from the target's vector width, so each case runs for the host and for an AVX2 and an
AVX-512 x86-64 CPU (each skipped when this machine cannot run its code), and the tests check that the
kernel was used for every case.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from pegasus.exporters.glow.codegen import layer_workspaces
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.kernels.reference import conv_plane
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.importers.onnx.loader import import_onnx
from tests.support import host_runner
from tests.support.plane_cases import CPUS, plane_model, reference, use_cpu

RNG = np.random.default_rng(17)


def _case(id_: str, x_shape, w_shape, pads=(1, 1, 1, 1), dilations=(1, 1), group=1, bias=True, dtype=np.float32,
          auto_pad: str | None = None, strides=(1, 1)):
    x = RNG.uniform(-1, 1, x_shape).astype(dtype)
    fan_in = int(np.prod(w_shape[1:]))
    w = (RNG.standard_normal(w_shape) / np.sqrt(fan_in)).astype(dtype)
    b = RNG.uniform(-1, 1, w_shape[0]).astype(dtype) if bias else None
    return pytest.param(x, w, b, list(pads), list(dilations), group, auto_pad, list(strides), id=id_)


CASES = [
    _case("3x3-tiles-cross-rows", (1, 5, 20, 20), (11, 5, 3, 3)),
    _case("dilated", (1, 3, 13, 13), (4, 3, 3, 3), pads=(2, 2, 2, 2), dilations=(2, 2)),
    _case("5x5", (1, 4, 9, 11), (6, 4, 5, 5), pads=(2, 2, 2, 2)),
    _case("1x3", (1, 3, 6, 19), (4, 3, 1, 3), pads=(0, 1, 0, 1)),
    _case("3x1", (1, 3, 9, 6), (5, 3, 3, 1), pads=(1, 0, 1, 0), bias=False),
    _case("2x2-same-upper", (1, 3, 7, 10), (5, 3, 2, 2), pads=(0, 0, 1, 1), auto_pad="SAME_UPPER"),
    _case("fewer-rows", (1, 3, 9, 12), (7, 3, 3, 3), pads=(0, 1, 0, 1)),
    _case("plane-below-tile", (2, 3, 3, 3), (4, 3, 3, 3)),
    _case("group", (1, 6, 10, 10), (8, 3, 3, 3), group=2),
    _case("7x7-plane", (1, 16, 7, 7), (20, 16, 3, 3)),
    _case("f64", (1, 3, 9, 9), (4, 3, 3, 3), dtype=np.float64),
    _case("f16", (1, 3, 9, 11), (5, 3, 3, 3), dtype=np.float16),
    # strided: every tap gathered (im2col), then a 1 x P plane
    _case("3x3-stride2-im2col", (1, 8, 14, 14), (12, 8, 3, 3), strides=(2, 2)),
    _case("5x3-strides-2x3-dilated-im2col", (2, 4, 17, 19), (6, 4, 5, 3), pads=(2, 0, 1, 3), dilations=(1, 2),
          strides=(2, 3)),
    _case("3x3-stride2-even-im2col", (1, 5, 12, 12), (7, 5, 3, 3), pads=(0, 0, 1, 1), strides=(2, 2), bias=False),
    # pointwise over a plane of at least four tiles
    _case("1x1-plane", (1, 24, 17, 17), (40, 24, 1, 1), pads=(0, 0, 0, 0)),
    _case("1x1-stride2-plane", (1, 16, 33, 33), (20, 16, 1, 1), pads=(0, 0, 0, 0), strides=(2, 2)),
]


def _count_planes(monkeypatch, function: str = "emit_plane") -> list[str]:
    """Names of the layers conv_plane's ``function`` emitted, from now on."""
    emitted = []
    original = getattr(conv_plane, function)

    def spy(k, *args):
        emitted.append(k.node.name)
        original(k, *args)

    monkeypatch.setattr(conv_plane, function, spy)
    return emitted


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("x, w, b, pads, dilations, group, auto_pad, strides", CASES)
def test_plane_matches_numpy(cpu, x, w, b, pads, dilations, group, auto_pad, strides, monkeypatch, tmp_path):
    use_cpu(cpu, monkeypatch)
    emitted = _count_planes(monkeypatch)
    model = plane_model(x, w, b, pads, dilations, group, auto_pad, strides=strides)
    got = host_runner.run_bundle_host(import_onnx(model, name="plane"), {"x": x}, workdir=tmp_path)["y"]
    want = reference(x, w, b, pads, dilations, group, strides)
    if llvm.get_host_cpu_features().get("avx") or cpu != "host":
        assert emitted, "the convolution did not run over the flattened plane"
    tolerance = 2e-3 if x.dtype == np.float16 else 1e-4
    assert got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance / 10)


@pytest.mark.parametrize("cpu", list(CPUS))
def test_plane_with_relu_matches_onnxruntime(cpu, monkeypatch, tmp_path):
    """A 3x3 Conv + Relu of ResNet's last stage's shape (7x7 plane, 64 -> 72 channels: a remainder block)."""
    use_cpu(cpu, monkeypatch)
    emitted = _count_planes(monkeypatch)
    x = RNG.uniform(-1, 1, (1, 64, 7, 7)).astype(np.float32)
    w = (RNG.standard_normal((72, 64, 3, 3)) / 24).astype(np.float32)
    b = RNG.uniform(-1, 1, 72).astype(np.float32)
    model = plane_model(x, w, b, [1, 1, 1, 1], [1, 1], 1, None, relu=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = host_runner.run_bundle_host(import_onnx(model, name="plane"), {"x": x}, workdir=tmp_path)["y"]
    if llvm.get_host_cpu_features().get("avx") or cpu != "host":
        assert emitted
    assert (got >= 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


POOLS = {
    "max-2x2": ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "max-3x3-stride2-overlapping": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "average-2x2-ceil": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
}


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("pool", list(POOLS))
def test_conv_relu_pool_staged_from_the_plane(cpu, pool, monkeypatch, tmp_path):
    """A Conv + Relu + pooling layer over the plane (VGG's blocks: 3x3 then a 2x2 max pool; Inception's 3x3
    stride-2 max pool) stages runs of channels in a planned workspace and pools from there: 40 channels
    (runs and a remainder), a 13x13 plane (odd: the 2x2 pool drops the last row, ceil_mode keeps it)."""
    use_cpu(cpu, monkeypatch)
    emitted = _count_planes(monkeypatch, "emit_staged")
    monkeypatch.setattr(conv_plane, "STAGE_BUDGET", 3 * 13 * 13 * 4 * 8)    # runs of 24 channels
    x = RNG.uniform(-1, 1, (1, 12, 13, 13)).astype(np.float32)
    w = (RNG.standard_normal((40, 12, 3, 3)) / 10).astype(np.float32)
    b = RNG.uniform(-1, 1, 40).astype(np.float32)
    model = plane_model(x, w, b, [1, 1, 1, 1], [1, 1], 1, None, relu=True, pool=POOLS[pool])
    graph = import_onnx(model, name="plane")
    lowered = lower_for_export(graph)
    layers = fuse_layers(lowered)
    assert [layer.op for layer in layers] == [f"Conv_Relu_{POOLS[pool][0]}"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = host_runner.run_bundle_host(graph, {"x": x}, workdir=tmp_path)["y"]
    if llvm.get_host_cpu_features().get("avx") or cpu != "host":
        assert emitted
        target = host_runner.resolve_target(None, None, None, "pic")
        assert layer_workspaces(lowered, layers, target) == {0: conv_plane.STAGE_BUDGET}
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------------------
# Stride-1 pooling over the plane (kernels/reference/pool_plane.py)


def pool_reference(x: np.ndarray, op: str, kernel, pads, dilations, include_pads: bool) -> np.ndarray:
    """Stride-1 MaxPool (NaN propagates, the padding never wins) or AveragePool, in float64."""
    (kh, kw), (ph, pw, eh, ew), (dh, dw) = kernel, pads, dilations
    x = x.astype(np.float64)
    fill = -np.inf if op == "MaxPool" else 0.0
    padded = np.pad(x, ((0, 0), (0, 0), (ph, eh), (pw, ew)), constant_values=fill)
    inside = np.pad(np.ones_like(x), ((0, 0), (0, 0), (ph, eh), (pw, ew)))
    out_h, out_w = padded.shape[2] - (kh - 1) * dh, padded.shape[3] - (kw - 1) * dw
    windows = np.stack([padded[:, :, i * dh:i * dh + out_h, j * dw:j * dw + out_w]
                        for i in range(kh) for j in range(kw)])
    if op == "MaxPool":
        return windows.max(axis=0)
    counts = np.stack([inside[:, :, i * dh:i * dh + out_h, j * dw:j * dw + out_w]
                       for i in range(kh) for j in range(kw)]).sum(axis=0)
    return windows.sum(axis=0) / (kh * kw if include_pads else counts)


POOL_CASES = {
    "max-3x3": ("MaxPool", (1, 6, 7, 7), [3, 3], [1, 1, 1, 1], [1, 1], False),
    "max-3x3-nan-inf": ("MaxPool", (1, 3, 14, 14), [3, 3], [1, 1, 1, 1], [1, 1], False),
    "max-2x2-dilated": ("MaxPool", (2, 3, 9, 12), [2, 2], [2, 2, 0, 0], [2, 2], False),
    "average-3x3": ("AveragePool", (1, 5, 14, 14), [3, 3], [1, 1, 1, 1], [1, 1], False),
    "average-3x3-include-pads": ("AveragePool", (1, 5, 13, 10), [3, 3], [1, 1, 1, 1], [1, 1], True),
    "average-5x3-asym": ("AveragePool", (1, 4, 11, 9), [5, 3], [2, 1, 2, 1], [1, 1], False),
}


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("key", list(POOL_CASES))
def test_stride1_pool_over_the_plane_matches_numpy(cpu, key, monkeypatch, tmp_path):
    from pegasus.exporters.glow.kernels.reference import pool_plane

    use_cpu(cpu, monkeypatch)
    emitted = []
    original = pool_plane.emit
    monkeypatch.setattr(pool_plane, "emit", lambda k, *args: emitted.append(original(k, *args)) or emitted[-1])
    op, shape, kernel, pads, dilations, include_pads = POOL_CASES[key]
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    if key.endswith("nan-inf"):
        x[0, 0, 3, 4], x[0, 1, 0, 0], x[0, 2, 13, 13], x[0, 2, 5, 5] = np.nan, -np.inf, np.inf, np.nan
        x[0, 2, 6, 6] = np.inf
    attrs = {"kernel_shape": kernel, "pads": pads, "dilations": dilations}
    if op == "AveragePool":
        attrs = {"kernel_shape": kernel, "pads": pads, "count_include_pad": int(include_pads)}
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    got = host_runner.run_bundle_host(import_onnx(model, name="pool"), {"x": x}, workdir=tmp_path)["y"]
    want = pool_reference(x, op, kernel, pads, dilations if op == "MaxPool" else [1, 1], include_pads)
    if llvm.get_host_cpu_features().get("avx") or cpu != "host":
        assert emitted == [True], "the pooling did not run over the flattened plane"
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-6)
