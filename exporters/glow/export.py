"""``export glow``: plan memory, generate and compile the LLVM module, write the bundle atomically.

Everything is staged in temporary files and renamed at the end, so a failed export leaves the output
folder as it was. A tensor or buffer the code cannot address is refused before anything is compiled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from pegasus.exporters.glow import bundle_files, memory_report
from pegasus.exporters.glow.codegen import build_module, check_emitters, layer_streams, layer_workspaces
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.fuse import Layer, fuse_layers, single_layers
from pegasus.exporters.glow.generated_text import bundle_name
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.memory_plan import MemoryPlan, check_limits, plan_memory
from pegasus.exporters.glow.pooled_pair import pair_layers
from pegasus.exporters.glow.row_chains import chain_rows
from pegasus.exporters.glow.target import Target
from pegasus.fileio import AtomicFileSet, check_folder
from pegasus.ir.graph import Graph


def plan_layers(graph: Graph, target: Target,
                reuse_input_memory: bool = False) -> tuple[Graph, list[Layer], MemoryPlan]:
    """(the graph lowered for ``target``, its layers, their memory plan): what a bundle and the instrumented
    bundle of ``--profile`` (run/profile.py) are both compiled from. Convolutions fused with their consumers,
    blocks chained row by row and pooled pairs formed unless ``target.fused`` is False (one layer per node);
    a graph with an op no emitter computes, or a tensor the code cannot address, is refused here."""
    graph = lower_for_export(graph, target)
    check_emitters(graph)
    grouped = chain_rows(graph, fuse_layers(graph, target)) if target.fused else single_layers(graph)
    layers = pair_layers(graph, grouped, target, reuse_input_memory)
    plan = plan_memory(graph, layers, layer_workspaces(graph, layers, target), layer_streams(graph, layers, target),
                       reuse_input_memory, concat_in_place=not target.is_cortex_m)
    check_limits(graph, plan, target.address_bits)
    return graph, layers, plan


@dataclass
class BundleResult:
    name: str
    graph: Graph        # the graph as compiled (after lowering): its outputs name the placeholders
    files: list[Path]
    plan: MemoryPlan
    report: str


def export_bundle(graph: Graph, out_dir: Path, name: str, target: Target, *, bundle_api: str = "static",
                  fuse: bool = True, board=None, reuse_input_memory: bool = False) -> BundleResult:
    """Export ``graph`` as a bundle in ``out_dir``; ``fuse`` computes each convolution's element-wise and
    pooling consumers inside its loop nest (fuse.py), False generates one layer per node. With ``board``
    (pegasus.boards.Board) a bundle that does not fit it is refused before anything is written, and the
    memory report ends with the fit. ``reuse_input_memory`` plans every tensor in the mutable region, over
    the inputs once they are read: the inference overwrites them (memory_plan.py)."""
    check_folder(out_dir, "--output-path")   # a missing folder is made when the files are written
    bundle_name(name)   # files, entry point, macros and Make variables are named after it: an identifier only
    if not fuse:    # the packers lay every layer's weights for its own kernel
        target = replace(target, fused=False)
    graph, layers, plan = plan_layers(graph, target, reuse_input_memory)
    module = build_module(graph, plan, target, name)
    if bundle_api == "dynamic":
        bundle_files.add_dynamic_config(module, name, graph, plan)
    obj = compile_object(module, target)
    weights = bundle_files.weights_blob(graph, plan)
    report_text, report_json = memory_report.memory_report(name, plan, obj)
    if board is not None:
        report_text += "\n" + memory_report.board_fit(board, json.loads(report_json), None)
    contents = {
        f"{name}.o": obj,
        f"{name}.h": bundle_files.render_header(name, graph, plan, bundle_api),
        f"{name}.weights.bin": weights,
        f"{name}.weights.txt": bundle_files.weights_txt_chunks(weights),
        "main.c": bundle_files.render_main_c(name, graph, plan),
        "Makefile": bundle_files.render_makefile(name),
        f"{name}.memory.txt": report_text,
        f"{name}.memory.json": report_json,
    }
    with AtomicFileSet() as files:
        for file_name, data in contents.items():
            files.stage(out_dir / file_name, data)
    return BundleResult(name, graph, [out_dir / f for f in contents], plan, report_text)
