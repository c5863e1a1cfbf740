"""Checks that a graph is well formed; run after every pass so a broken rewrite fails at its source."""

from __future__ import annotations

from pegasus.ir.builder import infer_node
from pegasus.ir.graph import Graph
from pegasus.ops.registry import get_op


class InvalidGraphError(AssertionError):
    """The IR broke an invariant: a bug in a pass or importer, not bad user input."""


def verify(graph: Graph, *, after: str = "") -> None:
    """Raise InvalidGraphError if the graph breaks an invariant.

    Invariants: known ops; every input defined before use (inputs, constants or an earlier
    node's output); one producer per tensor; stored types equal the op's shape rule; outputs exist.
    """
    where = f" (after {after})" if after else ""

    def fail(message: str) -> None:
        raise InvalidGraphError(f"invalid graph{where}: {message}")

    defined = set(graph.inputs) | {t.name for t in graph.tensors.values() if t.is_constant}
    for name in graph.inputs:
        if name not in graph.tensors or graph.tensors[name].is_constant:
            fail(f"graph input '{name}' has no non-constant tensor")
    names = set()
    for node in graph.nodes:
        if node.name in names:
            fail(f"two layers named '{node.name}'")
        names.add(node.name)
        try:
            opdef = get_op(node.op)
        except KeyError:
            fail(f"layer '{node.name}' uses unknown op {node.op}")
        for name in node.present_inputs():
            if name not in defined:
                fail(f"layer '{node.name}' reads '{name}' before it is defined")
        types = [graph.type_of(n) if n else None for n in node.inputs]
        expected = infer_node(opdef, node.attrs, types, node.name)
        for out, ttype in zip(node.outputs, expected):
            if not out:
                continue
            if out in defined:
                fail(f"tensor '{out}' is produced twice (layer '{node.name}')")
            stored = graph.tensors.get(out)
            if stored is None:
                fail(f"output '{out}' of layer '{node.name}' has no tensor entry")
            if (stored.type.shape, stored.type.dtype) != (ttype.shape, ttype.dtype):
                fail(f"tensor '{out}' is typed {stored.type} but {node.op} gives {ttype}")
            defined.add(out)
    for name in graph.outputs:
        if name not in defined:
            fail(f"graph output '{name}' is never produced")
