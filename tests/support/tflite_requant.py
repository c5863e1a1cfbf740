"""TFLite's requantisation written out as C computes it (SRDHM, RoundingDivideByPOT) and the requantisation
parameters of a TFLite-rounding layer: the integer tests' reference for ``rounding: tflite``."""

from __future__ import annotations

from pegasus.ops.fixedpoint import quantize_multiplier

INT32_MIN = -(1 << 31)


def rq(real: float, out_dtype: str = "int8", zero_point: int = 0, rounding: str = "tflite", **extra) -> dict:
    m = quantize_multiplier(real, rounding=rounding)
    return {"multiplier": (m.multiplier,), "shift": (m.shift,), "out_zero_point": zero_point,
            "out_dtype": out_dtype, "rounding": rounding, **extra}


def srdhm_c(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul as C computes it."""
    if a == b == INT32_MIN:
        return (1 << 31) - 1
    product = a * b
    nudge = (1 << 30) if product >= 0 else 1 - (1 << 30)
    total = product + nudge
    return abs(total) // (1 << 31) * (1 if total >= 0 else -1)


def rdbp_c(x: int, exponent: int) -> int:
    """RoundingDivideByPOT: to nearest, ties away from zero."""
    if exponent == 0:
        return x
    q, r = divmod(abs(x), 1 << exponent)
    return (q + (r >= 1 << (exponent - 1))) * (1 if x >= 0 else -1)


def tflite_requant(acc: int, m: int, s: int) -> int:
    t = 31 - s
    return rdbp_c(srdhm_c(acc * (1 << max(t, 0)), m), max(-t, 0))
