"""Op family: TFLite's integer RESIZE_BILINEAR (int8, int16), as its reference kernel computes it.

Why. The registry's Resize interpolates real values; on a quantized model it ran in float between a
dequantize and a quantize, which lands a level away from TFLite's kernel now and then (int8 UNets, FPN and
segmentation heads: 1 LSB at the resize, a few LSB at the output) and puts float code into a Cortex-M int8
bundle. TFLite's kernel works on the integers themselves: source coordinates in 10-bit fixed point (the
scale ``(1024 in + out / 2) / out``, or ``(1024 (in - 1) + (out - 1) / 2) / (out - 1)`` with align_corners;
half-pixel centres add ``scale / 2 - 512``), the two neighbours ``lo = max(v / 1024, 0)`` and ``hi =
min((v + 1023) / 1024, in - 1)`` (C division), the weight ``f = v - 1024 lo``, and per output

    acc = x[y0, x0] (1024 - fy)(1024 - fx) + x[y1, x0] fy (1024 - fx) + x[y0, x1] (1024 - fy) fx + x[y1, x1] fy fx
    y = (acc ± 2**19) / 2**20    (C division: half away from zero; ± the sign of acc)

on the raw integers (input and output share their grid), so a model TFLite quantized is reproduced bit for bit
only with this structure: a registry op of its own, whose rule is pegasus/quantized/rules/tflite.py's.
Activations are NHWC, as TFLite's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import OpDef, ShapeError, register

#: Fraction bits of the source coordinates.
FRACTION = 10


def c_divide(a: np.ndarray, b: int) -> np.ndarray:
    """C's integer division (toward zero) of int64 ``a`` by a positive ``b``."""
    return np.where(a < 0, -((-a) // b), a // b)


def bilinear_taps(in_size: int, out_size: int, align_corners: bool,
                  half_pixel_centers: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output position along one axis: the lower and upper source index and the upper one's weight
    (of 1024), as TFLite's ComputeInterpolationValues computes them (module docstring)."""
    one = 1 << FRACTION
    if align_corners and out_size > 1:
        scale = (one * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = (one * in_size + out_size // 2) // out_size
    scaled = np.arange(out_size, dtype=np.int64) * scale + (scale // 2 - one // 2 if half_pixel_centers else 0)
    lower = np.maximum(c_divide(scaled, one), 0)
    upper = np.minimum(c_divide(scaled + one - 1, one), in_size - 1)
    return lower, upper, scaled - one * lower


@register
class QResizeBilinear(OpDef):
    """Y (N, sizes..., C) = TFLite's integer bilinear resize of X (N, H, W, C), int8 or int16 (module docstring)."""

    name = "QResizeBilinear"
    quantized_form = True
    num_inputs = (1, 1)

    @dataclass(frozen=True)
    class Attrs:
        sizes: tuple[int, ...] = ()          # (height, width) of the output
        align_corners: bool = False
        half_pixel_centers: bool = False

    @staticmethod
    def infer(attrs, inputs):
        x = inputs[0]
        if x.rank != 4 or x.dtype.numpy not in (np.int8, np.int16) or len(attrs.sizes) != 2 or min(attrs.sizes) < 1:
            raise ShapeError(f"QResizeBilinear takes an NHWC int8/int16 tensor and two positive sizes, got "
                             f"{list(x.shape)} {x.dtype.value} and sizes {list(attrs.sizes)}")
        return [TensorType((x.shape[0], *attrs.sizes, x.shape[3]), x.dtype)]

    @staticmethod
    def reference(attrs, inputs):
        x = inputs[0].astype(np.int64)
        one = 1 << FRACTION
        y0, y1, fy = bilinear_taps(x.shape[1], attrs.sizes[0], attrs.align_corners, attrs.half_pixel_centers)
        x0, x1, fx = bilinear_taps(x.shape[2], attrs.sizes[1], attrs.align_corners, attrs.half_pixel_centers)
        fy, fx = fy[None, :, None, None], fx[None, None, :, None]
        top, bottom = x[:, y0], x[:, y1]
        acc = (top[:, :, x0] * (one - fy) * (one - fx) + bottom[:, :, x0] * fy * (one - fx)
               + top[:, :, x1] * (one - fy) * fx + bottom[:, :, x1] * fy * fx)
        half = 1 << (2 * FRACTION - 1)
        return [c_divide(acc + np.where(acc > 0, half, -half), 1 << 2 * FRACTION).astype(inputs[0].dtype)]
