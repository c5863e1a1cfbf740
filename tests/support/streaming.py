"""Chains of channels-last QConv layers run as host bundles with or without reusing their input's memory, and
whether a plan keeps two tensors apart: shared by the memory-plan and row-chain tests."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ops.registry import get_op, make_attrs
from tests.support.host_runner import aligned
from tests.support.integer_cases import I8, conv


def qconv(graph: Graph, name: str, x: str, w_shape: tuple[int, ...], channels_last: bool = True, **geometry) -> str:
    """Append a QConv reading ``x`` (int8, random weights and requantisation) and return its output's name."""
    x_type = graph.type_of(x)
    first = (x_type.shape[0], x_type.shape[-1], *x_type.shape[1:-1]) if channels_last else x_type.shape
    case = conv(name, first, w_shape, I8, I8, bias=None, **geometry)
    inputs = [x]
    for position, value in enumerate(case.inputs[1:], start=1):
        inputs.append(f"{name}_in{position}")
        graph.tensors[inputs[-1]] = Tensor.constant(inputs[-1], value)
    attrs = make_attrs("QConv", **{**case.attrs, "channels_last": channels_last})
    out_type = get_op("QConv").infer(attrs, [graph.type_of(n) for n in inputs])[0]
    graph.tensors[f"{name}_y"] = Tensor(f"{name}_y", out_type)
    graph.nodes.append(Node(name, "QConv", attrs, inputs, [f"{name}_y"]))
    return f"{name}_y"


def run_on_host(graph: Graph, feeds: dict[str, np.ndarray], folder: Path, reuse: bool = False):
    """Export for the host, call the entry once; (plan, outputs, the mutable buffer, the compiled graph)."""
    result = export_bundle(graph, folder, "net", resolve_target(None, None, None, "pic"), reuse_input_memory=reuse)
    subprocess.run(["gcc", "-shared", "-o", str(folder / "libnet.so"), str(folder / "net.o")], check=True)
    plan = result.plan
    constant, mutable, activations = (aligned(max(size, 1)) for size in
                                      (plan.constant_size, plan.mutable_size, plan.activations_size))
    blob = (folder / "net.weights.bin").read_bytes()
    constant[:len(blob)] = np.frombuffer(blob, np.uint8)
    for name, placeholder in zip(graph.inputs, result.graph.inputs):
        loc = plan.locations[placeholder]
        mutable[loc.offset:loc.offset + loc.size] = np.frombuffer(feeds[name].tobytes(), np.uint8)
    entry = ctypes.CDLL(str(folder / "libnet.so")).net
    pointer = ctypes.POINTER(ctypes.c_uint8)
    assert entry(*(buffer.ctypes.data_as(pointer) for buffer in (constant, mutable, activations))) == 0
    outputs = {}
    for name, placeholder in zip(graph.outputs, result.graph.outputs):
        loc, ttype = plan.locations[placeholder], graph.type_of(name)
        outputs[name] = np.frombuffer(mutable[loc.offset:loc.offset + loc.size].tobytes(),
                                      ttype.dtype.numpy).reshape(ttype.shape)
    return plan, outputs, mutable, result.graph


def kept_apart(plan, a: str, b: str) -> bool:
    x, y = plan.locations[a], plan.locations[b]
    return x.region != y.region or x.offset + x.size <= y.offset or y.offset + y.size <= x.offset
