"""Run an exported bundle where its target runs it — bare metal under qemu-system-arm (Cortex-M), under
qemu-aarch64 (Cortex-A) or on this machine (x86-64) — and say what it cost: the outputs, the instructions
of one inference (Cortex-M: ``-icount`` + SysTick; not cycles) and the stack the bundle call used (painted
and scanned). ``pegasus run`` is its front end; the linking and running live in ``toolchains``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.exporters.glow.run import toolchains
from pegasus.exporters.glow.target import Target, host_arch
from pegasus.ir.graph import Graph


@dataclass
class TargetRun:
    outputs: dict[str, np.ndarray]
    instructions: int | None     # per inference; None where the emulator cannot count them
    stack: int | None            # bytes used by the entry call; None where not measured
    where: str                   # the board or program that ran it
    note: str = ""               # why a figure is missing


def output_spec(graph: Graph) -> dict[str, tuple[tuple[int, ...], object]]:
    """Each output placeholder's (shape, NumPy dtype), as the harness reads the outputs back."""
    return {name: (tuple(graph.type_of(name).shape), graph.type_of(name).dtype.numpy) for name in graph.outputs}


def input_bytes(graph: Graph) -> int:
    """Bytes of one sample of every input placeholder (the harness links them into the board's flash)."""
    return sum(int(np.prod(graph.type_of(name).shape, dtype=np.int64)) * np.dtype(graph.type_of(name).dtype.numpy)
               .itemsize for name in graph.inputs)


def check_runnable(target: Target) -> None:
    """Refuse, before anything is compiled, a target with no emulator here (or a missing tool)."""
    if target.is_cortex_m:
        toolchains.board_for(target.cpu)
        toolchains.require_tool("arm-none-eabi-gcc")
        toolchains.require_tool("qemu-system-arm")
    elif target.arch == "aarch64":
        toolchains.require_tool("aarch64-linux-gnu-gcc")
        toolchains.require_tool("qemu-aarch64")
    elif target.arch == host_arch():
        toolchains.require_tool("gcc")
    else:
        raise toolchains.ToolchainError(f"cannot run --target {target.arch} here: pegasus runs bundles for arm "
                                        f"(Cortex-M under qemu-system-arm), aarch64 (qemu-aarch64) and "
                                        f"{host_arch()} (this machine)")


def run_bundle(bundle_dir: Path, name: str, target: Target, inputs: Mapping[str, np.ndarray],
               outputs: Mapping[str, tuple[tuple[int, ...], object]], keep: Path | None = None) -> TargetRun:
    """Link the bundle in ``bundle_dir`` with the harness for ``target`` and run it once on ``inputs``."""
    check_runnable(target)
    inputs = {key: np.ascontiguousarray(value) for key, value in inputs.items()}
    if target.is_cortex_m:
        board = toolchains.board_for(target.cpu)
        run = toolchains.run_cortex_m_detailed(bundle_dir, name, target.cpu, inputs, outputs, icount=True,
                                               keep=keep)
        return TargetRun(run.outputs, board.instructions(run.ticks), run.stack,
                         f"qemu-system-arm -M {board.machine}",
                         f"to the SysTick resolution of {1e9 / board.clock_hz:g} instructions")
    if target.arch == "aarch64":
        result = toolchains.run_aarch64(bundle_dir, name, inputs, outputs, keep)
        return TargetRun(result, None, None, "qemu-aarch64 (user mode)",
                         "qemu-aarch64 user mode has no instruction counter or stack probe")
    result = toolchains.run_host(bundle_dir, name, inputs, outputs, keep)
    return TargetRun(result, None, None, "this machine (gcc)",
                     "instructions and stack are measured on the emulated Cortex-M boards only")
