"""Integer rules for pooling: max pooling selects values (it runs unchanged on integers, output on the
input's grid); average pooling becomes QAveragePool (integer sum, rounded division by the tap count,
requantisation to the output grid)."""

from __future__ import annotations

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import bits_needed
from pegasus.ops.integer import QAveragePool
from pegasus.quantized.lower import LoweringContext, integer_rule
from pegasus.quantized.rules.common import requant_fields, value_bits
from pegasus.quantized.rules.values import passthrough


@integer_rule("MaxPool", "GlobalMaxPool")
def max_pool(ctx: LoweringContext, node: Node) -> str | None:
    if len([o for o in node.outputs if o]) > 1:
        return "Indices output is used"
    return passthrough(ctx, node)


@integer_rule("AveragePool", "GlobalAveragePool")
def average_pool(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    shape = ctx.source.type_of(x).shape
    if node.op == "GlobalAveragePool":
        window = {"kernel_shape": tuple(shape[2:])}
    else:
        window = {f: getattr(node.attrs, f) for f in node.attrs.__dataclass_fields__}
    real = float(xq.scale[0]) / float(yq.scale[0])
    attrs = {**window, **requant_fields([real], yq, value_bits(xq)), "x_zero_point": int(xq.zero_point[0])}
    from pegasus.ops.registry import make_attrs

    taps = QAveragePool.taps(make_attrs("QAveragePool", **attrs), shape)
    attrs.update(requant_fields([real], yq, bits_needed(taps) + value_bits(xq)))
    result = ctx.emit("QAveragePool", [ctx.as_int(x)], attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None
