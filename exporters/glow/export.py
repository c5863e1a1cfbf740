"""``export glow``: plan memory, generate and compile the LLVM module, write the bundle atomically.

Everything is staged in temporary files and renamed at the end, so a failed export leaves the output
folder as it was. A tensor or buffer the code cannot address is refused before anything is compiled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from pegasus.exporters.glow import bundle_files
from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.generated_text import bundle_name
from pegasus.exporters.glow.memory import report as memory_report
from pegasus.exporters.glow.memory.plan import MemoryPlan
from pegasus.exporters.glow.pipeline import Schedule, schedule
from pegasus.exporters.glow.target import Target
from pegasus.fileio import AtomicFileSet, check_folder
from pegasus.ir.graph import Graph


@dataclass
class BundleResult:
    name: str
    graph: Graph        # the graph as compiled (after lowering): its outputs name the placeholders
    files: list[Path]
    plan: MemoryPlan
    report: str
    schedule: Schedule | None = None


def export_bundle(graph: Graph, out_dir: Path, name: str, target: Target, *, bundle_api: str = "static",
                  fuse: bool = True, board=None, reuse_input_memory: bool = False) -> BundleResult:
    """Export ``graph`` as a bundle in ``out_dir``; ``fuse`` computes each convolution's element-wise and
    pooling consumers inside its loop nest (fuse.py), False generates one layer per node. With ``board``
    (pegasus.boards.Board) a bundle that does not fit it is refused before anything is written, and the
    memory report ends with the fit. ``reuse_input_memory`` plans every tensor in the mutable region, over
    the inputs once they are read: the inference overwrites them (memory/plan.py)."""
    check_folder(out_dir, "--output-path")   # a missing folder is made when the files are written
    bundle_name(name)   # files, entry point, macros and Make variables are named after it: an identifier only
    if not fuse:    # the packers lay every layer's weights for its own kernel
        target = replace(target, fused=False)
    scheduled = schedule(graph, target, reuse_input_memory)
    graph, plan = scheduled.graph, scheduled.plan
    module = build_module(graph, plan, target, name, scheduled.choices)
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
    return BundleResult(name, graph, [out_dir / f for f in contents], plan, report_text, scheduled)
