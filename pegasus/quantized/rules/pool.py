"""Integer rules for pooling: max pooling selects values (it runs unchanged on integers, output on the
input's grid); average pooling becomes QAveragePool (integer window sum, requantised once by r / c
for a window of c taps, r = s_x / s_y: one multiplier and shift per tap count, no division)."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import bits_needed, integer_range
from pegasus.ops.integer import QAveragePool
from pegasus.ops.layout import first_shape
from pegasus.ops.registry import make_attrs
from pegasus.quantized.lower import LoweringContext, integer_rule
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.rules.common import requant_fields
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
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    channels_last = bool(node.attrs.channels_last)
    shape = first_shape(ctx.source.type_of(x).shape, channels_last)
    if node.op == "GlobalAveragePool":
        window = {"kernel_shape": tuple(shape[2:]), "channels_last": channels_last}
    else:
        window = {f: getattr(node.attrs, f) for f in node.attrs.__dataclass_fields__}
    taps = QAveragePool.taps(make_attrs("QAveragePool", **window), shape)
    real = float(xq.scale[0]) / float(yq.scale[0])
    reals = real / np.arange(1, taps + 1, dtype=np.float64)   # entry c - 1: a window of c taps
    attrs = {**window, **requant_fields(reals, yq, sum_bits(xq, taps), rounding=ctx.table.rounding),
             "x_zero_point": int(xq.zero_point[0])}
    result = ctx.emit("QAveragePool", [ctx.as_int(x)], attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None
