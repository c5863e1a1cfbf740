"""Seeing what quantization did: every layer's float output next to its quantized output, over the
calibration samples (tflite-micro's layer-by-layer debugger, for ``pegasus compare`` and
``pegasus quantize --report``).

Both the float graph and the lowered integer graph (what inference and the exported code compute)
run on each sample; a layer's integer output is dequantized with its grid and compared with the float
one. Sums are accumulated over all samples, then per layer:

- cosine similarity  ``Σ f·q / sqrt(Σ f² · Σ q²)`` (1 = same direction);
- SNR in dB          ``10 log10(Σ f² / Σ (f - q)²)`` (inf when exact);
- relative error     ``sqrt(Σ (f - q)² / Σ f²)`` (the relative RMS error; what --compute-entropy reports).

A layer the lowering fused into its neighbour (a Conv/Gemm whose only reader is a ReLU writes the
ReLU's output directly) has no output of its own in the integer graph: it is reported on the layer
it was fused with, as e.g. ``Gemm+Relu``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import AtomicFileSet
from pegasus.ir.graph import Graph, Node
from pegasus.ops.fixedpoint import dequantize_values
from pegasus.quantized.context import broadcast_params
from pegasus.quantized.lower import LoweredGraph, lower_to_integer
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.runtime import interpreter

Feeds = Iterable[dict[str, np.ndarray]]


@dataclass
class LayerError:
    """How far one layer's quantized output is from its float output, over ``samples`` samples."""

    layer: str
    op: str  # the layer's op, with the ops fused into it: "Gemm+Relu"
    tensors: list[str]
    precision: str  # of its output: e.g. asymmetric_quantized-u8, qbfloat16-bf16, float32
    cosine: float
    snr_db: float
    relative_error: float
    samples: int
    fused: list[str] = field(default_factory=list)  # layers reported here because they were fused away


@dataclass
class _Sums:
    ff: float = 0.0  # Σ f²
    qq: float = 0.0  # Σ q²
    fq: float = 0.0  # Σ f·q
    ee: float = 0.0  # Σ (f - q)²

    def add(self, f: np.ndarray, q: np.ndarray) -> None:
        f = np.asarray(f, dtype=np.float64).ravel()
        q = np.asarray(q, dtype=np.float64).ravel()
        self.ff += float(f @ f)
        self.qq += float(q @ q)
        self.fq += float(f @ q)
        self.ee += float((f - q) @ (f - q))

    def cosine(self) -> float:
        if self.ff == 0 and self.qq == 0:
            return 1.0
        if self.ff == 0 or self.qq == 0:
            return 0.0
        return max(-1.0, min(1.0, self.fq / math.sqrt(self.ff * self.qq)))

    def snr_db(self) -> float:
        if self.ee == 0:
            return math.inf
        if self.ff == 0:
            return -math.inf
        return 10.0 * math.log10(self.ff / self.ee)

    def relative_error(self) -> float:
        if self.ee == 0:
            return 0.0
        if self.ff == 0:
            return math.inf
        return math.sqrt(self.ee / self.ff)


@dataclass
class _Row:
    """One reported layer: the float tensors it owns in the lowered graph, and the layers fused into it."""

    node: Node
    tensors: list[str]
    fused: list[Node] = field(default_factory=list)


def _rows(graph: Graph, lowered: LoweredGraph) -> list[_Row]:
    """The layers with an output in the lowered graph, in graph order; fused-away layers attached to the
    layer reading their output."""
    rows: list[_Row] = []
    pending: dict[str, list[Node]] = {}  # tensor of a fused-away layer → that layer (and its own fused ones)
    for node in graph.nodes:
        outputs = [o for o in node.outputs if o and graph.type_of(o).dtype.is_float]
        homed = [o for o in outputs if o in lowered.homes]
        inherited = [n for name in node.inputs if name in pending for n in pending.pop(name)]
        if not homed:
            for out in outputs:
                pending[out] = inherited + [node]
            continue
        rows.append(_Row(node, homed, inherited))
    return rows


def _lowered_value(env: dict[str, np.ndarray], graph: Graph, tensor: str, home: str,
                   q: TensorQuant | None) -> np.ndarray:
    if home not in env and tensor in graph.outputs:  # a float output renamed back to its own name
        home = tensor
    value = env[home]
    if q is None or not q.is_integer:
        return np.asarray(value, dtype=np.float64)
    scale, zero = broadcast_params(q, np.ndim(value))
    return dequantize_values(value, scale, zero)


def compare_layers(graph: Graph, table: QuantTable, feeds: Feeds) -> list[LayerError]:
    """Per-layer float-vs-quantized errors of ``graph`` under ``table``, accumulated over ``feeds``."""
    lowered = lower_to_integer(graph, table)
    rows = _rows(graph, lowered)
    sums = {id(row): _Sums() for row in rows}
    samples = 0
    for feed in feeds:
        floats = interpreter.run(graph, feed, keep_all=True)
        ints = interpreter.run(lowered.graph, feed, keep_all=True)
        for row in rows:
            for tensor in row.tensors:
                home, q = lowered.homes[tensor]
                sums[id(row)].add(floats[tensor], _lowered_value(ints, graph, tensor, home, q))
        samples += 1
    if not samples:
        raise PegasusError("no samples to compare (the dataset gave none)")
    errors = []
    for row in rows:
        s = sums[id(row)]
        q = lowered.homes[row.tensors[0]][1] or table.get(row.tensors[0])
        errors.append(LayerError(
            layer=row.node.name, op="+".join([n.op for n in row.fused] + [row.node.op]), tensors=row.tensors,
            precision=q.precision if q is not None else "float32", cosine=s.cosine(), snr_db=s.snr_db(),
            relative_error=s.relative_error(), samples=samples, fused=[n.name for n in row.fused]))
    return errors


# ---- the report -------------------------------------------------------------------------------------------------

HEADER = ("layer", "op", "cosine", "SNR dB", "relative error")


def _cells(error: LayerError) -> tuple[str, ...]:
    return (error.layer, error.op, f"{error.cosine:.6f}", f"{error.snr_db:.2f}", f"{error.relative_error:.4g}")


def format_table(errors: list[LayerError]) -> str:
    """The aligned text table (one line per layer) with a line naming the worst layer."""
    rows = [HEADER] + [_cells(e) for e in errors]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]

    def line(row: tuple[str, ...]) -> str:
        left = [cell.ljust(width) for cell, width in zip(row[:2], widths[:2])]
        right = [cell.rjust(width) for cell, width in zip(row[2:], widths[2:])]
        return "  ".join(left + right).rstrip()

    lines = [line(HEADER), "  ".join("-" * w for w in widths)] + [line(row) for row in rows[1:]]
    if errors:
        worst = lowest_snr(errors)
        lines.append("")
        lines.append(f"float vs quantized over {errors[0].samples} sample(s); lowest SNR: {worst.layer} "
                     f"({worst.snr_db:.2f} dB)")
    return "\n".join(lines) + "\n"


def format_csv(errors: list[LayerError]) -> str:
    import csv

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["layer", "op", "precision", "tensors", "cosine", "snr_db", "relative_error", "samples"])
    for e in errors:
        writer.writerow([e.layer, e.op, e.precision, " ".join(e.tensors), repr(e.cosine), repr(e.snr_db),
                         repr(e.relative_error), e.samples])
    return buffer.getvalue()


def lowest_snr(errors: list[LayerError]) -> LayerError:
    return min(errors, key=lambda e: e.snr_db)


def snr_chart(errors: list[LayerError]) -> bytes:
    """A PNG: horizontal bars of SNR per layer (graph order, top to bottom), the lowest in red; exact
    layers (infinite SNR) are drawn at the right edge and labelled "exact"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    finite = [e.snr_db for e in errors if math.isfinite(e.snr_db)]
    top = max(finite + [0.0]) + 10.0
    bottom = min(finite + [0.0])
    values = [min(max(e.snr_db, bottom), top) for e in errors]
    worst = lowest_snr(errors) if errors else None
    figure = Figure(figsize=(8, 1.2 + 0.32 * max(len(errors), 1)))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = np.arange(len(errors))[::-1]
    colors = ["tab:red" if e is worst else "tab:blue" for e in errors]
    axes.barh(positions, values, color=colors)
    axes.set_yticks(positions, [f"{e.layer} ({e.op})" for e in errors], fontsize=8)
    for y, e, v in zip(positions, errors, values):
        label = "exact" if e.snr_db == math.inf else f"{e.snr_db:.1f}"
        axes.text(v, y, f" {label}", va="center", fontsize=7)
    axes.set_xlim(min(bottom, 0.0), top + 5.0)
    axes.set_xlabel("SNR of the quantized output (dB, higher is better)")
    title = "float vs quantized per layer"
    if worst is not None:
        title += f" — lowest: {worst.layer} ({worst.snr_db:.1f} dB)"
    axes.set_title(title, fontsize=9)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def write_report(graph: Graph, table: QuantTable, feeds: Feeds, out_dir: Path) -> list[LayerError]:
    """Compare, print the table, and write compare.txt, compare.csv and compare.png into ``out_dir``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PegasusError(f"report folder is a file: {out_dir}")
    errors = compare_layers(graph, table, feeds)
    text = format_table(errors)
    chart = snr_chart(errors)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [out_dir / name for name in ("compare.txt", "compare.csv", "compare.png")]
    with AtomicFileSet() as files:
        files.stage(names[0], text)
        files.stage(names[1], format_csv(errors))
        files.stage(names[2], chart)
    print(text, end="")
    print(f"wrote {', '.join(str(n) for n in names)}")
    return errors
