"""QuantizeLinear and DequantizeLinear: the affine mapping between real and integer tensors.

These are the explicit Q/DQ nodes of pre-quantized (QDQ) models. Scale and zero point stay IR
*inputs* (tensors, usually constants) rather than attributes, so the quantizer can read them as
the tensor's quantization parameters. Granularity follows from the scale's shape, as in ONNX:
a scalar (or one element) is per tensor, a 1-D scale runs along ``axis``, and a scale of x's rank
with ``block_size`` > 0 repeats each scale over a block of ``block_size`` elements along ``axis``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import normalize_axis
from pegasus.ops.registry import OpDef, ShapeError, register

#: Integer types a QuantizeLinear may produce (float8/int4/int2 have no pegasus dtype).
QUANTIZED_DTYPES = (DType.UINT8, DType.INT8, DType.UINT16, DType.INT16, DType.INT32)


def check_params(x: TensorType, scale: TensorType, zero_point: TensorType | None, axis: int,
                 block_size: int) -> None:
    """ShapeError unless scale (and zero point) fit x for per-tensor, per-axis or blocked use. Per tensor, each
    may be a scalar or one element (onnxruntime's quantizer writes a bias's scale as [1], its zero point as [])."""
    per_tensor = all(p.size == 1 and p.rank <= 1 for p in (scale, scale if zero_point is None else zero_point))
    per_tensor = per_tensor and not block_size
    if zero_point is not None and zero_point.shape != scale.shape and not per_tensor:
        raise ShapeError(f"zero point shape {list(zero_point.shape)} differs from scale shape "
                         f"{list(scale.shape)}")
    if block_size < 0:
        raise ShapeError(f"block_size must be >= 0, got {block_size}")
    if scale.size == 1 and scale.rank <= 1 and not block_size:
        return
    axis = normalize_axis(axis, x.rank)
    if block_size:
        want = tuple(-(-d // block_size) if i == axis else d for i, d in enumerate(x.shape))
        if scale.shape != want:
            raise ShapeError(f"blocked scale must have shape {list(want)} for x {list(x.shape)}, "
                             f"axis {axis}, block_size {block_size}; got {list(scale.shape)}")
    elif scale.shape != (x.shape[axis],):
        raise ShapeError(f"per-axis scale must have shape [{x.shape[axis]}] (x {list(x.shape)} axis {axis}), "
                         f"got {list(scale.shape)}")


def expand_param(p: np.ndarray, shape: Sequence[int], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point reshaped/repeated so that it broadcasts against a tensor of ``shape``."""
    if p.size == 1 and p.ndim <= 1 and not block_size:
        return p.reshape(())
    axis = normalize_axis(axis, len(shape))
    if block_size:
        return np.repeat(p, block_size, axis=axis).take(np.arange(shape[axis]), axis=axis)
    return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])


@dataclasses.dataclass(frozen=True)
class QuantAttrs:
    """Attributes shared by QuantizeLinear and DequantizeLinear."""

    axis: int = 1
    block_size: int = 0
    #: output dtype name when there is no zero point (else the zero point's dtype rules).
    output_dtype: str | None = None


@register
class QuantizeLinear(OpDef):
    """y = saturate(round(x / scale) + zero_point), dtype of zero_point (uint8 without one); round is half to even
    (ONNX), or half away from zero with ``rounding`` half_away (TFLite's QUANTIZE, C's round); NaN gives the
    type's minimum (onnxruntime's answer)"""

    name = "QuantizeLinear"
    num_inputs = (2, 3)
    elementwise = True

    @dataclasses.dataclass(frozen=True)
    class Attrs(QuantAttrs):
        #: dtype name the division x / scale is done in; None = the scale's dtype.
        precision: str | None = None
        #: half_even (ONNX) or half_away (ties away from zero)
        rounding: str = "half_even"

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x, scale, zero_point = (list(inputs) + [None])[:3]
        check_params(x, scale, zero_point, attrs.axis, attrs.block_size)
        if attrs.rounding not in ("half_even", "half_away"):
            raise ShapeError(f"rounding must be half_even or half_away, got {attrs.rounding}")
        dtype = zero_point.dtype if zero_point is not None else DType(attrs.output_dtype or "uint8")
        if dtype not in QUANTIZED_DTYPES:
            raise ShapeError(f"QuantizeLinear cannot produce {dtype.value}")
        if attrs.output_dtype and dtype is not DType(attrs.output_dtype):
            raise ShapeError(f"output_dtype {attrs.output_dtype} differs from the zero point's {dtype.value}")
        return [TensorType(x.shape, dtype)]

    @staticmethod
    def reference(attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, scale, zero_point = (list(inputs) + [None])[:3]
        dtype = zero_point.dtype if zero_point is not None else np.dtype(attrs.output_dtype or "uint8")
        precision = np.dtype(attrs.precision) if attrs.precision else scale.dtype
        scale = expand_param(scale, x.shape, attrs.axis, attrs.block_size).astype(precision)
        quotient = x.astype(precision) / scale
        if attrs.rounding == "half_away":
            # sign(q) * (floor(|q|) + (frac >= 0.5)): every step exact (|q| + 0.5 would round 0.49999997 up to 1)
            magnitude = np.abs(quotient)
            whole = np.floor(magnitude)
            q = (np.sign(quotient) * (whole + (magnitude - whole >= 0.5))).astype(np.float64)
        else:
            q = np.rint(quotient).astype(np.float64)
        q = np.where(np.isnan(q), -np.inf, q)  # NaN saturates to the type's minimum, as onnxruntime has it
        if zero_point is not None:
            q = q + expand_param(zero_point, x.shape, attrs.axis, attrs.block_size)
        info = np.iinfo(dtype)
        return [np.clip(q, info.min, info.max).astype(dtype)]


@register
class DequantizeLinear(OpDef):
    """y = (x - zero_point) * scale, in the scale's dtype (or ``output_dtype``)"""

    name = "DequantizeLinear"
    num_inputs = (2, 3)
    elementwise = True

    Attrs = QuantAttrs

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x, scale, zero_point = (list(inputs) + [None])[:3]
        check_params(x, scale, zero_point, attrs.axis, attrs.block_size)
        if zero_point is not None and zero_point.dtype is not x.dtype:
            raise ShapeError(f"zero point dtype {zero_point.dtype.value} differs from x dtype "
                             f"{x.dtype.value}")
        return [TensorType(x.shape, DType(attrs.output_dtype) if attrs.output_dtype else scale.dtype)]

    @staticmethod
    def reference(attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, scale, zero_point = (list(inputs) + [None])[:3]
        out = np.dtype(attrs.output_dtype) if attrs.output_dtype else scale.dtype
        q = x.astype(np.int64)
        if zero_point is not None:
            q = q - expand_param(zero_point, x.shape, attrs.axis, attrs.block_size).astype(np.int64)
        return [q.astype(out) * expand_param(scale, x.shape, attrs.axis, attrs.block_size).astype(out)]
