"""Emitters for TFLite's int16 element-wise kernels (pegasus/ops/integer_lut.py).

QSigmoid16 (LOGISTIC, TANH): the input rescaled by an integer multiplier and a rounding shift, then linear
interpolation between two knots of the 256-entry sigmoid table on the magnitude, mirrored for negative inputs.
Every step is the NumPy reference's, in i32: |x * multiplier| < 2**30, the rounding term at most 2**30, and an
interpolated value below 2**25. QLeakyRelu (LEAKY_RELU): two requantisations of x - zx (requant.py's, in the
op's rounding), one chosen by the sign.
"""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_elementwise import centered
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.convert import load_as
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.exporters.glow.llvm.requant import requantize
from pegasus.ir.dtypes import DType
from pegasus.ops.integer import clamp_bounds
from pegasus.ops.integer_lut import KNOTS


@emitter("QSigmoid16")
def sigmoid16(k: KernelContext) -> None:
    b, (x, table), y, attrs = k.builder, k.inputs, k.outputs[0], k.attrs
    shift = attrs.left_shift
    bits = 8 if attrs.tanh else 9
    saturated = (0xFFFF << 8) if attrs.tanh else (0x7FFF << 10)
    with for_range(b, y.type.size) as n:
        scaled = b.mul(load_as(b, x, n, DType.INT32), const(attrs.multiplier))
        v = b.ashr(b.add(scaled, const(1 << (shift - 1))), const(shift)) if shift else scaled
        negative = b.icmp_signed("<", v, const(0))
        a = b.select(negative, b.neg(v), v)
        index = b.lshr(a, const(bits))
        inside = b.icmp_unsigned("<", index, const(KNOTS - 1))
        safe = b.select(inside, index, const(0))
        low = load_as(b, table, safe, DType.INT32)
        high = load_as(b, table, b.add(safe, const(1)), DType.INT32)
        step = b.mul(b.and_(a, const((1 << bits) - 1)), b.sub(high, low))
        r = b.select(inside, b.add(b.shl(low, const(bits)), step), const(saturated))
        if attrs.tanh:
            up = b.add(r, const(-(1 << 23) + (1 << 7)))
            down = b.sub(const((1 << 23) + (1 << 7) - 1), r)
            value = b.ashr(b.select(negative, down, up), const(8))
        else:
            up = b.add(r, const(1 << 9))
            down = b.sub(const((1 << 25) + (1 << 9) - 1), r)
            value = b.ashr(b.select(negative, down, up), const(10))
        y.store(b, b.trunc(value, y.element), n)


@emitter("QLeakyRelu")
def leaky_relu(k: KernelContext) -> None:
    b, x, y, a = k.builder, k.inputs[0], k.outputs[0], k.attrs
    lo, hi = clamp_bounds(a)
    with for_range(b, y.type.size) as n:
        c = centered(b, x, n, a.x_zero_point)
        up = requantize(b, c, a.multiplier[0], a.shift[0], a.out_zero_point, lo, hi, y.element, a.rounding)
        down = requantize(b, c, a.alpha_multiplier, a.alpha_shift, a.out_zero_point, lo, hi, y.element, a.rounding)
        y.store(b, b.select(b.icmp_signed(">=", c, ir.Constant(c.type, 0)), up, down), n)
