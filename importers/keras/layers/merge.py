"""Keras converters for the merging layers: Add, Subtract, Multiply, Average, Maximum, Minimum (element-wise
over their inputs, broadcasting), Concatenate (``axis``) and Dot (``axes``, ``normalize``).

The element-wise ones are a table onto the registry's n-ary ops (Sum, Mean, Max, Min) or a chain of binary
ones (Add, Mul) for two inputs. Dot is Keras' batch_dot: both inputs' contracted axis moved to where a
batched MatMul contracts it, the free axes flattened and restored after; with ``normalize`` each input is
first divided by its L2 norm along that axis (at least 1e-12 squared, as Keras' l2_normalize).
"""

from __future__ import annotations

from math import prod

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode

#: layer class -> (registry op for two inputs, registry op for more)
ELEMENTWISE = {"Add": ("Add", "Sum"), "Multiply": ("Mul", None), "Average": ("Mean", "Mean"),
               "Maximum": ("Max", "Max"), "Minimum": ("Min", "Min"), "Subtract": ("Sub", None)}
L2_FLOOR = 1e-12   # l2_normalize's epsilon on the sum of squares


@converter(*ELEMENTWISE)
def elementwise(ctx: KerasContext, node: KerasNode) -> None:
    pair, many = ELEMENTWISE[node.op_type]
    inputs = node.inputs
    if len(inputs) < 2 or (node.op_type == "Subtract" and len(inputs) != 2):
        raise PegasusError(f"{node.describe()}: takes {'two' if node.op_type == 'Subtract' else 'two or more'} "
                           f"inputs, got {len(inputs)}")
    if len(inputs) == 2 or many is not None:
        ctx.emit(pair if len(inputs) == 2 else many, list(inputs), node=node, outputs=node.outputs[:1])
        return
    y = inputs[0]
    for i, other in enumerate(inputs[1:], start=1):   # a chain of binary ops; the last writes the layer
        last = i == len(inputs) - 1
        y = ctx.emit(pair, [y, other], node=node, outputs=node.outputs[:1] if last else None,
                     suffix="" if last else f"/{i}")[0]


@converter("Concatenate")
def concatenate(ctx: KerasContext, node: KerasNode) -> None:
    rank = ctx.type_of(node.inputs[0]).rank
    axis = int(node.attrs.get("axis", -1))
    ctx.emit("Concat", list(node.inputs), {"axis": axis % rank}, node=node, outputs=node.outputs[:1])


def _normalized(ctx: KerasContext, node: KerasNode, x: str, axis: int, which: int) -> str:
    squares = ctx.emit("Mul", [x, x], node=node, suffix=f"/square_{which}")[0]
    total = ctx.emit("ReduceSum", [squares], {"axes": (axis,), "keepdims": True}, node=node,
                     suffix=f"/sum_squares_{which}")[0]
    floor = ctx.emit("Max", [total, ctx.scalar(node, "l2_floor", L2_FLOOR)], node=node, suffix=f"/floor_{which}")[0]
    norm = ctx.emit("Sqrt", [floor], node=node, suffix=f"/norm_{which}")[0]
    return ctx.emit("Div", [x, norm], node=node, suffix=f"/normalized_{which}")[0]


@converter("Dot")
def dot(ctx: KerasContext, node: KerasNode) -> None:
    if len(node.inputs) != 2:
        raise PegasusError(f"{node.describe()}: takes two inputs, got {len(node.inputs)}")
    x, y = node.inputs
    xs, ys = ctx.type_of(x).shape, ctx.type_of(y).shape
    value = node.attrs.get("axes", -1)
    pair = list(value) if isinstance(value, (list, tuple)) else [value, value]
    ax, ay = int(pair[0]) % len(xs), int(pair[1]) % len(ys)
    if ax == 0 or ay == 0 or xs[ax] != ys[ay] or xs[0] != ys[0]:
        raise PegasusError(f"{node.describe()}: cannot contract axis {ax} of {list(xs)} with axis {ay} of {list(ys)}")
    if node.attrs.get("normalize"):
        x, y = _normalized(ctx, node, x, ax, 0), _normalized(ctx, node, y, ay, 1)
    free_x = [a for a in range(1, len(xs)) if a != ax]
    free_y = [a for a in range(1, len(ys)) if a != ay]
    batch, depth = xs[0], xs[ax]
    left = ctx.emit("Transpose", [x], {"perm": (0, *free_x, ax)}, node=node, suffix="/left")[0]
    left = ctx.emit("Reshape", [left], {"shape": (batch, prod(xs[a] for a in free_x), depth)}, node=node,
                    suffix="/left_rows")[0]
    right = ctx.emit("Transpose", [y], {"perm": (0, ay, *free_y)}, node=node, suffix="/right")[0]
    right = ctx.emit("Reshape", [right], {"shape": (batch, depth, prod(ys[a] for a in free_y))}, node=node,
                     suffix="/right_columns")[0]
    product = ctx.emit("MatMul", [left, right], node=node, suffix="/matmul")[0]
    out = tuple(xs[a] for a in free_x) + tuple(ys[a] for a in free_y)
    ctx.emit("Reshape", [product], {"shape": (batch, *(out or (1,)))}, node=node, outputs=node.outputs[:1])

