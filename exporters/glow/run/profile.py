"""``pegasus run --profile``: the bundle built with a probe call before each layer and after the last, so
the bare-metal harness records the SysTick count there and each layer's instructions follow; the probe's
own cost (calibrated by the harness: 1000 calls in a row) is subtracted and stated.

The instrumented bundle is the ordinary export pipeline (lower, fuse, plan, generate) with one change to
the generated module: calls to an external ``void pegasus_probe(i32)`` inserted in the entry function
before each call of a layer function and before the return. The layers themselves are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow import bundle_files
from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.memory import report as memory_report
from pegasus.exporters.glow.memory.plan import ACTIVATIONS, MUTABLE
from pegasus.exporters.glow.pipeline import schedule
from pegasus.exporters.glow.target import Target
from pegasus.fileio import AtomicFileSet
from pegasus.ir.graph import Graph

CALIBRATION_CALLS = 1000   # PROBE_CALIBRATION_CALLS in harness.c


def _insert_probes(module: ir.Module, name: str) -> int:
    """Calls to pegasus_probe(i) before each call in the entry and before its return; returns the count."""
    byte_ptr = ir.IntType(8).as_pointer()
    probe = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(32), byte_ptr, byte_ptr]),
                        name="pegasus_probe")
    entry = module.get_global(name)
    builder = ir.IRBuilder(entry.blocks[0])
    sites = [instr for block in entry.blocks for instr in block.instructions
             if isinstance(instr, (ir.CallInstr, ir.Ret))]
    for index, site in enumerate(sites):
        builder.position_before(site)
        builder.call(probe, [ir.Constant(ir.IntType(32), index), entry.args[1], entry.args[2]])
    return len(sites)


@dataclass
class InstrumentedBundle:
    layers: list[str]      # layer names in call order
    macs: list[int]        # multiply-accumulates of each layer (0 for layers without weights)
    probes: int
    graph: Graph           # the graph as compiled (tensor names as in the plan)
    dumps: list[tuple[int, str, str, int, int]]   # (probe, tensor, region, offset, size) of each layer output
    source: Graph          # the graph before lowering, and the target: ``reference`` lowers it again unpacked
    target: Target

    def reference(self) -> Graph:
        """The compiled graph with the registry's weight layouts (same tensor names), which the reference
        interpreter runs: ``graph``'s weights are re-laid for the kernels. Lowered on demand (--compare-layers)."""
        return lower_for_export(self.source, self.target)


def export_instrumented(graph: Graph, out_dir: Path, name: str, target: Target,
                        reuse_input_memory: bool = False) -> InstrumentedBundle:
    """Write NAME.o/.h/.weights.bin/.memory.json with probes between layers into ``out_dir``, its memory
    planned as export_bundle plans it (Concat built in place on hosted targets too)."""
    macs_of = {node.name: node_macs(graph, node) for node in graph.nodes}
    source, scheduled = graph, schedule(graph, target, reuse_input_memory)
    graph, layers, plan = scheduled.graph, scheduled.layers, scheduled.plan
    module = build_module(graph, plan, target, name, scheduled.choices)
    probes = _insert_probes(module, name)
    obj = compile_object(module, target)
    _, report_json = memory_report.memory_report(name, plan, obj)
    with AtomicFileSet() as files:
        for file_name, data in {f"{name}.o": obj, f"{name}.h": bundle_files.render_header(name, graph, plan, "static"),
                                f"{name}.weights.bin": bundle_files.weights_blob(graph, plan),
                                f"{name}.memory.json": report_json}.items():
            files.stage(out_dir / file_name, data)
    units = plan.layers or layers
    names = [" + ".join(node.name for node in layer.nodes) for layer in units]
    dumps = [(index + 1, tensor, plan.locations[tensor].region, plan.locations[tensor].offset,
              graph.type_of(tensor).nbytes)
             for index, layer in enumerate(units) for tensor in layer.outputs
             if tensor and plan.locations[tensor].region in (MUTABLE, ACTIVATIONS)]
    macs = [sum(macs_of.get(node.name, 0) for node in layer.nodes) for layer in units]
    return InstrumentedBundle(names, macs, probes, graph, dumps, source, target)


def node_macs(graph: Graph, node) -> int:
    """Multiply-accumulates of a node with a weight (its first constant input of rank 2 or more), on the
    graph as imported or quantized (not the export's re-laid weights): output elements x weights per output
    channel — a convolution's channel axis 1, or the last when channels last; a matrix product's last axis.
    0 for a node without weights."""
    weight = next((graph.value_of(name) for name in node.inputs
                   if name and graph.tensors[name].is_constant and np.ndim(graph.value_of(name)) >= 2), None)
    if weight is None or not node.outputs or not node.outputs[0]:
        return 0
    shape = graph.type_of(node.outputs[0]).shape
    spatial = hasattr(node.attrs, "group") and not getattr(node.attrs, "channels_last", False)
    channels = shape[1] if spatial and len(shape) > 1 else shape[-1]
    return int(np.prod(shape, dtype=np.int64)) * weight.size // channels if channels else 0


def profile_table(bundle: InstrumentedBundle, probe_ticks: tuple[int, ...], calibration_ticks: int,
                  instructions_per_tick: float) -> tuple[str, list[tuple[str, float, int]]]:
    """Per-layer instructions (probe cost subtracted) and MACs as a text table sorted by cost, and the rows."""
    probe_cost = calibration_ticks * instructions_per_tick / CALIBRATION_CALLS
    rows = []
    for index, layer in enumerate(bundle.layers):
        raw = (probe_ticks[index + 1] - probe_ticks[index]) * instructions_per_tick
        rows.append((layer, max(raw - probe_cost, 0.0), bundle.macs[index]))
    total = sum(cost for _, cost, _ in rows)
    lines = [f"per-layer instructions (probe cost {probe_cost:.1f} instructions per probe, subtracted; "
             f"resolution {instructions_per_tick:g} per layer):",
             f"  {'instructions':>12}  {'share':>6}  {'MACs':>10}  {'MACs/instr':>10}  layer"]
    for layer, cost, macs in sorted(rows, key=lambda row: -row[1]):
        ratio = f"{macs / cost:.3f}" if macs and cost else "-"
        lines.append(f"  {cost:>12,.0f}  {100 * cost / total if total else 0:>5.1f}%  {macs:>10,}  {ratio:>10}  "
                     f"{layer}")
    lines.append(f"  {total:>12,.0f}  total of the layers")
    return "\n".join(lines) + "\n", rows


def render_profile(title: str, rows: list[tuple[str, float, int]]) -> bytes:
    """A horizontal bar chart of instructions per layer, the costliest on top, as PNG bytes."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ordered = sorted(rows, key=lambda row: row[1])
    figure = Figure(figsize=(10, 1.5 + 0.35 * len(ordered)), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.barh([row[0] for row in ordered], [row[1] for row in ordered], color="tab:blue")
    axes.set_xlabel("instructions (qemu -icount; not cycles)")
    axes.set_title(title)
    axes.tick_params(axis="y", labelsize=8)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()
