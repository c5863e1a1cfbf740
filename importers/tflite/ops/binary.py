"""TFLite converters for the element-wise ops of several inputs: ADD, SUB, MUL, DIV (each with its fused
activation), MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, POW, FLOOR_DIV, FLOOR_MOD, ADD_N, the comparisons (EQUAL,
NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL), LOGICAL_AND/OR, SELECT and SELECT_V2. Inputs broadcast as NumPy
does, which is TFLite's rule and the registry's."""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import emit_activated
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

#: TFLite builtin -> registry op
BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min"}
#: TFLite builtin -> registry op, for the ops without options that map one to one
DIRECT = {"POW": "Pow", "EQUAL": "Equal", "LESS": "Less", "LESS_EQUAL": "LessOrEqual", "GREATER": "Greater",
          "GREATER_EQUAL": "GreaterOrEqual", "LOGICAL_AND": "And", "LOGICAL_OR": "Or", "SELECT_V2": "Where",
          "ADD_N": "Sum"}


@converter(*BINARY)
def binary(ctx: TfliteContext, node: SourceNode) -> None:
    emit_activated(ctx, node, BINARY[node.op_type], node.inputs[:2], {}, ctx.activation(node))


@converter("SQUARED_DIFFERENCE")
def squared_difference(ctx: TfliteContext, node: SourceNode) -> None:
    """(x - y)^2 as a Sub and a Mul of the difference with itself."""
    difference = ctx.emit("Sub", node.inputs[:2], node=node, suffix="/difference")[0]
    ctx.emit("Mul", [difference, difference], node=node)


@converter(*DIRECT)
def direct(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit(DIRECT[node.op_type], list(node.inputs), node=node)


@converter("NOT_EQUAL")
def not_equal(ctx: TfliteContext, node: SourceNode) -> None:
    equal = ctx.emit("Equal", node.inputs[:2], node=node, suffix="/equal")[0]
    ctx.emit("Not", [equal], node=node)


@converter("FLOOR_MOD")
def floor_mod(ctx: TfliteContext, node: SourceNode) -> None:
    """FLOOR_MOD: the remainder with the divisor's sign (Python's %), the registry Mod's fmod=0."""
    ctx.emit("Mod", node.inputs[:2], {"fmod": 0}, node=node)


@converter("FLOOR_DIV")
def floor_div(ctx: TfliteContext, node: SourceNode) -> None:
    """FLOOR_DIV: floor(a / b); for floats Div then Floor, for integers (a - a mod b) / b, which is exact."""
    a, b = node.inputs[:2]
    if ctx.type_of(a).dtype.is_float:
        quotient = ctx.emit("Div", [a, b], node=node, suffix="/quotient")[0]
        ctx.emit("Floor", [quotient], node=node)
        return
    if ctx.value(b) is not None and not ctx.value(b).all():
        raise PegasusError(f"{node.describe()}: integer division by zero")
    remainder = ctx.emit("Mod", [a, b], {"fmod": 0}, node=node, suffix="/remainder")[0]
    multiple = ctx.emit("Sub", [a, remainder], node=node, suffix="/multiple")[0]
    ctx.emit("Div", [multiple, b], node=node)


@converter("SELECT")
def select(ctx: TfliteContext, node: SourceNode) -> None:
    """SELECT (tf.where v1): a condition of x's shape, or a vector choosing whole rows along x's first axis."""
    condition, x, y = node.inputs[:3]
    c_shape, x_shape = ctx.type_of(condition).shape, ctx.type_of(x).shape
    if len(c_shape) == 1 and len(x_shape) > 1:
        condition = ctx.emit("Reshape", [condition], {"shape": (c_shape[0],) + (1,) * (len(x_shape) - 1)},
                             node=node, suffix="/rows")[0]
    ctx.emit("Where", [condition, x, y], node=node)
