"""Float 1x1 convolutions on small planes as dot products over the input channels
(exporters/glow/kernels/conv_dot.py) against the NumPy convolution of test_conv_plane.py (rtol 1e-4 / atol
1e-5) and onnxruntime on a Conv + Relu: output channels in blocks of 4, 3, 2 and 1 (whatever divides them),
planes of 49, 20 and 16 positions (position tiles of two sizes), batches, no bias, and input channels summed in
several passes (``CHUNK`` made small: the first pass adds the bias, the last applies the Relu).

Each case runs for the host and for an AVX2 and an AVX-512 x86-64 CPU (each skipped when this machine cannot
run its code), and checks that the kernel was used.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import onnxruntime as ort
import pytest

from pegasus.exporters.glow.kernels import conv_dot
from pegasus.importers.onnx.loader import import_onnx
from tests.exporters import host_runner
from tests.exporters.test_conv_plane import CPUS, _model, _use_cpu, reference

RNG = np.random.default_rng(23)

# (x shape, output channels, bias, CHUNK or None)
CASES = {
    "7x7-blocks-of-4": ((1, 64, 7, 7), 72, True, None),
    "7x7-blocks-of-3": ((1, 32, 7, 7), 45, True, None),
    "7x7-blocks-of-2-batch": ((2, 48, 7, 7), 38, True, None),
    "4x5-blocks-of-1": ((1, 16, 4, 5), 13, True, None),
    "4x4-no-bias": ((1, 32, 4, 4), 20, False, None),
    "7x7-passes": ((1, 160, 7, 7), 24, True, 64),
    "7x7-passes-no-bias-batch": ((2, 96, 7, 7), 12, False, 32),
}


def _spy(monkeypatch) -> list[str]:
    emitted = []
    original = conv_dot.emit

    def spy(k, *args):
        emitted.append(k.node.name)
        original(k, *args)

    monkeypatch.setattr(conv_dot, "emit", spy)
    return emitted


def _ran_here(cpu: str) -> bool:
    return bool(llvm.get_host_cpu_features().get("avx")) or cpu != "host"


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("key", list(CASES))
def test_pointwise_dots_match_numpy(cpu, key, monkeypatch, tmp_path):
    _use_cpu(cpu, monkeypatch)
    emitted = _spy(monkeypatch)
    shape, outputs, bias, chunk = CASES[key]
    if chunk:
        monkeypatch.setattr(conv_dot, "CHUNK", chunk)
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    w = (RNG.standard_normal((outputs, shape[1], 1, 1)) / np.sqrt(shape[1])).astype(np.float32)
    b = RNG.uniform(-1, 1, outputs).astype(np.float32) if bias else None
    model = _model(x, w, b, [0, 0, 0, 0], [1, 1], 1, None)
    got = host_runner.run_bundle_host(import_onnx(model, name="dots"), {"x": x}, workdir=tmp_path)["y"]
    want = reference(x, w, b, [0, 0, 0, 0], [1, 1], 1, [1, 1])
    if _ran_here(cpu):
        assert emitted, "the pointwise convolution did not run as dot products"
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("chunk", [None, 128])
def test_pointwise_dots_with_relu_match_onnxruntime(cpu, chunk, monkeypatch, tmp_path):
    """ResNet-50's last stage's shape scaled down: 512 -> 128 channels on 7x7, + Relu (in passes or not)."""
    _use_cpu(cpu, monkeypatch)
    emitted = _spy(monkeypatch)
    if chunk:
        monkeypatch.setattr(conv_dot, "CHUNK", chunk)
    x = RNG.uniform(-1, 1, (1, 512, 7, 7)).astype(np.float32)
    w = (RNG.standard_normal((128, 512, 1, 1)) / 22).astype(np.float32)
    b = RNG.uniform(-1, 1, 128).astype(np.float32)
    model = _model(x, w, b, [0, 0, 0, 0], [1, 1], 1, None, relu=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = host_runner.run_bundle_host(import_onnx(model, name="dots"), {"x": x}, workdir=tmp_path)["y"]
    if _ran_here(cpu):
        assert emitted
    assert (got >= 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
