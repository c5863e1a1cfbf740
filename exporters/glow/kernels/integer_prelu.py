"""Emitter for QPRelu (pegasus/ops/integer_prelu.py): per element, c = x - zx and, by the sign of c, one of two
requantisations (requant.py's, in the op's rounding): c by the identity multiplier, or c * (alpha - zalpha) by
the slope's. The slope broadcasts to x (one per channel, usually) through ``broadcast_loop``'s strides.

Both results are computed and one selected: straight-line code, no branch on the data. The product is exact in
i32 when it is below 2**31 (an 8-bit operand times an 8/16-bit one: |c| <= 65535, |alpha - zalpha| <= 255), in
i64 otherwise, as the reference computes it in int64.
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer_elementwise import centered
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.lanes import broadcast_loop
from pegasus.exporters.glow.llvm.requant import requantize, widen
from pegasus.exporters.glow.llvm.types import I64
from pegasus.ops.integer import clamp_bounds


def _narrow_product(x_bytes: int, alpha_bytes: int) -> bool:
    """Whether (x - zx) * (alpha - zalpha) fits in i32: at most one 16-bit operand, the other 8-bit."""
    return max(x_bytes, alpha_bytes) <= 2 and x_bytes + alpha_bytes <= 3


@emitter("QPRelu")
def q_prelu(k: KernelContext) -> None:
    """y = requant(c) for c = x - zx >= 0, else requant(c * (alpha - zalpha)) by the slope's multiplier."""
    b, (x, alpha), y, a = k.builder, k.inputs, k.outputs[0], k.attrs
    lo, hi = clamp_bounds(a)
    narrow = _narrow_product(x.type.dtype.itemsize, alpha.type.dtype.itemsize)
    with broadcast_loop(b, y, [x, alpha]) as (out, fx, fa):
        c = centered(b, x, fx, a.x_zero_point)
        slope = centered(b, alpha, fa, a.alpha_zero_point)
        if narrow:
            product = b.mul(c, slope)
        else:
            product = b.mul(widen(b, c, I64, signed=True), widen(b, slope, I64, signed=True))
        up = requantize(b, c, a.multiplier[0], a.shift[0], a.out_zero_point, lo, hi, y.element, a.rounding)
        down = requantize(b, product, a.alpha_multiplier, a.alpha_shift, a.out_zero_point, lo, hi, y.element,
                          a.rounding)
        y.store(b, b.select(b.icmp_signed(">=", c, ir.Constant(c.type, 0)), up, down), out)
