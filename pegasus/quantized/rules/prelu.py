"""Integer rule for PRelu: QPRelu (pegasus/ops/integer_prelu.py), the slope as an integer tensor on its own grid
(its table entry: a constant slope is quantized onto it, per tensor) and two requantisations of x - zx, one for
each sign.

- x >= zx: s_x / s_y; x < zx: s_x * s_alpha / s_y, applied to (x - zx) * (alpha - zalpha).
- ``rounding: tflite`` (a model TFLite quantized): TFLite's int8 PRELU, with both factors derived as PreluPrepare
  does (float32 products and quotients of the float32 scales, QuantizeMultiplier), so the layer is bit-exact
  with TFLite's reference kernel.
- pegasus's own rounding (asymmetric uint8, per-channel int8, dynamic fixed point): the factors in double with
  multipliers sized for the products' bits (a dynamic fixed-point table's powers of two become pure shifts).

A slope quantized per channel, or with no entry in the table, leaves the layer in float, and says why.
"""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import Multiplier, tflite_multiplier
from pegasus.quantized.context import LoweringContext, integer_rule
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.requant import requant_fields, value_bits
from pegasus.quantized.rules.common import fused_output


def tflite_prelu_multipliers(xq: TensorQuant, alpha_q: TensorQuant, yq: TensorQuant) -> tuple[Multiplier, Multiplier]:
    """PreluPrepare's two multipliers: QuantizeMultiplier of s_x / s_y and of s_x * s_alpha / s_y, each computed
    in float32 from the float32 scales (C++ float arithmetic, then widened to double)."""
    sx, sa, sy = (np.float32(q.scale[0]) for q in (xq, alpha_q, yq))
    identity = float(np.float32(sx / sy))
    below = float(np.float32(np.float32(sx * sa) / sy))
    return tflite_multiplier(identity), tflite_multiplier(below)


@integer_rule("PRelu")
def prelu(ctx: LoweringContext, node: Node) -> str | None:
    x, alpha = node.inputs
    if ctx.table.get(alpha) is None:
        return "its slope has no entry in the .quantize file (re-import or re-quantize the model)"
    xq, alpha_q = ctx.quant(x), ctx.quant(alpha)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if xq.per_channel or yq.per_channel or alpha_q.per_channel:
        return "per-channel grid (QPRelu takes per-tensor grids; its slope varies per channel in its values)"
    rounding = ctx.table.rounding
    sx, sa, sy = (float(q.scale[0]) for q in (xq, alpha_q, yq))
    identity = requant_fields([sx / sy], yq, value_bits(xq), lo, hi, rounding)
    below = requant_fields([sx * sa / sy], yq, value_bits(xq) + value_bits(alpha_q), lo, hi, rounding)
    if rounding == "tflite":
        up, down = tflite_prelu_multipliers(xq, alpha_q, yq)
        identity.update(multiplier=(up.multiplier,), shift=(up.shift,))
        below.update(multiplier=(down.multiplier,), shift=(down.shift,))
    attrs = {**identity, "x_zero_point": int(xq.zero_point[0]), "alpha_zero_point": int(alpha_q.zero_point[0]),
             "alpha_multiplier": below["multiplier"][0], "alpha_shift": below["shift"][0]}
    result = ctx.emit("QPRelu", [ctx.as_int(x), ctx.as_int(alpha)], attrs, name=node.name, outputs=[out],
                      quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None
