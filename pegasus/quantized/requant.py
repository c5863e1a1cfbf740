"""Requantisation attributes from real factors: the multipliers, shifts, output grid and clamp of an op that
rescales integers from one grid to another. The lowering context inserts Requantize with them and every
integer rule builds its requantising ops' attributes with them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pegasus.ops.fixedpoint import bits_needed, integer_range, quantize_multipliers
from pegasus.quantized.params import TensorQuant


def requant_fields(reals: Sequence[float] | np.ndarray, out: TensorQuant, acc_bits: int,
                   lo: int | None = None, hi: int | None = None, rounding: str = "half_up") -> dict:
    """Attributes of a requantising op: one multiplier/shift per real factor, the output grid, the clamp, the
    rounding (its multipliers are derived as that rounding's arithmetic does, pegasus.ops.fixedpoint)."""
    multiplier, shift = quantize_multipliers(np.asarray(reals, dtype=np.float64), acc_bits, rounding)
    return {"multiplier": multiplier, "shift": shift, "out_zero_point": int(out.zero_point[0]),
            "out_dtype": out.numpy_dtype, "lo": lo, "hi": hi, "rounding": rounding}


def value_bits(q: TensorQuant) -> int:
    """Bits of |x - zero_point| for a tensor on grid ``q`` (signed)."""
    tmin, tmax = integer_range(q.numpy_dtype)
    return bits_needed(tmax - tmin)


def requantize_attrs(src: TensorQuant, dst: TensorQuant, lo: int | None = None, hi: int | None = None,
                     rounding: str = "half_up") -> dict:
    """Requantize from ``src``'s grid to ``dst``'s (both per tensor); the factor s_src / s_dst in double, as
    TFLite's QUANTIZE (int -> int) computes it."""
    fields = requant_fields([float(src.scale[0]) / float(dst.scale[0])], dst, value_bits(src), lo, hi, rounding)
    return {**fields, "in_zero_point": int(src.zero_point[0])}
