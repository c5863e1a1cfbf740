"""Integer rule for Softmax: QSoftmax with a table of exp(-d * s_x) in Q15 (d = max - x along the axis;
for 8-bit inputs up to 256 uint16 entries, cut after the first zero; for int16 two levels of 256), an
integer division for the probabilities (Q16) and a requantisation to the output grid."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Node
from pegasus.quantized.context import LoweringContext, integer_rule
from pegasus.quantized.requant import requant_fields


@integer_rule("Softmax")
def softmax(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.numpy_dtype not in ("int8", "uint8", "int16"):
        return f"{xq.qtype} input: exp tables cover 8- and 16-bit inputs"
    distances = np.arange(256, dtype=np.float64)
    scale = float(xq.scale[0])
    table = np.rint(np.exp(-distances * scale) * 32768.0).astype(np.int32)
    if xq.numpy_dtype == "int16":
        table = np.stack([table, np.rint(np.exp(-distances * 256 * scale) * 32768.0).astype(np.int32)])
    else:  # Q15 fits uint16; entries past the first zero are all zero: keep one
        zeros = np.flatnonzero(table == 0)
        table = table[: zeros[0] + 1 if zeros.size else 256].astype(np.uint16)
    attrs = {**requant_fields([2.0 ** -16 / float(yq.scale[0])], yq, 18, rounding=ctx.table.rounding),
             "axis": node.attrs.axis}
    result = ctx.emit("QSoftmax", [ctx.as_int(x), ctx.constant(f"{node.name}_exp_table", table)], attrs,
                      name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None
