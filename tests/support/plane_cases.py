"""The float convolution tests over flattened planes on x86-64: a direct NumPy convolution in float64 (the
reference), the CPUs (feature sets) they run for, choosing one, and a one-Conv ONNX model."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.target import HOST_TRIPLES, Target, host_arch
from tests.support import host_runner


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: list[int], dilations: list[int],
              group: int, strides: list[int]) -> np.ndarray:
    """Y[n, m, i, j] = b[m] + sum over the group's c and taps (kh, kw) of
    X[n, c, i*sh + kh*dh - ph, j*sw + kw*dw - pw] W[m, c, kh, kw], in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, channels, height, width = x.shape
    m, per_group, kh, kw = w.shape
    (ph, pw, eh, ew), (dh, dw), (sh, sw) = pads, dilations, strides
    padded = np.pad(x, ((0, 0), (0, 0), (ph, eh), (pw, ew)))
    out_h = (height + ph + eh - (kh - 1) * dh - 1) // sh + 1
    out_w = (width + pw + ew - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, m, out_h, out_w))
    outs = m // group
    for g in range(group):
        xs = padded[:, g * per_group:(g + 1) * per_group]
        for i in range(kh):
            for j in range(kw):
                window = xs[:, :, i * dh:i * dh + (out_h - 1) * sh + 1:sh, j * dw:j * dw + (out_w - 1) * sw + 1:sw]
                y[:, g * outs:(g + 1) * outs] += np.einsum("nchw,mc->nmhw", window, w[g * outs:(g + 1) * outs, :, i, j])
    return y + (0 if b is None else b.astype(np.float64)[None, :, None, None])


CPUS = {"host": None, "avx2": ("x86-64-v3", "avx2"), "avx512": ("x86-64-v4", "avx512f")}


def use_cpu(name: str, monkeypatch) -> None:
    """Export for CPU ``name`` (skipped when this machine cannot run its code)."""
    if host_arch() != "x86_64":
        pytest.skip("needs an x86-64 host")
    if CPUS[name] is None:
        return
    cpu, feature = CPUS[name]
    if not llvm.get_host_cpu_features().get(feature):
        pytest.skip(f"this CPU has no {feature}")
    monkeypatch.setattr(host_runner, "resolve_target",
                        lambda *args: Target("x86_64", cpu, HOST_TRIPLES["x86_64"], "hard", "pic"))


def plane_model(x, w, b, pads, dilations, group, auto_pad, relu=False, pool: tuple[str, dict] | None = None,
           strides=(1, 1)):
    dtype = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
             np.float16: TensorProto.FLOAT16}[x.dtype.type]
    initializers = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if b is not None else [])
    attrs = {"auto_pad": auto_pad} if auto_pad else {"pads": pads}
    conv = helper.make_node("Conv", ["x", "w"] + (["b"] if b is not None else []), ["c" if relu else "y"],
                            dilations=dilations, group=group, strides=list(strides), **attrs)
    nodes = [conv] + ([helper.make_node("Relu", ["c"], ["r" if pool else "y"])] if relu else [])
    if pool:
        nodes.append(helper.make_node(pool[0], ["r"], ["y"], **pool[1]))
    graph = helper.make_graph(nodes, "plane", [helper.make_tensor_value_info("x", dtype, list(x.shape))],
                              [helper.make_tensor_value_info("y", dtype, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
