"""PyTorch converters for the one-input element-wise ops: activations and math functions.

The ops that map one to one are a table (the in-place forms, ``relu_``, are the same function once
TorchScript's mutation removal has run); those with arguments read them: ``hardtanh``/``relu6``/``clamp``
become a Clip, ``leaky_relu`` its slope, ``elu`` its alpha (and a ``scale``; an ``input_scale`` other than 1
is refused), ``gelu`` its approximation, ``softplus`` its beta and threshold (beta 1 only), ``prelu`` its
weight broadcast over the channel axis (axis 1), ``rsqrt`` is 1 / sqrt(x); ``glu`` halves its dim, ``threshold``
is a Where.
"""

from __future__ import annotations

import math
import operator

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter

#: aten op -> (registry op, attributes)
UNARY = {"relu": ("Relu", {}), "sigmoid": ("Sigmoid", {}), "tanh": ("Tanh", {}), "silu": ("Swish", {}),
         "mish": ("Mish", {}), "hardswish": ("HardSwish", {}), "selu": ("Selu", {}),
         "hardsigmoid": ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}), "relu6": ("Clip", {"min": 0.0, "max": 6.0}),
         "exp": ("Exp", {}), "log": ("Log", {}), "sqrt": ("Sqrt", {}), "abs": ("Abs", {}), "neg": ("Neg", {}),
         "reciprocal": ("Reciprocal", {}), "erf": ("Erf", {}), "floor": ("Floor", {}), "ceil": ("Ceil", {}),
         "sin": ("Sin", {}), "cos": ("Cos", {}), "sign": ("Sign", {}), "round": ("Round", {}),
         "softsign": ("Softsign", {})}


#: the same functions on Python numbers (shape arithmetic)
_PYTHON = {"neg": operator.neg, "abs": abs, "floor": math.floor, "ceil": math.ceil, "sqrt": math.sqrt,
           "exp": math.exp, "log": math.log, "round": round}


@converter(*[f"aten::{op}{inplace}" for op in UNARY for inplace in ("", "_")])
def unary(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args.get("self", args.get("input"))
    op_name = node.op_type.split("::")[1].rstrip("_")
    if not ctx.is_tensor(x):  # math on a Python number (shape arithmetic)
        if op_name not in _PYTHON:
            raise PegasusError(f"{node.describe()}: {op_name} of {x!r} is not supported")
        ctx.set_value(node, _PYTHON[op_name](x))
        return
    op, attrs = UNARY[op_name]
    ctx.emit(op, [x], attrs, node=node)


@converter("aten::hardtanh", "aten::hardtanh_", "aten::clamp", "aten::clamp_", "aten::clip", "aten::clamp_min",
           "aten::clamp_max")
def clamp(ctx: TorchContext, node: SourceNode) -> None:
    """Clip with the bounds given (numbers, or constant tensors); hardtanh's default to [-1, 1]."""
    args = ctx.args(node)
    x = args.get("self", args.get("input"))
    low = args.get("min_val", args.get("min"))
    high = args.get("max_val", args.get("max"))
    if node.op_type == "aten::clamp_max":
        low, high = None, low if high is None else high
    attrs = {}
    for key, value in (("min", low), ("max", high)):
        if value is not None:
            attrs[key] = float(ctx.number(node, value, f"clamp {key}"))
    ctx.emit("Clip", [x], attrs, node=node)


@converter("aten::leaky_relu", "aten::leaky_relu_")
def leaky_relu(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    ctx.emit("LeakyRelu", [args["self"]], {"alpha": float(args.get("negative_slope", 0.01))}, node=node)


@converter("aten::elu", "aten::elu_", "aten::celu")
def elu(ctx: TorchContext, node: SourceNode) -> None:
    """elu; a ``scale`` (a core-ATen program's selu is elu with SELU's alpha and scale) multiplies the result."""
    args = ctx.args(node)
    scale = float(args.get("scale", 1))
    if float(args.get("input_scale", 1)) != 1:
        raise PegasusError(f"{node.describe()}: elu with input_scale other than 1 is not supported")
    op = "Celu" if node.op_type == "aten::celu" else "Elu"
    x = args["self"]
    if scale == 1:
        ctx.emit(op, [x], {"alpha": float(args.get("alpha", 1.0))}, node=node)
        return
    y = ctx.emit(op, [x], {"alpha": float(args.get("alpha", 1.0))}, node=node, suffix="/elu")[0]
    ctx.emit("Mul", [y, ctx.tensor(node, scale, x, "scale")], node=node)


@converter("aten::gelu")
def gelu(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    ctx.emit("Gelu", [args["self"]], {"approximate": str(args.get("approximate", "none"))}, node=node)


@converter("aten::softplus")
def softplus(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    if float(args.get("beta", 1)) != 1 or float(args.get("threshold", 20)) != 20:
        raise PegasusError(f"{node.describe()}: softplus with beta or threshold other than 1 and 20 is not supported")
    ctx.emit("Softplus", [args["self"]], node=node)


@converter("aten::prelu", "aten::_prelu_kernel")
def prelu(ctx: TorchContext, node: SourceNode) -> None:
    """PReLU: the weight (one value, or one per channel of axis 1) shaped to broadcast over x."""
    args = ctx.args(node)
    x, weight = args["self"], args["weight"]
    slope = ctx.value(weight)
    rank = ctx.rank(x)
    if slope is None:
        raise PegasusError(f"{node.describe()}: the PReLU weight must be a constant")
    if slope.size > 1 and rank >= 2:
        slope = slope.reshape((-1,) + (1,) * (rank - 2))
    ctx.emit("PRelu", [x, ctx.add_constant(f"{node.name}/slope", slope.astype(ctx.type_of(x).dtype.numpy))],
             node=node)


@converter("aten::rsqrt")
def rsqrt(ctx: TorchContext, node: SourceNode) -> None:
    root = ctx.emit("Sqrt", [ctx.args(node)["self"]], node=node, suffix="/sqrt")[0]
    ctx.emit("Reciprocal", [root], node=node)


@converter("aten::log1p")
def log1p(ctx: TorchContext, node: SourceNode) -> None:
    x = ctx.args(node)["self"]
    shifted = ctx.emit("Add", [x, ctx.tensor(node, 1.0, x, "one")], node=node, suffix="/plus_one")[0]
    ctx.emit("Log", [shifted], node=node)


@converter("aten::glu")
def glu(ctx: TorchContext, node: SourceNode) -> None:
    """a * sigmoid(b), a and b the halves of ``dim``."""
    args = ctx.args(node)
    x = args["self"]
    axis = int(args.get("dim", -1)) % ctx.rank(x)
    half = ctx.shape(x)[axis] // 2
    a, b = (ctx.emit("Slice", [x], {"starts": (start,), "ends": (start + half,), "axes": (axis,)}, node=node,
                     suffix=f"/{part}")[0] for start, part in ((0, "a"), (half, "b")))
    gate = ctx.emit("Sigmoid", [b], node=node, suffix="/gate")[0]
    ctx.emit("Mul", [a, gate], node=node)


@converter("aten::threshold", "aten::threshold_")
def threshold(ctx: TorchContext, node: SourceNode) -> None:
    """x where x > threshold, else value."""
    args = ctx.args(node)
    x = args["self"]
    above = ctx.emit("Greater", [x, ctx.tensor(node, args["threshold"], x, "threshold")], node=node,
                     suffix="/above")[0]
    ctx.emit("Where", [above, x, ctx.tensor(node, args["value"], x, "value")], node=node)
