"""Emitter for Identity (pegasus/ops/identity.py), an ``alias`` op: the memory planner usually gives
its output the input's bytes, and then nothing needs doing. They differ when the input is a graph
input or a constant and the output a placeholder; the emitter cannot know which at code-generation
time, so it copies only when the two pointers differ (one compare at run time)."""

from __future__ import annotations

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.loops import for_range


@emitter("Identity")
def identity(k: KernelContext) -> None:
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    with b.if_then(b.icmp_unsigned("!=", x.ptr, y.ptr), likely=True):
        with for_range(b, y.type.size) as i:
            y.store(b, x.load(b, i), i)
