"""The integer graph of a model + its .quantize file, as ``inference --dtype quantized`` and
``export glow --dtype quantized`` both need it: the table is checked against the model (stale or
foreign tables are refused); the layers that stay float are printed with the reason, and what the lowering
had to adapt (e.g. a bias too large for its weights' grid)."""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.lower import LoweredGraph, lower_to_integer


def lower_model(graph: Graph, quantize_path: str | None, *, show: bool = True) -> LoweredGraph:
    if not quantize_path:
        raise PegasusError("--dtype quantized needs --model-quantize NAME.quantize")
    from pegasus.quantizers.quantize_file import load_table

    table = load_table(quantize_path, graph, serialize.graph_digest(graph))
    if table.customized_layers and not any(node.op == "DtypeConverter" for node in graph.nodes):
        raise PegasusError(f"customizes layers {sorted(table.customized_layers)}: run pegasus quantize --hybrid "
                           "and pass --model NAME.quantize.json", where=quantize_path)
    lowered = lower_to_integer(graph, table)
    if show:
        for layer, op, reason in lowered.float_layers:
            print(f"layer '{layer}' ({op}) runs in float: {reason}")
        for layer, note in lowered.notes:
            print(f"layer '{layer}': {note}")
    return lowered
