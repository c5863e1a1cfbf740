"""TensorFlow converters for element-wise ops: the one-to-one unary and binary ops are tables (the activations
take their registry form from the table the channels-last frameworks share, importers/common/channels_last.py),
and the rest are small compositions: Rsqrt (1 / sqrt(x), as TensorFlow computes it), Square (x * x),
SquaredDifference ((x - y)^2), NotEqual, FloorDiv (floor of the quotient, for floats), AddN (a variadic Sum),
LeakyRelu, ClipByValue, Cast (to the node's DstT), Select/SelectV2 (Where; Select's vector condition picks
along the first axis). Inputs broadcast as NumPy does, which is TensorFlow's rule and the registry's.
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import ACTIVATIONS
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.context import TfContext, converter

#: TensorFlow op -> (registry op, attributes) for the one-input ops that map one to one
UNARY = {
    "Relu": ACTIVATIONS["relu"], "Relu6": ACTIVATIONS["relu6"], "Elu": ACTIVATIONS["elu"],
    "Selu": ACTIVATIONS["selu"], "Sigmoid": ACTIVATIONS["sigmoid"], "Tanh": ACTIVATIONS["tanh"],
    "Softplus": ACTIVATIONS["softplus"], "Softsign": ACTIVATIONS["softsign"],
    "Exp": ("Exp", {}), "Log": ("Log", {}), "Sqrt": ("Sqrt", {}), "Abs": ("Abs", {}), "Neg": ("Neg", {}),
    "Floor": ("Floor", {}), "Ceil": ("Ceil", {}), "Round": ("Round", {}), "Sign": ("Sign", {}),
    "Reciprocal": ("Reciprocal", {}), "Inv": ("Reciprocal", {}), "Erf": ("Erf", {}), "Sin": ("Sin", {}),
    "Cos": ("Cos", {}), "Tan": ("Tan", {}), "Atan": ("Atan", {}), "LogicalNot": ("Not", {}),
    "IsNan": ("IsNaN", {}),
}

#: TensorFlow op -> registry op for the two-input ops that map one to one
BINARY = {
    "Add": "Add", "AddV2": "Add", "Sub": "Sub", "Mul": "Mul", "RealDiv": "Div", "Maximum": "Max",
    "Minimum": "Min", "Pow": "Pow", "Greater": "Greater", "GreaterEqual": "GreaterOrEqual", "Less": "Less",
    "LessEqual": "LessOrEqual", "Equal": "Equal", "LogicalAnd": "And", "LogicalOr": "Or",
}


@converter(*UNARY)
def unary(ctx: TfContext, node: SourceNode) -> None:
    op, attrs = UNARY[node.op_type]
    ctx.emit(op, [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])


@converter(*BINARY)
def binary(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit(BINARY[node.op_type], node.inputs[:2], node=node, outputs=node.outputs[:1])


def _float_only(ctx: TfContext, node: SourceNode) -> None:
    if not ctx.type_of(node.inputs[0]).dtype.is_float:
        raise PegasusError(f"{node.describe()}: {node.op_type} of {ctx.type_of(node.inputs[0]).dtype.value} "
                           "tensors is not supported (only floats)")


@converter("Div")
def div(ctx: TfContext, node: SourceNode) -> None:
    _float_only(ctx, node)
    ctx.emit("Div", node.inputs[:2], node=node, outputs=node.outputs[:1])


@converter("FloorDiv")
def floor_div(ctx: TfContext, node: SourceNode) -> None:
    _float_only(ctx, node)
    quotient = ctx.emit("Div", node.inputs[:2], node=node, suffix="/quotient")[0]
    ctx.emit("Floor", [quotient], node=node, outputs=node.outputs[:1])


@converter("FloorMod")
def floor_mod(ctx: TfContext, node: SourceNode) -> None:
    """The remainder with the divisor's sign (Python's %), ONNX's Mod with fmod 0."""
    ctx.emit("Mod", node.inputs[:2], {"fmod": 0}, node=node, outputs=node.outputs[:1])


@converter("NotEqual")
def not_equal(ctx: TfContext, node: SourceNode) -> None:
    equal = ctx.emit("Equal", node.inputs[:2], node=node, suffix="/equal")[0]
    ctx.emit("Not", [equal], node=node, outputs=node.outputs[:1])


@converter("Rsqrt")
def rsqrt(ctx: TfContext, node: SourceNode) -> None:
    root = ctx.emit("Sqrt", [node.inputs[0]], node=node, suffix="/sqrt")[0]
    ctx.emit("Reciprocal", [root], node=node, outputs=node.outputs[:1])


@converter("Square")
def square(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit("Mul", [node.inputs[0], node.inputs[0]], node=node, outputs=node.outputs[:1])


@converter("SquaredDifference")
def squared_difference(ctx: TfContext, node: SourceNode) -> None:
    difference = ctx.emit("Sub", node.inputs[:2], node=node, suffix="/difference")[0]
    ctx.emit("Mul", [difference, difference], node=node, outputs=node.outputs[:1])


@converter("AddN")
def add_n(ctx: TfContext, node: SourceNode) -> None:
    if len(node.inputs) == 1:
        ctx.emit("Identity", node.inputs, node=node, outputs=node.outputs[:1])
        return
    ctx.emit("Sum", list(node.inputs), node=node, outputs=node.outputs[:1])


@converter("LeakyRelu")
def leaky_relu(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit("LeakyRelu", [node.inputs[0]], {"alpha": float(node.attrs.get("alpha", 0.2))}, node=node,
             outputs=node.outputs[:1])


@converter("ClipByValue")
def clip_by_value(ctx: TfContext, node: SourceNode) -> None:
    """min(max(x, low), high): a Clip when the bounds are single constants, else a Max and a Min."""
    low, high = ctx.value(node.inputs[1]), ctx.value(node.inputs[2])
    if low is not None and high is not None and low.size == 1 and high.size == 1:
        ctx.emit("Clip", [node.inputs[0]], {"min": float(low.reshape(-1)[0]), "max": float(high.reshape(-1)[0])},
                 node=node, outputs=node.outputs[:1])
        return
    floor = ctx.emit("Max", [node.inputs[0], node.inputs[1]], node=node, suffix="/low")[0]
    ctx.emit("Min", [floor, node.inputs[2]], node=node, outputs=node.outputs[:1])


@converter("Cast")
def cast(ctx: TfContext, node: SourceNode) -> None:
    """Cast to DstT (float to integer truncates toward zero, as TensorFlow does)."""
    ctx.emit("Cast", [node.inputs[0]], {"to": str(node.attrs.get("DstT") or ctx.output_dtype(node))}, node=node,
             outputs=node.outputs[:1])


@converter("Select", "SelectV2")
def select(ctx: TfContext, node: SourceNode) -> None:
    condition, x, y = node.inputs[:3]
    rank, condition_rank = ctx.type_of(x).rank, ctx.type_of(condition).rank
    if node.op_type == "Select" and condition_rank == 1 and rank > 1:   # picks whole rows of x or y
        rows = tuple(ctx.type_of(condition).shape) + (1,) * (rank - 1)
        condition = ctx.emit("Reshape", [condition], {"shape": rows}, node=node, suffix="/rows")[0]
    ctx.emit("Where", [condition, x, y], node=node, outputs=node.outputs[:1])
