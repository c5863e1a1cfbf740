"""Optimises the bundle's LLVM module for the target CPU and emits the relocatable object (NAME.o).

The new pass manager at -O3 with the target machine's cost model; shapes are constants, so LLVM can
unroll and vectorise the loop nests. Same module in, same bytes out.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from pegasus.exporters.glow.target import Target


def optimize(module: ir.Module, target: Target) -> llvm.ModuleRef:
    machine = target.machine()
    parsed = llvm.parse_assembly(str(module))
    parsed.triple = target.triple
    parsed.data_layout = str(machine.target_data)
    parsed.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(parsed, builder)
    return parsed


def compile_object(module: ir.Module, target: Target) -> bytes:
    return target.machine().emit_object(optimize(module, target))


def compile_assembly(module: ir.Module, target: Target) -> str:
    return target.machine().emit_assembly(optimize(module, target))
