"""Op family: the integer kernels of quantized models.

``pegasus quantize`` gives every tensor a scale and zero point; ``pegasus.quantized.lower`` then
rewrites the float graph onto these ops, whose attributes carry everything the integer arithmetic
needs (zero points, fixed-point multipliers and shifts, clamp bounds), so the NumPy reference here
and the generated code read the same numbers and compute the same bits. The arithmetic rules are in
``pegasus.ops.fixedpoint``: 64-bit accumulation of ``(x - zx) * (w - zw)`` products, requantisation
rounded as the op's ``rounding`` attribute says (``half_up``, pegasus's own; ``tflite``/``tflite_wide``,
TFLite's reference kernels', for models quantized by TFLite), saturation to the output type (narrowed by
a fused ReLU/Clip). QAddRescaled and QReduceSum (integer_sum.py) are TFLite's ADD/SUB and MEAN structures.

Ops that only move or select values (Reshape, Transpose, MaxPool, Concat with equal parameters...)
need no integer twin: the float ops run unchanged on integer tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import broadcast_shape, normalize_axis
from pegasus.ops.conv import Conv
from pegasus.ops.fixedpoint import (
    OP_ROUNDINGS,
    channel_view,
    integer_range,
    reciprocal,
    requantize,
    rounding_divide_by_pot,
    rounding_shift,
    scale,
    srdhm,
)
from pegasus.ops.layout import channels_last_op
from pegasus.ops.linear import matmul_shape
from pegasus.ops.pool import AveragePool
from pegasus.ops.registry import OpDef, ShapeError, register
from pegasus.ops.spatial import prod, spatial_sizes, tap_counts, window, window_view

INTEGER_DTYPES = ("uint8", "int8", "uint16", "int16", "int32")


@dataclass(frozen=True)
class RequantAttrs:
    """How an integer accumulator becomes the output: multiplier/shift (one, or one per output channel;
    multiplier * 2**-shift is the real factor), the output's zero point and type, the clamp range (None =
    the type's range), and the rounding rule (``pegasus.ops.fixedpoint.OP_ROUNDINGS``)."""

    multiplier: tuple[int, ...] = (1,)
    shift: tuple[int, ...] = (0,)
    out_zero_point: int = 0
    out_dtype: str = "int8"
    lo: int | None = None
    hi: int | None = None
    rounding: str = "half_up"


def clamp_bounds(attrs: RequantAttrs) -> tuple[int, int]:
    """The effective [lo, hi] of a requantising op: its type's range narrowed by lo/hi."""
    tmin, tmax = integer_range(attrs.out_dtype)
    lo = tmin if attrs.lo is None else max(tmin, attrs.lo)
    hi = tmax if attrs.hi is None else min(tmax, attrs.hi)
    return lo, hi


def check_rounding(rounding: str) -> None:
    if rounding not in OP_ROUNDINGS:
        raise ShapeError(f"rounding must be one of {OP_ROUNDINGS}, got {rounding}")


def requant_type(attrs: RequantAttrs, shape: Sequence[int]) -> TensorType:
    """The output type of a requantising op of ``shape``, its attributes checked."""
    if attrs.out_dtype not in INTEGER_DTYPES:
        raise ShapeError(f"out_dtype must be one of {INTEGER_DTYPES}, got {attrs.out_dtype}")
    check_rounding(getattr(attrs, "rounding", "half_up"))
    if len(attrs.multiplier) != len(attrs.shift):
        raise ShapeError(f"{len(attrs.multiplier)} multipliers but {len(attrs.shift)} shifts")
    return TensorType(tuple(shape), DType(attrs.out_dtype))


def requantize_accumulator(attrs: RequantAttrs, acc: np.ndarray, axis: int) -> np.ndarray:
    """``acc`` requantised by the op's multipliers and shifts (per channel along ``axis``), clamped."""
    lo, hi = clamp_bounds(attrs)
    multiplier = channel_view(attrs.multiplier, acc.ndim, axis)
    shift = channel_view(attrs.shift, acc.ndim, axis)
    return requantize(acc, multiplier, shift, attrs.out_zero_point, lo, hi, attrs.rounding).astype(attrs.out_dtype)


def _centered(x: np.ndarray, zero_point: int) -> np.ndarray:
    """x - zero_point as float64: exact for integer sums below 2**53, which lets BLAS do the MACs."""
    return x.astype(np.float64) - float(zero_point)


def _exact_int(values: np.ndarray) -> np.ndarray:
    return np.rint(values).astype(np.int64)


def _check_bias(bias: TensorType | None, channels: int) -> None:
    if bias is not None and (bias.shape != (channels,) or bias.dtype not in (DType.INT32, DType.INT64)):
        raise ShapeError(f"bias must be int32/int64 of shape [{channels}], got {bias}")


def check_channels(attrs: RequantAttrs, channels: int) -> None:
    """One multiplier, or one per output channel."""
    if len(attrs.multiplier) not in (1, channels):
        raise ShapeError(f"{len(attrs.multiplier)} multipliers for {channels} output channels")


@register
@channels_last_op
class QConv(OpDef):
    """Y = requant(Σ (X - x_zero_point) * (W - w_zero_point) + B) per output channel (Conv geometry)."""

    name = "QConv"
    quantized_form = True
    num_inputs = (2, 3)

    @dataclass(frozen=True)
    class Attrs(Conv.Attrs, RequantAttrs):
        x_zero_point: int = 0
        w_zero_point: int = 0

    @staticmethod
    def infer(attrs, inputs):
        x, w = inputs[0], inputs[1]
        y = Conv.infer(attrs, [x, w])[0]
        _check_bias(inputs[2] if len(inputs) > 2 else None, y.shape[1])
        check_channels(attrs, y.shape[1])
        return [requant_type(attrs, y.shape)]

    @staticmethod
    def reference(attrs, inputs):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        win = Conv.geometry(attrs, x.shape, w.shape)
        acc = _exact_int(Conv.compute(_centered(x, attrs.x_zero_point), _centered(w, attrs.w_zero_point), win,
                                      attrs.group))
        if bias is not None:
            acc += bias.astype(np.int64).reshape((-1,) + (1,) * (acc.ndim - 2))
        return [requantize_accumulator(attrs, acc, 1)]


@register
class QMatMul(OpDef):
    """Y = requant((A - a_zero_point) @ (B - b_zero_point) + bias) per output column (matmul semantics)."""

    name = "QMatMul"
    quantized_form = True
    num_inputs = (2, 3)

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        a_zero_point: int = 0
        b_zero_point: int = 0

    @staticmethod
    def infer(attrs, inputs):
        a, b = inputs[0], inputs[1]
        shape = matmul_shape(a.shape, b.shape)
        columns = b.shape[-1] if b.rank > 1 else 1
        _check_bias(inputs[2] if len(inputs) > 2 else None, columns)
        check_channels(attrs, columns)
        return [requant_type(attrs, shape)]

    @staticmethod
    def reference(attrs, inputs):
        a, b = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        acc = _exact_int(np.matmul(_centered(a, attrs.a_zero_point), _centered(b, attrs.b_zero_point)))
        if bias is not None:
            acc += bias.astype(np.int64)
        return [requantize_accumulator(attrs, acc, -1)]


@register
class Requantize(OpDef):
    """Y = requant(X - in_zero_point): change of scale/zero point/type, with an optional clamp (ReLU, Clip)."""

    name = "Requantize"
    quantized_form = True
    elementwise = True

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        in_zero_point: int = 0

    @staticmethod
    def infer(attrs, inputs):
        check_channels(attrs, 1)
        return [requant_type(attrs, inputs[0].shape)]

    @staticmethod
    def reference(attrs, inputs):
        return [requantize_accumulator(attrs, inputs[0].astype(np.int64) - attrs.in_zero_point, 0)]


@register
class QAdd(OpDef):
    """Y = clamp(((A - za) * a_multiplier + (B - zb) * b_multiplier + 2**(shift-1)) >> shift) + out_zero_point),
    broadcasting; a negative b_multiplier makes it a subtraction."""

    name = "QAdd"
    quantized_form = True
    num_inputs = (2, 2)
    elementwise = True

    @dataclass(frozen=True)
    class Attrs:
        a_zero_point: int = 0
        b_zero_point: int = 0
        a_multiplier: int = 1
        b_multiplier: int = 1
        shift: int = 0
        out_zero_point: int = 0
        out_dtype: str = "int8"
        lo: int | None = None
        hi: int | None = None

    @staticmethod
    def infer(attrs, inputs):
        shape = broadcast_shape(inputs[0].shape, inputs[1].shape)
        return [requant_type(RequantAttrs(out_dtype=attrs.out_dtype), shape)]

    @staticmethod
    def reference(attrs, inputs):
        a, b = (v.astype(np.int64) for v in inputs)
        acc = (a - attrs.a_zero_point) * attrs.a_multiplier + (b - attrs.b_zero_point) * attrs.b_multiplier
        lo, hi = clamp_bounds(RequantAttrs(out_dtype=attrs.out_dtype, lo=attrs.lo, hi=attrs.hi))
        return [np.clip(rounding_shift(acc, attrs.shift) + attrs.out_zero_point, lo, hi).astype(attrs.out_dtype)]


@register
class QMul(OpDef):
    """Y = requant((A - a_zero_point) * (B - b_zero_point)), broadcasting."""

    name = "QMul"
    quantized_form = True
    num_inputs = (2, 2)
    elementwise = True

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        a_zero_point: int = 0
        b_zero_point: int = 0

    @staticmethod
    def infer(attrs, inputs):
        check_channels(attrs, 1)
        return [requant_type(attrs, broadcast_shape(inputs[0].shape, inputs[1].shape))]

    @staticmethod
    def reference(attrs, inputs):
        a, b = (v.astype(np.int64) for v in inputs)
        return [requantize_accumulator(attrs, (a - attrs.a_zero_point) * (b - attrs.b_zero_point), 0)]


@register
class LookupTable(OpDef):
    """Any element-wise function of an integer tensor, tabulated at quantize time.

    8-bit X: Y = table[X - min(X's type)], a table of 256 entries (exact to the output grid).
    int16 X: 512 linear segments of 128 levels each, ``INTERPOLATED_ENTRIES`` knots (the last at 32768):
    u = X + 32768, i = u >> 7, f = u & 127, Y = t[i] + (((t[i + 1] - t[i]) * f + 64) >> 7) (round half up,
    exact in 32 bits: the table holds values of Y's type of at most 16 bits, so Y needs no clamp)."""

    name = "LookupTable"
    quantized_form = True
    num_inputs = (2, 2)
    elementwise = True

    #: Knots of an int16 table: 512 segments of ``2 ** SEGMENT_BITS`` levels, both ends included.
    SEGMENT_BITS = 7
    INTERPOLATED_ENTRIES = (1 << (16 - SEGMENT_BITS)) + 1

    @staticmethod
    def infer(attrs, inputs):
        x, table = inputs
        if x.dtype in (DType.INT8, DType.UINT8):
            if table.shape != (256,):
                raise ShapeError(f"LookupTable of an 8-bit tensor needs 256 entries, got {list(table.shape)}")
        elif x.dtype == DType.INT16:
            if table.shape != (LookupTable.INTERPOLATED_ENTRIES,) or \
                    table.dtype not in (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16):
                raise ShapeError(f"LookupTable of an int16 tensor needs {LookupTable.INTERPOLATED_ENTRIES} knots of "
                                 f"an integer type of at most 16 bits, got {list(table.shape)} {table.dtype.value}")
        else:
            raise ShapeError(f"LookupTable indexes with an 8-bit or int16 tensor, got {x.dtype.value}")
        return [TensorType(x.shape, table.dtype)]

    @staticmethod
    def reference(attrs, inputs):
        x, table = inputs
        if x.dtype == np.int16:
            return [interpolate_table(x, table)]
        offset = integer_range(x.dtype)[0]
        return [table[x.astype(np.int64) - offset]]


def interpolate_table(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """LookupTable's int16 rule: linear interpolation between the knots, rounded half up."""
    bits = LookupTable.SEGMENT_BITS
    u = x.astype(np.int64) + 32768
    index, fraction = u >> bits, u & ((1 << bits) - 1)
    t = table.astype(np.int64)
    low = t[index]
    return (low + (((t[index + 1] - low) * fraction + (1 << (bits - 1))) >> bits)).astype(table.dtype)


@register
class QSoftmax(OpDef):
    """Softmax along ``axis``: d = max - x, e = exp(-d * s_x) in Q15 from a table, p = round(e * 2**16 / Σe)
    (Q16, integer division), Y = requant(p). 8-bit inputs: table [L <= 256] (int32 or uint16) whose last entry
    repeats for larger d, e = table[min(d, L - 1)]. int16 inputs: int32 table [2, 256] of exp(-k * s_x) and
    exp(-256 k * s_x), e = (table[1][d >> 8] * table[0][d & 255] + 2**14) >> 15.

    ``rounding`` tflite: TFLite's int8 reference SOFTMAX (gemmlowp fixed point). 8-bit inputs, an int32 table
    [256] of exp(-beta * d * s_x) in Q0.31 (0 past TFLite's diff_min); e = table[d],
    S = sum(RoundingDivideByPOT(e, 12)) (Q12.19), (r, b) = GetReciprocal(S, 12),
    Y = clamp(RoundingDivideByPOT(SRDHM(r, e), b + 23) + out_zero_point) for an 8-bit output (b + 15 for
    int16); out_zero_point is the output type's minimum, the multiplier is unused. int16 inputs (16x8 models):
    an int16 table [2, 513], the knots of two LookupTable interpolations, exp on [-10, 0] and 1 / (1 + x) on
    [0, 1]; e = exp_lut(clamp(scale(x - max, multiplier, shift) + 32767)), S = sum(e), h = clz32(S),
    r = recip_lut(clamp((((S << (h - 1)) + 2**13) >> 14) - 3 * 2**15)), Y = clamp((e * r + 2**(30 - h)) >> (31 - h),
    0, 32767)."""

    name = "QSoftmax"
    quantized_form = True
    num_inputs = (2, 2)

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        axis: int = -1

    @staticmethod
    def infer(attrs, inputs):
        x, table = inputs
        normalize_axis(attrs.axis, x.rank)
        eight_bit = (x.dtype in (DType.INT8, DType.UINT8) and table.rank == 1 and 1 <= table.shape[0] <= 256
                     and table.dtype in (DType.INT32, DType.UINT16))
        sixteen_bit = x.dtype == DType.INT16 and table.shape == (2, 256) and table.dtype == DType.INT32
        tflite_eight = eight_bit and table.shape == (256,) and table.dtype == DType.INT32
        tflite_sixteen = x.dtype == DType.INT16 and table.shape == (2, LookupTable.INTERPOLATED_ENTRIES) and \
            table.dtype == DType.INT16
        if attrs.rounding == "tflite":
            if not (tflite_eight or tflite_sixteen):
                raise ShapeError("QSoftmax with tflite rounding takes an 8-bit tensor and an int32 table [256], or "
                                 "an int16 tensor and an int16 table [2, 513]")
            return [requant_type(attrs, x.shape)]
        if not (eight_bit or sixteen_bit):
            raise ShapeError("QSoftmax takes an 8-bit tensor and an int32/uint16 table [<= 256], or an int16 tensor "
                             "and an int32 table [2, 256]")
        check_channels(attrs, 1)
        return [requant_type(attrs, x.shape)]

    @staticmethod
    def reference(attrs, inputs):
        x, table = inputs
        axis = normalize_axis(attrs.axis, x.ndim)
        x = x.astype(np.int64)
        d = np.max(x, axis=axis, keepdims=True) - x
        table = table.astype(np.int64)
        if attrs.rounding == "tflite" and table.ndim == 2:
            return [_tflite_softmax16(attrs, d, table, axis)]
        if attrs.rounding == "tflite":
            return [_tflite_softmax(attrs, table[d], axis)]
        if table.ndim == 1:
            e = table[np.minimum(d, table.shape[0] - 1)]
        else:
            e = (table[1][d >> 8] * table[0][d & 255] + 16384) >> 15
        total = np.sum(e, axis=axis, keepdims=True)
        p = (e * 65536 + total // 2) // total
        return [requantize_accumulator(attrs, p, 0)]


def _tflite_softmax(attrs, e: np.ndarray, axis: int) -> np.ndarray:
    """TFLite's reference int8 SOFTMAX from the exp values ``e`` (Q0.31) of each element (see QSoftmax)."""
    total = np.sum(rounding_divide_by_pot(e, 12), axis=axis, keepdims=True)
    scale, bits_over_unit = reciprocal(total, 12)
    exponent = bits_over_unit + 31 - 8 * np.dtype(attrs.out_dtype).itemsize
    lo, hi = clamp_bounds(attrs)
    y = rounding_divide_by_pot(srdhm(scale, e), exponent) + attrs.out_zero_point
    return np.clip(y, lo, hi).astype(attrs.out_dtype)


def _tflite_softmax16(attrs, d: np.ndarray, tables: np.ndarray, axis: int) -> np.ndarray:
    """TFLite's reference int16 SOFTMAX (SoftmaxInt16) from the distances ``d`` to the row maximum."""
    scaled = scale(-d, attrs.multiplier[0], attrs.shift[0], "tflite") + 32767
    e = interpolate_table(np.clip(scaled, -32768, 32767).astype(np.int16), tables[0]).astype(np.int64)
    total = np.sum(e, axis=axis, keepdims=True)
    bit_length = np.sum(total[..., None] >= np.left_shift(np.int64(1), np.arange(32)), axis=-1)
    headroom = 32 - bit_length
    shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
    recip = interpolate_table(np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767).astype(np.int16),
                              tables[1]).astype(np.int64)
    right = 31 - headroom
    y = (e * recip + np.left_shift(np.int64(1), right - 1)) >> right
    return np.clip(y, 0, 32767).astype(attrs.out_dtype)


@register
@channels_last_op
class QAveragePool(OpDef):
    """Y = requant(Σ (X - x_zero_point), multiplier[c - 1], shift[c - 1]) over each window (AveragePool
    geometry), c = the window's tap count (AveragePool's divisor, at least 1). The tables hold one entry per
    count c = 1..taps, multiplier[c - 1] * 2**-shift[c - 1] ≈ r / c (r = s_x / s_y): the mean is rounded
    once, onto the output grid, and nothing divides.

    ``rounding`` tflite: TFLite's AVERAGE_POOL_2D (same grid in and out): Y = clamp(round(Σ (X - x_zero_point)
    / c) + out_zero_point), an integer division rounded half away from zero; the tables are empty."""

    name = "QAveragePool"
    quantized_form = True

    @dataclass(frozen=True)
    class Attrs(AveragePool.Attrs, RequantAttrs):
        x_zero_point: int = 0

    @staticmethod
    def geometry(attrs, x_shape):
        return window(attrs, spatial_sizes(x_shape, "X"), ceil_mode=bool(attrs.ceil_mode))

    @classmethod
    def infer(cls, attrs, inputs):
        x = inputs[0]
        win = cls.geometry(attrs, x.shape)
        y = requant_type(attrs, tuple(x.shape[:2]) + win.out)
        if attrs.rounding == "tflite":
            return [y]
        if len(attrs.multiplier) != prod(win.kernel):
            raise ShapeError(f"QAveragePool needs one multiplier per tap count 1..{prod(win.kernel)}, "
                             f"got {len(attrs.multiplier)}")
        return [y]

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        win = cls.geometry(attrs, x.shape)
        n = len(win.kernel)
        sums = window_view(x.astype(np.int64) - attrs.x_zero_point, win, 0).sum(axis=tuple(range(-n, 0)))
        counts = cls.counts(attrs, x.shape)
        lo, hi = clamp_bounds(attrs)
        if attrs.rounding == "tflite":
            half = counts // 2
            mean = np.where(sums > 0, (sums + half) // counts, -((half - sums) // counts))  # C division of +-half
            return [np.clip(mean + attrs.out_zero_point, lo, hi).astype(attrs.out_dtype)]
        index = counts - 1
        multiplier, shift = np.asarray(attrs.multiplier, np.int64), np.asarray(attrs.shift, np.int64)
        return [requantize(sums, multiplier[index], shift[index], attrs.out_zero_point, lo, hi,
                           attrs.rounding).astype(attrs.out_dtype)]

    @classmethod
    def counts(cls, attrs, x_shape) -> np.ndarray:
        """The tap count of every output position (shape ``win.out``), at least 1: the tables' index + 1."""
        win = cls.geometry(attrs, x_shape)
        return np.maximum(tap_counts(win, x_shape[2:], bool(attrs.count_include_pad)), 1)

    @staticmethod
    def taps(attrs, x_shape) -> int:
        return prod(QAveragePool.geometry(attrs, x_shape).kernel)


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), kept in float32 (NaN stays NaN)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = rounded.view(np.float32).reshape(np.shape(x))
    return np.where(np.isnan(x), x, out).astype(np.float32)


@register
class BFloat16Round(OpDef):
    """Y = X rounded to bfloat16 precision (stored as float32): how qbfloat16 tensors are simulated."""

    name = "BFloat16Round"
    quantized_form = True
    elementwise = True
    inplace = True

    @staticmethod
    def infer(attrs, inputs):
        if inputs[0].dtype != DType.FLOAT32:
            raise ShapeError(f"BFloat16Round takes float32, got {inputs[0].dtype.value}")
        return [inputs[0]]

    @staticmethod
    def reference(attrs, inputs):
        return [round_to_bfloat16(inputs[0])]
