"""Runs an exported bundle on the host: export (PIC) → link into a shared library with gcc → call the
entry through ctypes with numpy buffers. The fast path for checking many single-op graphs."""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph


def _aligned(size: int, alignment: int = 64) -> np.ndarray:
    raw = np.zeros(size + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + size]


def run_bundle_host(graph: Graph, feeds: dict[str, np.ndarray], name: str = "net",
                    workdir: Path | None = None) -> dict[str, np.ndarray]:
    """Export ``graph`` for the host, run it once on ``feeds`` and return its outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir or tmp)
        result = export_bundle(graph, folder, name, resolve_target(None, None, None, "pic"))
        library = folder / f"lib{name}.so"
        subprocess.run(["gcc", "-shared", "-o", str(library), str(folder / f"{name}.o")], check=True,
                       capture_output=True)
        plan = result.plan
        constant = _aligned(max(plan.constant_size, 1))
        blob = (folder / f"{name}.weights.bin").read_bytes()
        constant[:len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        mutable = _aligned(max(plan.mutable_size, 1))
        activations = _aligned(max(plan.activations_size, 1))
        for input_name in graph.inputs:
            loc = plan.locations[input_name]
            data = np.ascontiguousarray(feeds[input_name], dtype=graph.type_of(input_name).dtype.numpy)
            mutable[loc.offset:loc.offset + loc.size] = np.frombuffer(data.tobytes(), dtype=np.uint8)
        entry = getattr(ctypes.CDLL(str(library)), name)
        entry.restype = ctypes.c_int
        pointer = ctypes.POINTER(ctypes.c_uint8)
        status = entry(*(buf.ctypes.data_as(pointer) for buf in (constant, mutable, activations)))
        assert status == 0
        outputs = {}
        for output, placeholder in zip(graph.outputs, result.graph.outputs):
            loc = plan.locations[placeholder]
            ttype = graph.type_of(output)
            outputs[output] = np.frombuffer(mutable[loc.offset:loc.offset + loc.size].tobytes(),
                                            dtype=ttype.dtype.numpy).reshape(ttype.shape).copy()
        return outputs
