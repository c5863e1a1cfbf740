"""PyTorch converters for the arithmetic ops: add, sub, rsub, mul, div (true, trunc, floor), pow, maximum,
minimum, with broadcasting and with a Python number for either operand.

``add``/``sub`` scale the second operand by ``alpha`` (a Mul by a constant, folded when the operand is a
constant). A Python number takes the tensor operand's dtype, as PyTorch's type promotion does for a float
tensor; two tensors of different dtypes are promoted as PyTorch promotes them. When no operand is a tensor
the op is shape arithmetic (``x.size(0) * 2``) and is computed at import.
"""

from __future__ import annotations

import operator

import numpy as np

from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter
from pegasus.importers.pytorch.ops.plumbing import fold_python
from pegasus.ir.dtypes import DType

#: aten op -> (registry op, Python operator for shape arithmetic, operands swapped)
BINARY = {"add": ("Add", operator.add, False), "sub": ("Sub", operator.sub, False), "mul": ("Mul", operator.mul, False),
          "div": ("Div", operator.truediv, False), "rsub": ("Sub", operator.sub, True),
          "pow": ("Pow", operator.pow, False), "maximum": ("Max", max, False), "minimum": ("Min", min, False),
          "true_divide": ("Div", operator.truediv, False), "multiply": ("Mul", operator.mul, False),
          "floor_divide": ("Div", operator.truediv, False)}


@converter(*[f"aten::{op}{inplace}" for op in BINARY for inplace in ("", "_")])
def binary(ctx: TorchContext, node: SourceNode) -> None:
    op, python, swapped = BINARY[node.op_type.split("::")[1].rstrip("_")]
    args = ctx.args(node)
    a = args.get("self", args.get("a"))
    b = args.get("other", args.get("exponent", args.get("b")))
    alpha = args.get("alpha", 1)
    mode = "floor" if node.op_type.startswith("aten::floor_divide") else args.get("rounding_mode")
    if fold_python(ctx, node, lambda *_: _python(python, a, b, alpha, mode, swapped)):
        return
    like = a if ctx.is_tensor(a) else b
    if isinstance(a if like is b else b, float) and not ctx.type_of(like).dtype.is_float:
        like = None  # an integer tensor times 0.01 is float32
    a, b = promote(ctx, node, ctx.tensor(node, a, like, "self"), ctx.tensor(node, b, like, "other"))
    if alpha not in (1, 1.0, None):
        b = ctx.emit("Mul", [b, ctx.tensor(node, alpha, b, "alpha")], node=node, suffix="/alpha")[0]
    if swapped:
        a, b = b, a
    if mode is None:
        ctx.emit(op, [a, b], node=node)
        return
    quotient = ctx.emit(op, [a, b], node=node, suffix="/divide")[0]
    if mode == "floor":
        ctx.emit("Floor", [quotient], node=node)
    else:
        _trunc(ctx, node, quotient)


def promote(ctx: TorchContext, node: SourceNode, a: str, b: str) -> tuple[str, str]:
    """Two tensors on one dtype as PyTorch's type promotion puts them: a float operand makes an integer or
    boolean one float (``x + 0`` traced holds a 0-d int64 tensor constant; ``positions * 0.01`` a 0-d float64
    one, which gives float32), else a 0-d operand takes the other's dtype, else the wider one wins. A constant
    is converted at import, a computed tensor by a Cast."""
    ta, tb = ctx.type_of(a).dtype, ctx.type_of(b).dtype
    if ta == tb:
        return a, b
    if ta.is_float != tb.is_float:  # a 0-d float with a larger integer tensor: the default dtype, float32
        real, integer = (a, b) if ta.is_float else (b, a)
        target = DType.FLOAT32 if ctx.rank(real) == 0 and ctx.rank(integer) > 0 else ctx.type_of(real).dtype
    elif (ctx.rank(a) == 0) != (ctx.rank(b) == 0):
        target = tb if ctx.rank(a) == 0 else ta
    else:
        target = ta if np.result_type(ta.numpy, tb.numpy) == ta.numpy else tb

    def cast(name: str, dtype) -> str:
        if dtype == target:
            return name
        value = ctx.value(name)
        if value is not None:
            return ctx.add_constant(f"{node.name}/{name}_as_{target.value}", value.astype(target.numpy))
        return ctx.emit("Cast", [name], {"to": target.value}, node=node, suffix=f"/cast_{name}")[0]

    return cast(a, ta), cast(b, tb)


def _trunc(ctx: TorchContext, node: SourceNode, quotient: str) -> None:
    """Rounding toward zero: sign(q) * floor(|q|)."""
    magnitude = ctx.emit("Abs", [quotient], node=node, suffix="/abs")[0]
    floored = ctx.emit("Floor", [magnitude], node=node, suffix="/floor")[0]
    sign = ctx.emit("Sign", [quotient], node=node, suffix="/sign")[0]
    ctx.emit("Mul", [floored, sign], node=node)


def _python(fn, a, b, alpha, mode, swapped):
    if alpha not in (1, 1.0, None):
        b = b * alpha
    if swapped:
        a, b = b, a
    if mode == "floor":
        return a // b
    if mode == "trunc":
        return int(a / b)
    return fn(a, b)


@converter("aten::where")
def where(ctx: TorchContext, node: SourceNode) -> None:
    """condition ? self : other, either value possibly a number."""
    args = ctx.args(node)
    a, b = args["self"], args["other"]
    like = a if ctx.is_tensor(a) else b
    ctx.emit("Where", [args["condition"], ctx.tensor(node, a, like, "self"), ctx.tensor(node, b, like, "other")],
             node=node)


@converter("aten::masked_fill", "aten::masked_fill_")
def masked_fill(ctx: TorchContext, node: SourceNode) -> None:
    """mask ? value : self (attention masks: ``scores.masked_fill(mask, float('-inf'))``)."""
    args = ctx.args(node)
    x = args["self"]
    ctx.emit("Where", [args["mask"], ctx.tensor(node, args["value"], x, "value"), x], node=node)
