"""Rewrite a float graph + its quantization table into the integer graph that quantized inference and
the exporters run.

Each float tensor gets a *home* representation: integer (its table entry's grid) when its producer
runs in integer, float when its producer runs in float (a float32 layer of a hybrid model, qbfloat16,
or an op without an integer kernel). Consumers ask the context for the representation they need
(``as_int``/``as_float``) and conversions (QuantizeLinear, DequantizeLinear, Requantize) are inserted
once per tensor. Graph inputs and outputs keep the float graph's types, as in Glow's bundles: a float input is
quantized and a float output dequantized by the graph itself (an imported pre-quantized TFLite model's graph
already has integer inputs and outputs, behind its own DequantizeLinear/QuantizeLinear).

This module is the driver: it walks the graph and calls each op's *rule*, registered per op name
(``@integer_rule("Conv")``) in ``pegasus.quantized.rules``; what the rules work with (the ``LoweringContext``,
grid helpers) is ``pegasus.quantized.context``. A rule returns None when it lowered the node, or a reason
string when it cannot (e.g. "int16 input has no lookup table"); the node then runs in float between converters
and the reason is listed in ``LoweredGraph.float_layers`` so that callers can show it.

The table's ``rounding`` (pegasus.ops.fixedpoint.ROUNDINGS) is the arithmetic of every integer op the
rules emit (their ``rounding`` attribute); a rule registered for the table's rounding takes precedence over
the rule for every rounding.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pegasus.quantized.rules  # noqa: F401  (importing the package registers every rule)
from pegasus.errors import PegasusError
from pegasus.ir.graph import Graph, Node
from pegasus.ops.registry import make_attrs
from pegasus.quantized.context import LoweringContext, Rule, registered_rules
from pegasus.quantized.params import QuantTable, TensorQuant


def rule_for(op: str, rounding: str) -> Rule | None:
    """The rule lowering ``op`` under a table of ``rounding``: the one made for that rounding, else the general one."""
    available = registered_rules()
    return available.get((op, rounding)) or available.get((op, None))


@dataclass
class LoweredGraph:
    """The integer graph, the layers that stayed float (layer, op, reason), where each float tensor lives in
    it (name in the lowered graph, and its quantization when integer), and what the rules had to adapt
    (layer, note), e.g. a bias too large for its table grid."""

    graph: Graph
    float_layers: list[tuple[str, str, str]] = field(default_factory=list)
    homes: dict[str, tuple[str, TensorQuant | None]] = field(default_factory=dict)
    notes: list[tuple[str, str]] = field(default_factory=list)


def layer_precision(node: Node, table: QuantTable) -> str | None:
    """'float32' when the user customized the layer to float (or qbfloat16 runs it), else None."""
    custom = table.customized_layers.get(node.name)
    if custom == "float32":
        return "float32"
    outputs = [o for o in node.outputs if o]
    if outputs and all(table.get(o) is not None and not table.get(o).is_integer for o in outputs):
        return "float32"
    return None


def _reads_float(node: Node, table: QuantTable) -> bool:
    """Whether ``node`` reads a tensor whose table entry is float32 (an imported pre-quantized model's tensor
    no file grid holds); the rules take integer operands, and a DtypeConverter is the one that converts."""
    if node.op == "DtypeConverter":
        return False
    return any(name and table.get(name) is not None and not table.get(name).is_integer for name in node.inputs)


def lower_to_integer(graph: Graph, table: QuantTable) -> LoweredGraph:
    """The integer graph of ``graph`` under ``table``: float inputs and outputs, integer inside."""
    ctx = LoweringContext(graph, table)
    ctx.graph.outputs = list(graph.outputs)  # reserved: tensors the lowering invents never take these names
    for name in graph.inputs:
        ctx.builder.add_input(name, graph.type_of(name))
        ctx.set_home(name, name, None)
    bfloat = table.quantizer == "qbfloat16"
    for node in graph.nodes:
        if node.name in ctx.skipped:
            continue
        if layer_precision(node, table) == "float32" or bfloat:
            ctx.run_in_float(node, None)
            if bfloat:
                ctx.round_outputs_to_bfloat16(node)
            continue
        if _on_raw_values(ctx, node):
            ctx.run_in_float(node, None)  # nothing to quantize: the layer runs as it is
            continue
        rule = rule_for(node.op, table.rounding)
        try:
            reason = rule(ctx, node) if rule is not None and not _reads_float(node, table) else \
                f"no integer kernel for {node.op}" if rule is None else "it reads a tensor the table keeps float"
        except ValueError as exc:  # the table's (user-edited) scales ask for a factor no integer multiplier holds
            raise PegasusError(f"layer '{node.name}' ({node.op}): {exc}; check the scales of its tensors",
                               where=table.path or None) from None
        if reason is not None:
            ctx.run_in_float(node, reason)
    ctx.graph.inputs = list(graph.inputs)
    for name in dict.fromkeys(graph.outputs):
        _bind_float_output(ctx, name)
    return LoweredGraph(ctx.graph, ctx.float_layers, dict(ctx.homes), ctx.notes)


def _on_raw_values(ctx: LoweringContext, node: Node) -> bool:
    """Whether every tensor of ``node`` is a non-float tensor of the model itself, which the table does not
    quantize: the uint8 tensors a QOperator ONNX model's MaxPool or Flatten moves between its QLinear ops."""
    tensors = [name for name in list(node.inputs) + list(node.outputs) if name]
    return bool(tensors) and all(not ctx.source.type_of(name).dtype.is_float and ctx.table.get(name) is None
                                 for name in tensors)


def _bind_float_output(ctx: LoweringContext, name: str) -> None:
    """Make the float value of graph output ``name`` carry that name (dequantizing an integer home). The name
    was reserved from the start (``ctx.graph.outputs``), so no other tensor has taken it."""
    if name not in ctx.homes:  # a constant output (e.g. Dropout's all-true mask)
        ctx.builder.set_constant(name, ctx.value(name))
        ctx.set_home(name, name, None)
        return
    home, q = ctx.homes[name]
    if q is None:
        if home != name:
            ctx.graph.rename_tensor(home, name)
            ctx.set_home(name, name, None)
        return
    scale, zero = ctx.param_constants(name, q)
    ctx.builder.emit("DequantizeLinear", [home, scale, zero], make_attrs("DequantizeLinear", axis=q.axis or 0),
                     name=ctx.graph.unique_node_name(f"{name}_dequantize"), outputs=[name])


def expose_integer_io(lowered: LoweredGraph) -> Graph:
    """The lowered graph with its integer tensors as placeholders: the QuantizeLinear after each float input
    and the DequantizeLinear before each float output are dropped (``export glow --quantized-io``).
    Inputs or outputs that are float inside (a float32 layer at the edge) stay float."""
    graph = copy.deepcopy(lowered.graph)
    producers = graph.producers()
    consumers = graph.consumers()
    inputs = []
    for name in graph.inputs:
        readers = consumers.get(name, [])
        if len(readers) == 1 and readers[0].op == "QuantizeLinear" and readers[0].inputs[0] == name:
            quantize = readers[0]
            graph.nodes.remove(quantize)
            inputs.append(quantize.outputs[0])
        else:
            inputs.append(name)
    outputs = []
    for name in graph.outputs:
        node = producers.get(name)
        if node is not None and node.op == "DequantizeLinear":
            graph.nodes.remove(node)
            outputs.append(node.inputs[0])
        else:
            outputs.append(name)
    graph.inputs, graph.outputs = inputs, outputs
    graph.prune()
    return graph
