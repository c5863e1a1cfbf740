"""Integer rules for pooling: max pooling selects values (it runs unchanged on integers, output on the
input's grid); average pooling becomes QAveragePool (integer window sum, requantised once by r / c
for a window of c taps, r = s_x / s_y: one multiplier and shift per tap count, no division), and so does a
ReduceMean over every spatial axis (a global average pool)."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import bits_needed, integer_range
from pegasus.ops.integer import QAveragePool
from pegasus.ops.layout import first_shape
from pegasus.ops.registry import make_attrs
from pegasus.quantized.context import LoweringContext, integer_rule
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.requant import requant_fields
from pegasus.quantized.rules.values import passthrough


@integer_rule("MaxPool", "GlobalMaxPool")
def max_pool(ctx: LoweringContext, node: Node) -> str | None:
    if len([o for o in node.outputs if o]) > 1:
        return "Indices output is used"
    return passthrough(ctx, node)


def sum_bits(xq: TensorQuant, taps: int) -> int:
    """Bits of a window sum of ``taps`` values x - zero_point (the accumulator the multipliers scale)."""
    tmin, tmax = integer_range(xq.numpy_dtype)
    zero_point = int(xq.zero_point[0])
    return bits_needed(taps * max(tmax - zero_point, zero_point - tmin))


@integer_rule("AveragePool", "GlobalAveragePool")
def average_pool(ctx: LoweringContext, node: Node) -> str | None:
    channels_last = bool(node.attrs.channels_last)
    if node.op == "GlobalAveragePool":
        shape = first_shape(ctx.source.type_of(node.inputs[0]).shape, channels_last)
        window = {"kernel_shape": tuple(shape[2:]), "channels_last": channels_last}
    else:
        window = {f: getattr(node.attrs, f) for f in node.attrs.__dataclass_fields__}
    return _window_average(ctx, node, window)


@integer_rule("ReduceMean")
def reduce_mean(ctx: LoweringContext, node: Node) -> str | None:
    """A mean over every spatial axis (torch's ``x.mean((2, 3))`` in an SE block or a head; Keras' over H, W) is a
    global average pool, channels first or last; without keepdims its output is that pool's, reshaped."""
    rank = ctx.source.type_of(node.inputs[0]).rank
    layouts = {tuple(range(2, rank)): False, tuple(range(1, rank - 1)): True} if rank >= 3 else {}
    if tuple(node.attrs.axes) not in layouts:
        return f"a mean over axes {list(node.attrs.axes)} is not a global average pool"
    channels_last = layouts[tuple(node.attrs.axes)]
    shape = first_shape(ctx.source.type_of(node.inputs[0]).shape, channels_last)
    return _window_average(ctx, node, {"kernel_shape": tuple(shape[2:]), "channels_last": channels_last})


def _window_average(ctx: LoweringContext, node: Node, window: dict) -> str | None:
    """QAveragePool of input 0 over ``window`` (its attributes) onto the output's grid, reshaped to the output's
    shape when the op drops the pooled axes."""
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.per_channel or yq.per_channel:
        return "per-channel input or output"
    channels_last = bool(window["channels_last"])
    shape = first_shape(ctx.source.type_of(x).shape, channels_last)
    taps = QAveragePool.taps(make_attrs("QAveragePool", **window), shape)
    real = float(xq.scale[0]) / float(yq.scale[0])
    reals = real / np.arange(1, taps + 1, dtype=np.float64)   # entry c - 1: a window of c taps
    attrs = {**window, **requant_fields(reals, yq, sum_bits(xq, taps), rounding=ctx.table.rounding),
             "x_zero_point": int(xq.zero_point[0])}
    kept = QAveragePool.infer(make_attrs("QAveragePool", **attrs), [ctx.source.type_of(x)])[0].shape
    reshaped = tuple(kept) != tuple(ctx.source.type_of(y).shape)   # a ReduceMean without keepdims
    result = ctx.emit("QAveragePool", [ctx.as_int(x)], attrs, name=node.name,
                      outputs=[f"{y}_pooled" if reshaped else y], quant=[yq])[0]
    if reshaped:
        result = ctx.emit("Reshape", [result], {"shape": tuple(ctx.source.type_of(y).shape)},
                          name=f"{node.name}_reshape", outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None
