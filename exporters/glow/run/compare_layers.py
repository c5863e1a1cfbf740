"""``pegasus run --compare-layers``: every layer's output read back from the board and compared with the
reference interpreter, to find the first layer where the bundle goes wrong.

It uses the probed bundle of ``--profile`` (profile.py): built with HARNESS_DUMPS, the harness's probe
prints, before layer i runs, the bytes of layer i - 1's outputs (read from the mutable or activations
buffer where the plan put them) as hex over semihosting, so they come back exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.exporters.glow.memory.plan import ACTIVATIONS
from pegasus.exporters.glow.run import toolchains
from pegasus.exporters.glow.run.profile import InstrumentedBundle
from pegasus.runtime import interpreter


@dataclass
class LayerDiff:
    tensor: str
    exact: bool
    text: str


def _dump_config(bundle: InstrumentedBundle) -> str:
    entries = " ".join(f"X({probe}, {1 if region == ACTIVATIONS else 0}, {offset}u, {size}u)"
                       for probe, _, region, offset, size in bundle.dumps)
    return f"#define HARNESS_DUMPS(X) {entries}\n"


def _read_dumps(stdout: str, bundle: InstrumentedBundle) -> dict[str, bytes]:
    chunks: dict[int, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("@layer "):
            current = int(line.split()[1], 16)
            chunks[current] = []
        elif line.startswith("@"):
            current = None
        elif current is not None and re.fullmatch(r"[0-9a-f]+", line.strip()):
            chunks[current].append(line.strip())
    return {bundle.dumps[index][1]: bytes.fromhex("".join(hexes)) for index, hexes in chunks.items()}


def _diff(tensor: str, got: np.ndarray, expected: np.ndarray) -> LayerDiff:
    if np.issubdtype(expected.dtype, np.integer):
        delta = np.abs(got.astype(np.int64) - expected.astype(np.int64))
        count = int(np.count_nonzero(delta))
        text = "exact" if count == 0 else f"{count} of {delta.size} elements differ, largest by {delta.max()} LSB"
        return LayerDiff(tensor, count == 0, text)
    reference = expected.astype(np.float64)
    error = got.astype(np.float64) - reference
    worst = float(np.max(np.abs(error), initial=0.0))
    scale = float(np.max(np.abs(reference), initial=0.0))
    signal, noise = float(np.sum(reference ** 2)), float(np.sum(error ** 2))
    snr = "inf" if noise == 0 else f"{10 * np.log10(signal / noise):.1f}" if signal > 0 else "-inf"
    relative = worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))
    return LayerDiff(tensor, relative <= 1e-4, f"max abs {worst:.3g}, max rel {relative:.3g}, SNR {snr} dB")


def compare_layers(bundle: InstrumentedBundle, folder: Path, name: str, cpu: str,
                   feeds: Mapping[str, np.ndarray], spec) -> tuple[str, str | None]:
    """Run the probed bundle with dumps once; (the comparison table, the first layer that differs or None)."""
    run = toolchains.run_cortex_m_detailed(folder, name, cpu, feeds, spec, probes=bundle.probes,
                                           extra=_dump_config(bundle))
    dumped = _read_dumps(run.stdout, bundle)
    expected = interpreter.run(bundle.reference(), feeds, keep_all=True)
    lines, first = ["layer by layer against the reference interpreter (float: within 1e-4 of the tensor's "
                    "largest value; integer: exact):"], None
    tensor_layer = {tensor: bundle.layers[probe - 1] for probe, tensor, *_ in bundle.dumps}
    for _, tensor, *_ in bundle.dumps:
        reference = np.asarray(expected[tensor])
        got = np.frombuffer(dumped[tensor], dtype=reference.dtype).reshape(reference.shape)
        diff = _diff(tensor, got, reference)
        if not diff.exact and first is None:
            first = tensor_layer[tensor]
        lines.append(f"  {'ok  ' if diff.exact else 'DIFF'}  {tensor_layer[tensor]}  ({tensor}): {diff.text}")
    lines.append(f"first layer that differs: {first}" if first else "every layer matches")
    return "\n".join(lines) + "\n", first
