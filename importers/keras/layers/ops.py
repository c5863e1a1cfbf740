"""Keras converters for the operations a functional model records between layers: Keras 3's (domain
``ops``: ``x + 3.0``, ``x * y``, ``keras.ops.relu(x)``) and Keras 2's TFOpLambda layers (domain ``tf``, keyed
by the TensorFlow function: ``math.multiply``, ``nn.relu``). Keras' own MobileNetV3 writes its hard sigmoid as
``ReLU(6)(x + 3) * (1 / 6)``, which is either. Their config names no parameters; the call's arguments mix
tensors and Python numbers, kept by graph.py as a template (``{"input": k}`` for tensor k), and each number
becomes a float32 constant. Binary arithmetic and a few element-wise functions are tables onto registry ops;
any other operation is listed as unsupported with the layers.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import TABLE, KerasContext
from pegasus.importers.keras.graph import KerasNode

#: keras.ops class -> registry op, for the binary operations (numbers broadcast)
BINARY = {"Add": "Add", "Subtract": "Sub", "Multiply": "Mul", "Divide": "Div", "TrueDivide": "Div",
          "Maximum": "Max", "Minimum": "Min", "Power": "Pow"}
#: keras.ops class -> (registry op, attributes), for the one-tensor operations
UNARY = {"Relu": ("Relu", {}), "Relu6": ("Clip", {"min": 0.0, "max": 6.0}), "Sigmoid": ("Sigmoid", {}),
         "Tanh": ("Tanh", {}), "Exp": ("Exp", {}), "Log": ("Log", {}), "Sqrt": ("Sqrt", {}), "Abs": ("Abs", {}),
         "Absolute": ("Abs", {}), "Negative": ("Neg", {}), "Silu": ("Swish", {}), "HardSilu": ("HardSwish", {}),
         "HardSigmoid": ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}), "Softplus": ("Softplus", {}),
         "Erf": ("Erf", {})}


#: TFOpLambda function -> the keras.ops class with the same meaning
TF_FUNCTIONS = {"__operators__.add": "Add", "math.add": "Add", "math.subtract": "Subtract",
                "math.multiply": "Multiply", "math.truediv": "TrueDivide", "math.divide": "Divide",
                "math.maximum": "Maximum", "math.minimum": "Minimum", "math.pow": "Power", "nn.relu": "Relu",
                "nn.relu6": "Relu6", "math.sigmoid": "Sigmoid", "math.tanh": "Tanh", "math.exp": "Exp",
                "math.log": "Log", "math.sqrt": "Sqrt", "math.abs": "Abs", "math.negative": "Negative",
                "nn.silu": "Silu", "math.softplus": "Softplus", "math.erf": "Erf"}


def _operands(ctx: KerasContext, node: KerasNode, count: int) -> list[str]:
    """The call's first ``count`` positional arguments as tensor names (numbers as float32 constants)."""
    args = node.attrs.get("args")
    if not isinstance(args, list) or len(args) != count:
        raise PegasusError(f"{node.describe()}: expected {count} positional argument(s), the config records "
                           f"{args!r}")
    names = []
    for k, arg in enumerate(args):
        if isinstance(arg, dict) and set(arg) == {"input"}:
            names.append(node.inputs[arg["input"]])
        elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
            names.append(ctx.param(node, f"operand_{k}", np.array(arg, np.float32)))
        else:
            raise PegasusError(f"{node.describe()}: argument {k} ({arg!r}) is neither a tensor nor a number")
    return names


def _meaning(node: KerasNode) -> str:
    return TF_FUNCTIONS[node.op_type] if node.domain == "tf" else node.op_type


def binary(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit(BINARY[_meaning(node)], _operands(ctx, node, 2), node=node, outputs=node.outputs[:1])


def unary(ctx: KerasContext, node: KerasNode) -> None:
    op, attrs = UNARY[_meaning(node)]
    ctx.emit(op, _operands(ctx, node, 1), attrs, node=node, outputs=node.outputs[:1])


for _name in BINARY:
    TABLE.register(_name, domain="ops")(binary)
for _name in UNARY:
    TABLE.register(_name, domain="ops")(unary)
for _name, _meant in TF_FUNCTIONS.items():
    TABLE.register(_name, domain="tf")(binary if _meant in BINARY else unary)
