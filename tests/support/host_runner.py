"""Runs an exported bundle on the host: export (PIC) → link into a shared library with gcc → call the
entry through ctypes with numpy buffers. The fast path for checking many single-op graphs."""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.exporters.glow.export import BundleResult, export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph


def aligned(size: int, alignment: int = 64) -> np.ndarray:
    raw = np.zeros(size + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + size]


@dataclass
class LoadedBundle:
    """A host bundle linked into a shared library, with its three buffers filled and ready to call."""

    graph: Graph
    result: BundleResult
    entry: ctypes._CFuncPtr
    buffers: tuple[np.ndarray, np.ndarray, np.ndarray]   # constant, mutable, activations

    def __post_init__(self) -> None:
        pointer = ctypes.POINTER(ctypes.c_uint8)
        self._args = [buf.ctypes.data_as(pointer) for buf in self.buffers]  # converted once: calls stay cheap

    def __call__(self) -> int:
        return self.entry(*self._args)

    def outputs(self) -> dict[str, np.ndarray]:
        mutable, plan = self.buffers[1], self.result.plan
        outputs = {}
        for output, placeholder in zip(self.graph.outputs, self.result.graph.outputs):
            loc = plan.locations[placeholder]
            ttype = self.graph.type_of(output)
            outputs[output] = np.frombuffer(mutable[loc.offset:loc.offset + loc.size].tobytes(),
                                            dtype=ttype.dtype.numpy).reshape(ttype.shape).copy()
        return outputs


def load_bundle(graph: Graph, feeds: dict[str, np.ndarray], folder: Path, name: str = "net") -> LoadedBundle:
    """Export ``graph`` for the host into ``folder`` (PIC), link it with gcc -shared, load it with ctypes and
    put the weights and ``feeds`` into freshly allocated, 64-byte aligned buffers."""
    result = export_bundle(graph, folder, name, resolve_target(None, None, None, "pic"))
    library = folder / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-o", str(library), str(folder / f"{name}.o")], check=True,
                   capture_output=True)
    plan = result.plan
    constant = aligned(max(plan.constant_size, 1))
    blob = (folder / f"{name}.weights.bin").read_bytes()
    constant[:len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    mutable = aligned(max(plan.mutable_size, 1))
    activations = aligned(max(plan.activations_size, 1))
    for input_name in graph.inputs:
        loc = plan.locations[input_name]
        data = np.ascontiguousarray(feeds[input_name], dtype=graph.type_of(input_name).dtype.numpy)
        mutable[loc.offset:loc.offset + loc.size] = np.frombuffer(data.tobytes(), dtype=np.uint8)
    entry = getattr(ctypes.CDLL(str(library)), name)
    entry.restype = ctypes.c_int
    return LoadedBundle(graph, result, entry, (constant, mutable, activations))


def run_bundle_host(graph: Graph, feeds: dict[str, np.ndarray], name: str = "net",
                    workdir: Path | None = None) -> dict[str, np.ndarray]:
    """Export ``graph`` for the host, run it once on ``feeds`` and return its outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        bundle = load_bundle(graph, feeds, Path(workdir or tmp), name)
        assert bundle() == 0
        return bundle.outputs()
