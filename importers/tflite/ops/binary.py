"""TFLite converters for the two-input element-wise ops: ADD, SUB, MUL, DIV (each with its fused
activation), MAXIMUM, MINIMUM and SQUARED_DIFFERENCE. Inputs broadcast as NumPy does, which is TFLite's
rule and the registry's."""

from __future__ import annotations

from pegasus.importers.common.channels_last import emit_activated
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

#: TFLite builtin -> registry op
BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min"}


@converter(*BINARY)
def binary(ctx: TfliteContext, node: SourceNode) -> None:
    emit_activated(ctx, node, BINARY[node.op_type], node.inputs[:2], {}, ctx.activation(node))


@converter("SQUARED_DIFFERENCE")
def squared_difference(ctx: TfliteContext, node: SourceNode) -> None:
    """(x - y)^2 as a Sub and a Mul of the difference with itself."""
    difference = ctx.emit("Sub", node.inputs[:2], node=node, suffix="/difference")[0]
    ctx.emit("Mul", [difference, difference], node=node)
