"""Integer rules for element-wise ops.

- Relu/Clip: a Requantize whose clamp is the activation (when not already fused into a producer).
- Add/Sub (and a two-operand Sum): QAdd — both operands brought to a common fixed-point scale, added
  in 64 bits, shifted once.
- Mul: QMul — the product of centred operands, requantised by ``s_a * s_b / s_y``.
- Any other one-input element-wise op on an 8-bit tensor: a 256-entry LookupTable, filled by running
  the op's own float reference on every input level, so every unary function (Sigmoid, Tanh, Exp,
  HardSwish, Gelu, LeakyRelu, ...) is exact to its output grid at the cost of 256 bytes.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import dequantize_values, integer_range, quantize_values
from pegasus.ops.registry import all_ops
from pegasus.quantized.lower import LoweringContext, integer_rule
from pegasus.quantized.rules.common import clamp_of, fused_output, quantized_bounds, requantize_attrs, value_bits

#: One-input element-wise ops that are not functions of the value to tabulate.
_NOT_TABULATED = {"Identity", "Cast", "IsInf", "IsNaN", "Not", "Relu", "Clip", "DtypeConverter", "BFloat16Round",
                  "Requantize"}


@integer_rule("Relu", "Clip")
def clamp(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    lo, hi = quantized_bounds(yq, *clamp_of(node))
    result = ctx.emit("Requantize", [ctx.as_int(x)], requantize_attrs(xq, yq, lo, hi), name=node.name,
                      outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


@integer_rule("Add", "Sub", "Sum")
def add(ctx: LoweringContext, node: Node) -> str | None:
    if len(node.inputs) != 2:
        return f"{len(node.inputs)} operands (QAdd takes 2)"
    a, b = node.inputs
    aq, bq = ctx.quant(a), ctx.quant(b)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if aq.per_channel or bq.per_channel:
        return "per-channel operand"
    ra, rb = float(aq.scale[0]) / float(yq.scale[0]), float(bq.scale[0]) / float(yq.scale[0])
    # one shift for both operands: the larger factor gets 30 bits, the sum of two 31-bit products
    # of |x - zp| <= 2**17 stays below 2**63
    top = max(ra, rb)
    if top == 0:
        return "zero scale"
    shift = max(0, min(62, 30 - math.frexp(top)[1]))
    ma, mb = round(ra * 2 ** shift), round(rb * 2 ** shift)
    if node.op == "Sub":
        mb = -mb
    attrs = {"a_zero_point": int(aq.zero_point[0]), "b_zero_point": int(bq.zero_point[0]), "a_multiplier": ma,
             "b_multiplier": mb, "shift": shift, "out_zero_point": int(yq.zero_point[0]),
             "out_dtype": yq.numpy_dtype, "lo": lo, "hi": hi}
    result = ctx.emit("QAdd", [ctx.as_int(a), ctx.as_int(b)], attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


@integer_rule("Mul")
def mul(ctx: LoweringContext, node: Node) -> str | None:
    from pegasus.quantized.rules.common import requant_fields

    a, b = node.inputs
    aq, bq = ctx.quant(a), ctx.quant(b)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if aq.per_channel or bq.per_channel:
        return "per-channel operand"
    real = float(aq.scale[0]) * float(bq.scale[0]) / float(yq.scale[0])
    attrs = {**requant_fields([real], yq, value_bits(aq) + value_bits(bq), lo, hi),
             "a_zero_point": int(aq.zero_point[0]), "b_zero_point": int(bq.zero_point[0])}
    result = ctx.emit("QMul", [ctx.as_int(a), ctx.as_int(b)], attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


def lookup_table(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.numpy_dtype not in ("int8", "uint8"):
        return f"{xq.qtype} input: lookup tables cover 8-bit inputs only"
    if xq.per_channel or yq.per_channel:
        return "per-channel grid"
    lo, hi = integer_range(xq.numpy_dtype)
    levels = np.arange(lo, hi + 1)
    real = dequantize_values(levels, float(xq.scale[0]), int(xq.zero_point[0]))
    opdef = all_ops()[node.op]
    with np.errstate(all="ignore"):
        values = opdef.reference(node.attrs, [real])[0].astype(np.float64)
    values = np.nan_to_num(values, nan=0.0, posinf=np.finfo(np.float32).max, neginf=np.finfo(np.float32).min)
    table = quantize_values(values, float(yq.scale[0]), int(yq.zero_point[0]), yq.numpy_dtype)
    table_name = ctx.constant(f"{node.name}_table", table)
    result = ctx.emit("LookupTable", [ctx.as_int(x), table_name], name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


def _register_tables() -> None:
    for name, opdef in all_ops().items():
        if opdef.elementwise and opdef.num_inputs == (1, 1) and name not in _NOT_TABULATED \
                and opdef.__module__ in ("pegasus.ops.elementwise",):
            integer_rule(name)(lookup_table)


_register_tables()
