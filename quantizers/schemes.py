"""Quantization schemes: from a tensor's calibrated range (or a weight's values) to its grid.

| --quantizer                 | --qtype         | activations                      | weights                       |
|-----------------------------|-----------------|----------------------------------|-------------------------------|
| asymmetric_affine           | uint8 (default) | scale=(max-min)/255, zp 0..255   | same, per tensor              |
| asymmetric_affine           | int8            | scale=(max-min)/255, zp -128..127| same, per tensor              |
| dynamic_fixed_point         | int8, int16     | scale=2**-fl, zp 0               | same                          |
| perchannel_symmetric_affine | int8            | asymmetric int8 per tensor       | symmetric int8 per out channel|
| symmetric_affine            | int8            | scale=max(-min/128, max/127), zp 0 | same, per tensor            |
| symmetric_affine            | uint8           | min >= 0: uint8, scale=max/255, zp 0; else as int8 | same         |
| qbfloat16                   | bfloat16        | bfloat16 (float inside)          | bfloat16                      |

Ranges are nudged to contain 0 so that zero (padding, ReLU) is exact. For dynamic fixed point the
fractional length is ``fl = bits - 1 - int_bits`` with ``int_bits = floor(log2(max|x|)) + 1``, one
less when max|x| would round onto the last level: the largest magnitude fits without saturating.
Biases are int32 at ``s_in * s_w`` (zero point 0), or (``build_table(int8_bias=True)``, Glow's
``-quantization-precision-bias=Int8``) 8-bit on their own grid of the layer's scheme; the lowering then derives
the int32 accumulator bias as Glow's CPU backend does when its kernels run.

``symmetric_affine`` is Glow's ``symmetric`` schema (its ``chooseQuantizationParams``): the range, extended to
hold 0, is widened on the side that saturates later so that zero point 0 maps it onto -128..127, i.e.
``scale = max(-min/128, max/127)`` (an all-zero range: 0.1). Its ``uint8`` variant is Glow's
``symmetric_with_uint8``: a non-negative range is uint8 with zero point 0 (Glow: int8 with offset -128, the same
real values), any other range is symmetric int8.

Every scale has a floor. No scale is below ``SCALE_FLOOR`` (float32's smallest normal number: the bundles hold
scales as float32). A per-channel weight channel that is zero at the tensor's float32 precision (largest
magnitude below ``DEAD_CHANNEL`` times the tensor's largest, e.g. a dead channel that BatchNormalization folding
left at 1e-30) gets the tensor's largest channel scale, as an all-zero channel does: its weights quantize to
0 and its bias is held on a grid as fine as every other channel's, so the channel outputs its bias. (Its own
scale, ~1e-32, would put the bias at ~1e32 integer steps.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pegasus.errors import PegasusError
from pegasus.quantized.params import TensorQuant

#: quantizer → accepted qtype spellings → canonical qtype
VALID = {
    "asymmetric_affine": {"uint8": "u8", "int8": "i8"},
    "dynamic_fixed_point": {"int8": "i8", "int16": "i16"},
    "perchannel_symmetric_affine": {"int8": "i8"},
    "qbfloat16": {"bfloat16": "bf16", "qbfloat16": "bf16"},
    "symmetric_affine": {"int8": "i8", "uint8": "u8"},
}
QTYPE_ALIASES = {"u8": "uint8", "i8": "int8", "i16": "int16", "bf16": "bfloat16", "float16": "bfloat16"}
#: The smallest scale of any grid: float32's smallest normal number.
SCALE_FLOOR = float(np.finfo(np.float32).tiny)
#: The largest fractional length of dynamic fixed point: 2**-126 == SCALE_FLOOR.
MAX_FL = 126
#: A weight channel whose largest magnitude is below this fraction of the tensor's largest is zero at float32
#: precision (2**-24: float32's relative rounding step).
DEAD_CHANNEL = 2.0 ** -24


def check_pair(quantizer: str, qtype: str) -> str:
    """The canonical qtype of a valid quantizer/qtype pair; a clear error naming valid pairs otherwise."""
    pairs = ", ".join(f"{q}-{t}" for q, types in VALID.items() for t in types if t != "qbfloat16")
    if quantizer not in VALID:
        raise PegasusError(f"unknown quantizer '{quantizer}' (valid: {', '.join(VALID)})")
    types = VALID[quantizer]
    spelled = QTYPE_ALIASES.get(qtype, qtype)
    if spelled not in types:
        raise PegasusError(f"--quantizer {quantizer} does not take --qtype {qtype}; valid pairs: {pairs}")
    return types[spelled]


@dataclass(frozen=True)
class Scheme:
    """A quantizer with its qtype: how activations and weights of one precision are quantized."""

    quantizer: str
    qtype: str  # canonical: u8 i8 i16 bf16

    @classmethod
    def of(cls, quantizer: str, qtype: str) -> Scheme:
        return cls(quantizer, check_pair(quantizer, qtype))

    @classmethod
    def parse_custom(cls, text: str) -> Scheme | None:
        """A customized_quantize_layers value: float32 (None) or dynamic_fixed_point-i16."""
        if text == "float32":
            return None
        if text in ("dynamic_fixed_point-i16", "dynamic_fixed_point-16", "dynamic_fixed_point-int16"):
            return cls("dynamic_fixed_point", "i16")
        raise ValueError(text)

    @property
    def is_float(self) -> bool:
        return self.qtype == "bf16"

    @property
    def bits(self) -> int:
        return {"u8": 8, "i8": 8, "i16": 16, "bf16": 16}[self.qtype]

    # ---- activations (and constants used as activations) ---------------------------------------------
    def activation(self, lo: float, hi: float) -> TensorQuant:
        if self.is_float:
            return TensorQuant("bf16", "qbfloat16", "layer", [lo], [hi])
        if self.quantizer == "dynamic_fixed_point":
            return dynamic_fixed_point(lo, hi, self.qtype, self.bits)
        if self.quantizer == "symmetric_affine":
            return symmetric(lo, hi, unsigned=self.qtype == "u8")
        qtype = "i8" if self.quantizer == "perchannel_symmetric_affine" else self.qtype
        return asymmetric(lo, hi, qtype)

    # ---- weights -----------------------------------------------------------------------------------
    def weight(self, values: np.ndarray, channel_axis: int | None) -> TensorQuant:
        values = np.asarray(values, dtype=np.float64)
        values = np.where(np.isfinite(values), values, 0.0)  # ±inf (masks) saturate to the grid's ends
        lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        if self.quantizer == "perchannel_symmetric_affine" and channel_axis is not None and values.ndim:
            axes = tuple(i for i in range(values.ndim) if i != channel_axis % values.ndim)
            return symmetric_per_channel(values.min(axis=axes), values.max(axis=axes), channel_axis % values.ndim)
        return self.activation(lo, hi)


def _nudged(lo: float, hi: float) -> tuple[float, float]:
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise PegasusError(f"calibration range [{lo}, {hi}] is not finite (does the model overflow on the data?)")
    return lo, hi


def asymmetric(lo: float, hi: float, qtype: str) -> TensorQuant:
    """scale = (max - min) / 255, zero point such that real 0 is exactly representable."""
    lo, hi = _nudged(lo, hi)
    qmin, qmax = (0, 255) if qtype == "u8" else (-128, 127)
    scale = max((hi - lo) / 255.0, SCALE_FLOOR) if hi > lo else 1.0
    zero = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return TensorQuant(qtype, "asymmetric_quantized", "layer", [lo], [hi], [scale], [zero])


def symmetric(lo: float, hi: float, unsigned: bool = False) -> TensorQuant:
    """Zero point 0, scale = max(-min/128, max/127) (Glow's symmetric int8); with ``unsigned`` a range with
    min >= 0 is uint8 at scale max/255 (Glow's symmetric_with_uint8). An all-zero range takes Glow's scale 0.1."""
    lo, hi = _nudged(lo, hi)
    if unsigned and lo >= 0:
        scale = hi / 255.0
        qtype = "u8"
    else:
        scale = max(-lo / 128.0, hi / 127.0)
        qtype = "i8"
    scale = max(scale, SCALE_FLOOR) if scale > 0 else 0.1
    return TensorQuant(qtype, "symmetric_quantized", "layer", [lo], [hi], [scale], [0])


def dynamic_fixed_point(lo: float, hi: float, qtype: str, bits: int) -> TensorQuant:
    """Power-of-two scale 2**-fl with the integer part wide enough for max|x|."""
    lo, hi = _nudged(lo, hi)
    top = max(abs(lo), abs(hi))
    int_bits = math.floor(math.log2(top)) + 1 if top > 0 else 0
    fl = bits - 1 - int_bits
    if top * 2.0 ** fl >= 2 ** (bits - 1) - 0.5:  # max|x| would round up onto the saturated level
        fl -= 1
    fl = min(fl, MAX_FL)
    return TensorQuant(qtype, "dynamic_fixed_point", "layer", [lo], [hi], [2.0 ** -fl], [0], fl=fl)


def symmetric_per_channel(lo: np.ndarray, hi: np.ndarray, axis: int) -> TensorQuant:
    """Per output channel: scale_c = max|w_c| / 127, zero point 0 (int8 in -127..127); a channel that is zero at
    float32 precision takes the largest channel's scale (an all-zero tensor: 1)."""
    top = np.maximum(np.abs(lo), np.abs(hi)).astype(np.float64)
    largest = float(top.max(initial=0.0))
    scale = np.where(top > largest * DEAD_CHANNEL, top / 127.0, largest / 127.0 if largest > 0 else 1.0)
    scale = np.maximum(scale, SCALE_FLOOR)
    return TensorQuant("i8", "symmetric_quantized", "channel", [float(v) for v in np.minimum(lo, 0)],
                       [float(v) for v in np.maximum(hi, 0)], [float(s) for s in scale], [0] * len(scale), axis=axis)


def bias(values: np.ndarray, input_scale: float, weight_scales: np.ndarray) -> TensorQuant:
    """int32 at s_in * s_w (per channel when the weights are), zero point 0."""
    scales = input_scale * np.asarray(weight_scales, dtype=np.float64).reshape(-1)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    per_channel = scales.size > 1
    return TensorQuant("i32", "symmetric_quantized" if per_channel else "asymmetric_quantized",
                       "channel" if per_channel else "layer", [float(values.min(initial=0))],
                       [float(values.max(initial=0))], [float(s) for s in scales], [0] * scales.size,
                       axis=0 if per_channel else None)
