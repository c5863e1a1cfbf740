"""``pegasus quantize --compute-entropy``: one number per layer saying how much quantization hurt it,
written to entropy.txt (Acuity guide §3.5: 0..1, low = precise, high = imprecise), and the layers
worth raising to dynamic_fixed_point-i16 in customized_quantize_layers.

The "entropy" of a layer here is its quantized output's relative RMS error against the float run,
``min(1, ||q - f|| / ||f||)`` over the calibration samples (``compare.compare_layers``). It is
cumulative: a layer inherits the error of the layers before it. A layer the integer graph fused into
its reader (a Gemm whose ReLU is applied in its requantisation) has no output of its own; it shares the
value of the layer it was fused with, so the pair is suggested (and raised) together.
"""

from __future__ import annotations

from pathlib import Path

from pegasus.fileio import atomic_write
from pegasus.ir.graph import Graph
from pegasus.quantized.params import QuantTable
from pegasus.quantizers.compare import Feeds, compare_layers

#: A layer is suggested for dynamic_fixed_point-i16 when its output is off by at least this fraction of
#: its own RMS (10 % ⇔ an SNR of 20 dB or less): a grid clearly too coarse for that signal.
SUGGEST_THRESHOLD = 0.1


def layer_entropies(graph: Graph, table: QuantTable, feeds: Feeds) -> dict[str, float]:
    """Layer name → entropy in 0..1, in graph order (layers with no float output are left out)."""
    values: dict[str, float] = {}
    for error in compare_layers(graph, table, feeds):
        entropy = min(1.0, error.relative_error)
        for layer in error.fused + [error.layer]:
            values[layer] = entropy
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    return dict(sorted(values.items(), key=lambda item: order[item[0]]))


def write_entropy(path: str | Path, entropies: dict[str, float]) -> None:
    """entropy.txt: one ``layer_name entropy`` line per layer, in the given (graph) order."""
    atomic_write(path, "".join(f"{layer} {value:.6f}\n" for layer, value in entropies.items()))


def suggest_layers(entropies: dict[str, float]) -> list[str]:
    """Layers worth raising to dynamic_fixed_point-i16: those whose entropy is at least
    ``SUGGEST_THRESHOLD`` (0.1 — the quantized output's RMS error is 10 % or more of the float output's,
    SNR <= 20 dB), in graph order. A well-quantized model gets no suggestion."""
    return [layer for layer, value in entropies.items() if value >= SUGGEST_THRESHOLD]
