"""Op family: the integer PReLU of quantized models (QPRelu).

A PReLU's slope is a tensor (one value per channel, usually), so no 256-entry table of the input holds it: the
slope is an integer tensor on its own grid and each element takes one of two requantisations, chosen by the sign
of x - zx. This is TFLite's int8 PRELU (its reference kernel and PreluPrepare: ``output_multiplier_1`` =
s_x / s_y for x >= zx, ``output_multiplier_2`` = s_x * s_alpha / s_y applied to (x - zx) * (alpha - zalpha)
below it), and pegasus's own PReLU for the models it quantizes (the same structure, its own rounding).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pegasus.ops.common import broadcast_shape
from pegasus.ops.integer import RequantAttrs, check_channels, requant_type, requantize_accumulator
from pegasus.ops.registry import OpDef, ShapeError, register


@register
class QPRelu(OpDef):
    """Y = requant(X - x_zero_point) by multiplier/shift where X >= x_zero_point, else
    requant((X - x_zero_point) * (ALPHA - alpha_zero_point)) by alpha_multiplier/alpha_shift; ALPHA (the slope on
    its integer grid) broadcasts to X one way; zero point, clamp and rounding as every requantising op."""

    name = "QPRelu"
    quantized_form = True
    num_inputs = (2, 2)
    elementwise = True

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        x_zero_point: int = 0
        alpha_zero_point: int = 0
        alpha_multiplier: int = 1
        alpha_shift: int = 0

    @staticmethod
    def infer(attrs, inputs):
        x, alpha = inputs
        check_channels(attrs, 1)
        if not x.dtype.is_integer or not alpha.dtype.is_integer:
            raise ShapeError(f"QPRelu takes integer tensors, got {x.dtype.value} and {alpha.dtype.value}")
        if broadcast_shape(x.shape, alpha.shape) != tuple(x.shape):
            raise ShapeError(f"slope {list(alpha.shape)} does not broadcast to x {list(x.shape)}")
        return [requant_type(attrs, x.shape)]

    @staticmethod
    def reference(attrs, inputs):
        x, alpha = inputs
        centred = x.astype(np.int64) - attrs.x_zero_point
        product = centred * (alpha.astype(np.int64) - attrs.alpha_zero_point)
        up = requantize_accumulator(attrs, centred, 0)
        below = replace(attrs, multiplier=(attrs.alpha_multiplier,), shift=(attrs.alpha_shift,))
        down = requantize_accumulator(below, product, 0)
        return [np.where(centred >= 0, up, down)]
