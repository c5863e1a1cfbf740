"""``--dump-memory-plan plan.png``: the activations region drawn as lifetime × address.

Each activation buffer is a rectangle from the layer that writes it to the last layer that reads it
(x, layer index) and over the bytes it occupies (y, offset); tensors sharing a buffer (aliases,
in-place writes) are named together. Buffers that do not overlap in time may share addresses, which
is how the planner keeps ACTIVATIONS_MEM_SIZE small. Drawn with matplotlib's Agg canvas (no display,
no global pyplot state); the same plan gives the same PNG bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

from pegasus.exporters.glow.memory.plan import Buffer, MemoryPlan
from pegasus.fileio import atomic_write
from pegasus.ir.graph import Graph

LABEL_CHARS = 48
#: names are drawn as they are: no mathtext ('$\\frac...$' in a graph name would be parsed, and malformed math
#: raises inside savefig), no TeX
PLAIN = {"parse_math": False, "usetex": False}


def _cut(text: str, limit: int = LABEL_CHARS) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _label(buffer: Buffer) -> str:
    return _cut(", ".join(buffer.tensors))


def activation_buffers(plan: MemoryPlan) -> list[tuple[Buffer, int]]:
    """(buffer, offset) of every buffer in the activations region (with --reuse-input-memory, of every buffer:
    all are in the mutable region), by offset then start."""
    items = [(b, plan.locations[b.tensors[0]].offset) for b in plan.buffers
             if b.placeholder is None or plan.reuses_inputs]
    return sorted(items, key=lambda item: (item[1], item[0].start, item[0].tensors[0]))


def render_memory_plan(graph: Graph, plan: MemoryPlan) -> bytes:
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    buffers = activation_buffers(plan)
    layers = max([len(graph.nodes)] + [b.end + 1 for b, _ in buffers])
    figure = Figure(figsize=(10, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colours = colormaps["tab20"]
    for index, (buffer, offset) in enumerate(buffers):
        axes.add_patch(Rectangle((buffer.start, offset), buffer.end + 1 - buffer.start, buffer.size,
                                 facecolor=colours(index % 20), edgecolor="black", linewidth=0.6, alpha=0.85))
        axes.text(buffer.start + (buffer.end + 1 - buffer.start) / 2, offset + buffer.size / 2, _label(buffer),
                  ha="center", va="center", fontsize=8, clip_on=True, **PLAIN)
    region, size = ("mutable", plan.mutable_size) if plan.reuses_inputs else ("activations", plan.activations_size)
    axes.set_xlim(0, max(layers, 1))
    axes.set_ylim(0, max(size, 1))
    axes.set_xlabel("layer index (a buffer lives from the layer writing it to the last layer reading it)")
    axes.set_ylabel(f"offset in {region} (bytes)")
    axes.set_title(f"{_cut(graph.name)}: {region} {size:,} bytes, {len(buffers)} buffers", **PLAIN)
    axes.grid(True, linewidth=0.3, alpha=0.5)
    if not buffers:
        axes.text(0.5, 0.5, "no activations: every tensor is a weight or a placeholder", ha="center",
                  va="center", transform=axes.transAxes)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


def plot_memory_plan(graph: Graph, plan: MemoryPlan, path: Path) -> None:
    """Write the PNG of ``plan``'s activation buffers to ``path`` (atomically)."""
    atomic_write(path, render_memory_plan(graph, plan))
