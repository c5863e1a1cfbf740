"""TFLite converters for the one-input element-wise ops: the activations (RELU, RELU6, RELU_N1_TO_1,
RELU_0_TO_1, LOGISTIC, TANH, HARD_SWISH, ELU, LEAKY_RELU, GELU, PRELU), the math functions (EXP, LOG,
SQRT, RSQRT, ABS, NEG, SQUARE, FLOOR, CEIL, ROUND (half to even, as TFLite's), SIGN, SIN, COS), LOGICAL_NOT
and CAST.

The ops that map one to one are a table; the activations take their registry form from the table the
channels-last frameworks share (importers/common/channels_last.py), so a fused RELU6 and a RELU6 layer
are the same layer. RSQRT is 1 / sqrt(x), as TFLite's kernel computes it.
"""

from __future__ import annotations

from pegasus.importers.common.channels_last import ACTIVATIONS
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

#: TFLite builtin -> shared activation name
_ACTIVATION_OPS = {"RELU": "relu", "RELU6": "relu6", "RELU_N1_TO_1": "relu_n1_to_1", "RELU_0_TO_1": "relu_0_to_1",
                   "LOGISTIC": "sigmoid", "TANH": "tanh", "HARD_SWISH": "hard_swish", "ELU": "elu"}

#: TFLite builtin -> (registry op, attributes) for the ops that map one to one
UNARY = {**{op: ACTIVATIONS[name] for op, name in _ACTIVATION_OPS.items()},
         "EXP": ("Exp", {}), "LOG": ("Log", {}), "SQRT": ("Sqrt", {}), "ABS": ("Abs", {}), "NEG": ("Neg", {}),
         "FLOOR": ("Floor", {}), "CEIL": ("Ceil", {}), "ROUND": ("Round", {}), "SIGN": ("Sign", {}), "SIN": ("Sin", {}),
         "COS": ("Cos", {}), "LOGICAL_NOT": ("Not", {})}


@converter(*UNARY)
def unary(ctx: TfliteContext, node: SourceNode) -> None:
    op, attrs = UNARY[node.op_type]
    ctx.emit(op, [node.inputs[0]], attrs, node=node)


@converter("LEAKY_RELU")
def leaky_relu(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("LeakyRelu", [node.inputs[0]], {"alpha": float(node.attrs.get("alpha", 0.0))}, node=node)


@converter("GELU")
def gelu(ctx: TfliteContext, node: SourceNode) -> None:
    approximate = "tanh" if node.attrs.get("approximate", False) else "none"
    ctx.emit("Gelu", [node.inputs[0]], {"approximate": approximate}, node=node)


@converter("PRELU")
def prelu(ctx: TfliteContext, node: SourceNode) -> None:
    """PRELU: y = x where x >= 0, else alpha * x; alpha (float16 or int8 weights too) broadcasts to x."""
    alpha = ctx.weights(node, 1, "alpha")
    ctx.emit("PRelu", [node.inputs[0], ctx.add_constant(f"{node.name}/alpha", alpha)], node=node)


@converter("SQUARE")
def square(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("Mul", [node.inputs[0], node.inputs[0]], node=node)


@converter("RSQRT")
def rsqrt(ctx: TfliteContext, node: SourceNode) -> None:
    root = ctx.emit("Sqrt", [node.inputs[0]], node=node, suffix="/sqrt")[0]
    ctx.emit("Reciprocal", [root], node=node)


@converter("CAST")
def cast(ctx: TfliteContext, node: SourceNode) -> None:
    """CAST to the output tensor's type (float to integer truncates toward zero, as static_cast does)."""
    ctx.emit("Cast", [node.inputs[0]], {"to": ctx.tensors[node.outputs[0]].dtype}, node=node)
