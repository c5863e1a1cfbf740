"""Integer rules for ops that move, select or copy values (Reshape, Transpose, Slice, MaxPool...):
they run unchanged on integer tensors and their output stays on the input's grid (the quantizer gives
both the same parameters; if a user's edit makes them differ, a Requantize follows). Concat brings
every input onto the output's grid first; Pad pads with the zero point's level; Resize interpolates levels."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.facts import ops_with
from pegasus.quantized.context import LoweringContext, integer_rule, same_grid
from pegasus.quantized.requant import requantize_attrs


def _raw(ctx: LoweringContext, name: str) -> str:
    """A non-data input (shape, indices...) copied as it is."""
    if not name:
        return ""
    value = ctx.value(name)
    return ctx.constant(name, value) if value is not None else ctx.homes[name][0]


def passthrough(ctx: LoweringContext, node: Node, attrs=None) -> str | None:
    x = node.inputs[0]
    xq = ctx.quant(x)
    if xq.per_channel:
        return "per-channel input"
    inputs = [ctx.as_int(x)] + [_raw(ctx, name) for name in node.inputs[1:]]
    outputs = [o for o in node.outputs]
    quant = [xq if o and ctx.source.type_of(o).dtype.is_float else None for o in outputs]  # not TopK's indices
    names = ctx.emit(node.op, inputs, attrs or node.attrs, name=node.name,
                     outputs=[o or "" for o in outputs], quant=quant)
    for original, produced in zip(outputs, names):
        if not original:
            continue
        if ctx.graph.type_of(produced).dtype.value != xq.numpy_dtype:  # e.g. MaxPool's Indices
            ctx.set_home(original, produced, None)
            continue
        ctx.set_home(original, produced, xq)
        yq = ctx.table.get(original)
        if yq is not None and yq.is_integer and not same_grid(xq, yq):
            fixed = ctx.emit("Requantize", [produced], requantize_attrs(xq, yq, rounding=ctx.table.rounding),
                             name=f"{node.name}_requantize", outputs=[f"{original}_requantized"], quant=[yq])[0]
            ctx.set_home(original, fixed, yq)
    return None


integer_rule(*ops_with("value_preserving"))(passthrough)   # the ops declaring the fact


@integer_rule("Concat")
def concat(ctx: LoweringContext, node: Node) -> str | None:
    y = node.outputs[0]
    yq = ctx.quant(y)
    inputs = [ctx.as_int(name, yq) for name in node.inputs]
    result = ctx.emit("Concat", inputs, node.attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


@integer_rule("Pad")
def pad(ctx: LoweringContext, node: Node) -> str | None:
    xq = ctx.quant(node.inputs[0])
    level = round(node.attrs.constant_value / float(xq.scale[0])) + int(xq.zero_point[0])
    return passthrough(ctx, node, replace(node.attrs, constant_value=float(level)))


@integer_rule("Resize")
def resize(ctx: LoweringContext, node: Node) -> str | None:
    """Nearest selects levels; linear and cubic weights sum to one, so interpolating the levels on the input's grid
    is interpolating the real values (rounded once, where a float Resize's QuantizeLinear would round), and the
    reference and the bundle compute an integer Resize in float64 in one order, bit for bit. tf_crop_and_resize's
    extrapolation value becomes its level."""
    xq = ctx.quant(node.inputs[0])
    if xq.per_channel:
        return "per-channel input"
    level = round(node.attrs.extrapolation_value / float(xq.scale[0])) + int(xq.zero_point[0])
    info = np.iinfo(xq.numpy_dtype)
    return passthrough(ctx, node, replace(node.attrs, extrapolation_value=float(min(max(level, info.min), info.max))))


@integer_rule("DtypeConverter")
def dtype_converter(ctx: LoweringContext, node: Node) -> str | None:
    """A precision boundary of a hybrid graph: Requantize (int → int) or QuantizeLinear (float → int)."""
    x, y = node.inputs[0], node.outputs[0]
    yq = ctx.quant(y)
    ctx.set_home(y, ctx.as_int(x, yq), yq)
    return None
