"""Op family: integer sums whose structure comes from TFLite's int8 kernels (ADD/SUB, MEAN).

TFLite's ADD does not add on a common accumulator grid as QAdd does: it first moves each operand onto a
fine grid of its own multiplier (``left_shift`` bits of headroom, each operand scaled by its scale over twice
the larger one), adds, then requantises the sum, with three roundings on the way. Its MEAN requantises the
window sum with a multiplier that has 1/count folded in. A model quantized by TFLite reproduces its
reference kernels bit for bit only with these structures, so they are registry ops of their own; their
rounding is the op's ``rounding`` attribute, as for every integer op (pegasus.ops.fixedpoint).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pegasus.ops.common import broadcast_shape, normalize_axes
from pegasus.ops.fixedpoint import scale
from pegasus.ops.integer import RequantAttrs, check_channels, requant_type, requantize_accumulator
from pegasus.ops.reduce import reduced_shape
from pegasus.ops.registry import OpDef, register


@register
class QAddRescaled(OpDef):
    """Y = requant(A' + B') (A' - B' when ``subtract``), broadcasting, with
    A' = scale((A - a_zero_point) * 2**left_shift, a_multiplier, a_shift) and B' likewise: each operand on a
    grid 2**left_shift times finer than twice the larger input scale, the sum requantised by multiplier/shift
    (TFLite's ADD and SUB: left_shift 20 for 8-bit operands, 15 for int16). ``scale`` rounds as ``rounding``
    says, three times."""

    name = "QAddRescaled"
    quantized_form = True
    num_inputs = (2, 2)
    elementwise = True
    inplace = True   # Y may take A's bytes when A dies here: each element of A is read before Y's is written

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        a_zero_point: int = 0
        b_zero_point: int = 0
        left_shift: int = 20
        a_multiplier: int = 1
        a_shift: int = 0
        b_multiplier: int = 1
        b_shift: int = 0
        subtract: bool = False

    @staticmethod
    def infer(attrs, inputs):
        check_channels(attrs, 1)
        return [requant_type(attrs, broadcast_shape(inputs[0].shape, inputs[1].shape))]

    @staticmethod
    def reference(attrs, inputs):
        a, b = (v.astype(np.int64) for v in inputs)
        a = scale((a - attrs.a_zero_point) << attrs.left_shift, attrs.a_multiplier, attrs.a_shift, attrs.rounding)
        b = scale((b - attrs.b_zero_point) << attrs.left_shift, attrs.b_multiplier, attrs.b_shift, attrs.rounding)
        return [requantize_accumulator(attrs, a - b if attrs.subtract else a + b, 0)]


@register
class QReduceSum(OpDef):
    """Y = requant(Σ (X - x_zero_point) over ``axes``) (empty axes: all), ``keepdims`` as ReduceSum: a sum, or a
    mean with 1/count in the multiplier (TFLite's MEAN)."""

    name = "QReduceSum"
    quantized_form = True

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        axes: tuple[int, ...] = ()
        keepdims: bool = True
        x_zero_point: int = 0

    @staticmethod
    def _axes(attrs, rank: int) -> tuple[int, ...]:
        return tuple(sorted(set(normalize_axes(attrs.axes, rank)))) if attrs.axes else tuple(range(rank))

    @classmethod
    def infer(cls, attrs, inputs):
        x = inputs[0]
        check_channels(attrs, 1)
        shape = reduced_shape(x.shape, cls._axes(attrs, x.rank), attrs.keepdims)
        return [requant_type(attrs, shape)]

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        axes = cls._axes(attrs, x.ndim)
        total = np.sum(x.astype(np.int64) - attrs.x_zero_point, axis=axes, keepdims=attrs.keepdims)
        return [requantize_accumulator(attrs, total, 0)]

