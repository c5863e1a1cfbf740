"""Float MaxPool with a row stride of 2 or more on x86-64 with AVX (kernels/reference/pool_plane.py emit_strided_max):
runs of s*L inputs per window row, max over the rows, taps shuffled out of the runs (windows no wider than two
strides: one run and the columns after it); rows clamped into the input, columns outside masked. Checked
against NumPy for the host, an AVX2 and an AVX-512 CPU (each skipped when this machine cannot run its code),
with the kernel's use checked; dilated pools are left to pool.py."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from onnx import TensorProto, helper

from pegasus.exporters.glow.kernels.reference import pool_plane
from pegasus.importers.onnx.loader import import_onnx
from tests.support import host_runner
from tests.support.plane_cases import CPUS, use_cpu

RNG = np.random.default_rng(17)


def strided_max(x: np.ndarray, kernel, strides, pads, dilations, ceil_mode: bool) -> np.ndarray:
    """MaxPool in float64: NaN propagates, the padding (and a ceil_mode overrun) never wins."""
    (kh, kw), (sh, sw), (ph, pw, eh, ew), (dh, dw) = kernel, strides, pads, dilations
    rounding = np.ceil if ceil_mode else np.floor
    out_h = int(rounding((x.shape[2] + ph + eh - (kh - 1) * dh - 1) / sh)) + 1
    out_w = int(rounding((x.shape[3] + pw + ew - (kw - 1) * dw - 1) / sw)) + 1
    padded = np.full(x.shape[:2] + (out_h * sh + kh * dh + ph, out_w * sw + kw * dw + pw), -np.inf)
    padded[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]] = x
    windows = [padded[:, :, i * dh:i * dh + out_h * sh:sh, j * dw:j * dw + out_w * sw:sw]
               for i in range(kh) for j in range(kw)]
    best = np.max(np.stack(windows), axis=0)
    return np.where(np.any(np.isnan(np.stack(windows)), axis=0), np.nan, best)


# shape, kernel, strides, pads, dilations, ceil_mode, taken by emit_strided_max
CASES = {
    "3x3-s2-end-pads-7wide": ((1, 6, 14, 14), [3, 3], [2, 2], [0, 0, 1, 1], [1, 1], False, True),
    "3x3-s2-14wide-nan-inf": ((1, 3, 28, 28), [3, 3], [2, 2], [0, 0, 1, 1], [1, 1], False, True),
    "3x3-s2-pads-odd": ((1, 4, 15, 15), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False, True),
    "3x3-s2-ceil": ((1, 3, 13, 12), [3, 3], [2, 2], [0, 0, 0, 0], [1, 1], True, True),
    "2x2-s2-batch": ((2, 3, 12, 12), [2, 2], [2, 2], [0, 0, 0, 0], [1, 1], False, True),
    "2x2-s3": ((1, 2, 11, 11), [2, 2], [3, 3], [0, 0, 0, 0], [1, 1], False, True),
    "3x2-rows-s1-cols-s2-40wide": ((1, 2, 9, 40), [3, 2], [1, 2], [1, 0, 1, 0], [1, 1], False, True),
    "5x5-s2-wide-tail": ((1, 2, 10, 70), [5, 5], [2, 2], [2, 2, 2, 2], [1, 1], False, True),
    # windows no wider than two strides: one run and the columns after it (the last tile's past the row)
    "3x3-s2-111wide": ((1, 3, 7, 111), [3, 3], [2, 2], [0, 0, 0, 0], [1, 1], False, True),
    "3x3-s2-pads-112wide": ((1, 2, 6, 112), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False, True),
    "4x4-s2-two-after": ((1, 2, 9, 37), [4, 4], [2, 2], [1, 1, 2, 2], [1, 1], False, True),
    "3x3-s3-none-after": ((1, 2, 9, 50), [3, 3], [3, 3], [0, 0, 0, 0], [1, 1], False, True),
    "3x3-s2-dilated": ((1, 2, 15, 15), [3, 3], [2, 2], [0, 0, 0, 0], [2, 2], False, False),
}


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("key", list(CASES))
def test_strided_max_pool_matches_numpy(cpu, key, monkeypatch, tmp_path):
    use_cpu(cpu, monkeypatch)
    emitted = []
    original = pool_plane.emit_strided_max
    monkeypatch.setattr(pool_plane, "emit_strided_max",
                        lambda k, *args: emitted.append(original(k, *args)) or emitted[-1])
    shape, kernel, strides, pads, dilations, ceil_mode, taken = CASES[key]
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    if key.endswith("nan-inf"):
        x[0, 0, 3, 4], x[0, 1, 0, 0], x[0, 2, 27, 27], x[0, 2, 5, 5] = np.nan, -np.inf, np.inf, np.nan
        x[0, 2, 6, 6] = np.inf
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides, pads=pads,
                            dilations=dilations, ceil_mode=int(ceil_mode))
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    got = host_runner.run_bundle_host(import_onnx(model, name="pool"), {"x": x}, workdir=tmp_path)["y"]
    want = strided_max(x, kernel, strides, pads, dilations, ceil_mode)
    if llvm.get_host_cpu_features().get("avx") or cpu != "host":
        assert emitted == [taken], "the strided kernel's use is not what was expected"
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), want)
