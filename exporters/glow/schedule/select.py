"""The select stage: one implementation per layer, chosen once, in one place.

Every kernel module registers its implementations with a predicate and a priority (kernels/strategy.py); this
module imports them all (the only module that sees every family: reference, integer, fused, x86, cortex_m) and
asks each layer's candidates in priority order. The result is one immutable ``Choice`` per layer, which the
pack, plan and emit stages read, and a ``Selection`` recording every candidate's verdict, which
``pegasus export glow --explain`` prints. Grouping asks the same predicates through kernels/strategy.py
(``prefers_pooling_apart``), so no grouping decision imports a kernel module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pegasus.exporters.glow.kernels  # noqa: F401  (importing the families registers every implementation)
from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.strategy import (
    Choice,
    Implementation,
    Query,
    Verdict,
    get_implementation,
    verdicts_of,
)
from pegasus.exporters.glow.schedule import blocks  # noqa: F401  (row chains and pooled pairs)


@dataclass(frozen=True)
class Selection:
    """A layer's choice and why: each candidate of its kind with its family and verdict (True, or why not)."""

    kind: str
    choice: Choice
    verdicts: tuple[tuple[str, str, Verdict], ...]

    @property
    def implementation(self) -> Implementation:
        return get_implementation(self.choice.impl)


def select_layer(graph: Any, layer: Any, target: Any) -> Selection:
    """The implementation of ``layer`` on ``target``: the eligible candidate of highest priority."""
    query = Query(graph, layer, target)
    chosen, verdicts = verdicts_of(query)
    if not verdicts:
        raise PegasusError(f"no code generator for layer '{layer.nodes[0].name}' ({layer.kind})")
    if chosen is None:
        raise PegasusError(f"no implementation of {layer.kind} applies to layer '{layer.nodes[0].name}': "
                           + "; ".join(f"{name}: {why or 'no'}" for name, _, why in verdicts))
    choice = Choice.of(chosen.name, chosen.params(query) if chosen.params else None)
    return Selection(layer.kind, choice, tuple(verdicts))


def select_layers(graph: Any, layers: list[Any], target: Any) -> list[Selection]:
    return [select_layer(graph, layer, target) for layer in layers]
