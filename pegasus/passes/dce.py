"""Dead-code elimination: drop layers whose results reach no graph output, and unused tensors."""

from __future__ import annotations

from pegasus.ir.graph import Graph


def eliminate_dead_code(graph: Graph) -> bool:
    return graph.prune()
