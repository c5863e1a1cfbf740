"""Integer rules for element-wise ops.

- Relu/Clip: a Requantize whose clamp is the activation (when not already fused into a producer).
- Add/Sub (and a two-operand Sum): QAdd — both operands brought to a common fixed-point scale, added
  in 64 bits, shifted once.
- Mul: QMul — the product of centred operands, requantised by ``s_a * s_b / s_y``.
- Any other one-input element-wise op on an 8-bit tensor: a 256-entry LookupTable, filled by running
  the op's own float reference on every input level, so every unary function (Sigmoid, Tanh, Exp,
  HardSwish, Gelu, LeakyRelu, ...) is exact to its output grid at the cost of 256 bytes.
- On an int16 tensor: 513 knots of the same function, linearly interpolated (1 KB), kept only when the
  interpolation stays within ``INTERPOLATION_LIMIT`` output steps of the exact grid on all 65,536 levels —
  measured here, so a step (Floor, Sign) or a pole (Reciprocal near 0) runs in float instead, and says why.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.facts import ops_with
from pegasus.ops.fixedpoint import dequantize_values, integer_range, quantize_values
from pegasus.ops.integer import LookupTable, interpolate_table
from pegasus.ops.registry import all_ops
from pegasus.quantized.context import LoweringContext, integer_rule
from pegasus.quantized.requant import requant_fields, requantize_attrs, value_bits
from pegasus.quantized.rules.common import clamp_of, fused_output, quantized_bounds


@integer_rule(*ops_with("clamp"))
def clamp(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    lo, hi = quantized_bounds(yq, *clamp_of(node), ctx.table.rounding)
    attrs = requantize_attrs(xq, yq, lo, hi, ctx.table.rounding)
    result = ctx.emit("Requantize", [ctx.as_int(x)], attrs, name=node.name, outputs=[y], quant=[yq])[0]
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
def mul(ctx: LoweringContext, node: Node, applied: str | None = None) -> str | None:
    """QMul; ``applied``: the op's rounding when it differs from the table's (which derives the multiplier)."""
    a, b = node.inputs
    aq, bq = ctx.quant(a), ctx.quant(b)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if aq.per_channel or bq.per_channel:
        return "per-channel operand"
    real = float(aq.scale[0]) * float(bq.scale[0]) / float(yq.scale[0])
    attrs = {**requant_fields([real], yq, value_bits(aq) + value_bits(bq), lo, hi, ctx.table.rounding),
             "a_zero_point": int(aq.zero_point[0]), "b_zero_point": int(bq.zero_point[0])}
    attrs["rounding"] = applied or attrs["rounding"]
    result = ctx.emit("QMul", [ctx.as_int(a), ctx.as_int(b)], attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


#: Largest error, in output steps, an int16 interpolated table may make anywhere; past it the layer runs in float.
#: 64 steps of an int16 output are 1/1024 of its range — finer than one step of an 8-bit table.
INTERPOLATION_LIMIT = 64


def _function_values(node: Node, levels: np.ndarray, xq) -> np.ndarray:
    """The op's own float reference at the real values of ``levels`` (non-finite results saturate)."""
    real = dequantize_values(levels, float(xq.scale[0]), int(xq.zero_point[0]))
    with np.errstate(all="ignore"):
        values = all_ops()[node.op].reference(node.attrs, [real])[0].astype(np.float64)
    return np.nan_to_num(values, nan=0.0, posinf=np.finfo(np.float32).max, neginf=np.finfo(np.float32).min)


def _interpolated_table(node: Node, xq, yq) -> tuple[np.ndarray | None, str]:
    """Knots of an int16 LookupTable, or None and why not (its error past ``INTERPOLATION_LIMIT``)."""
    if np.dtype(yq.numpy_dtype).itemsize > 2:
        return None, f"{yq.qtype} output: int16 tables hold outputs of at most 16 bits"
    step = 1 << LookupTable.SEGMENT_BITS
    knots = np.arange(LookupTable.INTERPOLATED_ENTRIES, dtype=np.int64) * step - 32768
    scale, zero_point = float(yq.scale[0]), int(yq.zero_point[0])
    table = quantize_values(_function_values(node, knots, xq), scale, zero_point, yq.numpy_dtype)
    levels = np.arange(-32768, 32768).astype(np.int16)
    exact = quantize_values(_function_values(node, levels, xq), scale, zero_point, yq.numpy_dtype)
    error = int(np.abs(interpolate_table(levels, table).astype(np.int64) - exact).max())
    if error > INTERPOLATION_LIMIT:
        return None, f"int16 table: linear interpolation misses by up to {error} output steps (limit " \
                     f"{INTERPOLATION_LIMIT}), the function is too curved or discontinuous on this range"
    return table, ""


def lookup_table(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.per_channel or yq.per_channel:
        return "per-channel grid"
    if xq.numpy_dtype in ("int8", "uint8"):
        lo, hi = integer_range(xq.numpy_dtype)
        values = _function_values(node, np.arange(lo, hi + 1), xq)
        table = quantize_values(values, float(yq.scale[0]), int(yq.zero_point[0]), yq.numpy_dtype)
    elif xq.numpy_dtype == "int16":
        table, why = _interpolated_table(node, xq, yq)
        if table is None:
            return why
    else:
        return f"{xq.qtype} input: lookup tables cover 8-bit and int16 inputs"
    table_name = ctx.constant(f"{node.name}_table", table)
    result = ctx.emit("LookupTable", [ctx.as_int(x), table_name], name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


integer_rule(*ops_with("tabulable"))(lookup_table)   # the ops declaring the fact
