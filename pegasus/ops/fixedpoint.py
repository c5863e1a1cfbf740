"""The integer arithmetic every quantized kernel shares, written once so that the NumPy reference
(``pegasus inference --dtype quantized``) and the generated code compute the same bits.

A real factor ``r`` (e.g. ``s_in * s_w / s_out``) is applied to an integer accumulator as a
fixed-point multiplier ``M`` and a right shift ``S``: ``r ≈ M * 2**-S`` with ``M`` a positive integer of
at most 31 bits (fewer when the accumulator is wide, so that ``acc * M`` always fits in 64 bits).
Powers of two become ``M = 1`` — dynamic fixed point is a pure shift.

Requantisation (the one rounding rule, "round half up"; ``>>`` is an arithmetic shift = floor)::

    y = clamp(((acc * M + 2**(S-1)) >> S) + zero_point, lo, hi)        (S >= 1)
    y = clamp(acc * M + zero_point, lo, hi)                            (S == 0)

computed in 64-bit integers. ``lo``/``hi`` are the output type's range, narrowed by a fused
ReLU/ReLU6/Clip. Quantizing a real value to a tensor's grid (weights, tables, graph inputs) uses
round-half-to-even as ONNX QuantizeLinear does: ``clamp(rint(x / scale) + zero_point, lo, hi)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Largest right shift a multiplier may use (the accumulator product is at most 63 bits).
MAX_SHIFT = 62
#: Largest multiplier width: M fits a signed 32-bit register (ARM SMULL operand).
MAX_MULTIPLIER_BITS = 31


def integer_range(dtype: str | np.dtype) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


@dataclass(frozen=True)
class Multiplier:
    """``r ≈ multiplier * 2**-shift``."""

    multiplier: int
    shift: int

    @property
    def value(self) -> float:
        return self.multiplier * 2.0 ** -self.shift


def quantize_multiplier(real: float, acc_bits: int = 32) -> Multiplier:
    """The closest ``M * 2**-S`` to ``real`` with ``M`` of at most ``min(31, 63 - acc_bits)`` bits.

    ``acc_bits`` bounds the accumulator's magnitude (|acc| < 2**(acc_bits - 1)), so ``acc * M`` never
    overflows 64 bits. Powers of two give ``M = 1``; a factor too small to matter gives ``M = 0``.
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantisation factor must be finite and >= 0, got {real}")
    if real == 0:
        return Multiplier(0, 0)
    bits = max(1, min(MAX_MULTIPLIER_BITS, 63 - acc_bits))
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2**exponent, mantissa in [0.5, 1)
    multiplier = round(mantissa * (1 << bits))
    shift = bits - exponent
    if multiplier == 1 << bits:  # rounding carried into the next power of two
        multiplier >>= 1
        shift -= 1
    while multiplier and multiplier % 2 == 0 and shift > 0:  # strip trailing zeros: 2**-k becomes (1, k)
        multiplier >>= 1
        shift -= 1
    if shift < 0:
        raise ValueError(f"requantisation factor {real} is too large (needs a left shift)")
    if shift > MAX_SHIFT:
        drop = shift - MAX_SHIFT
        multiplier = (multiplier + (1 << (drop - 1))) >> drop
        shift = MAX_SHIFT
    if multiplier == 0:
        return Multiplier(0, 0)
    return Multiplier(int(multiplier), int(shift))


def quantize_multipliers(reals: np.ndarray | list[float],
                         acc_bits: int = 32) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-channel multipliers and shifts as two tuples (what integer ops carry as attributes)."""
    pairs = [quantize_multiplier(float(r), acc_bits) for r in np.ravel(reals)]
    return tuple(p.multiplier for p in pairs), tuple(p.shift for p in pairs)


def rounding_shift(values: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """``(v + 2**(S-1)) >> S`` for S >= 1, ``v`` for S == 0, on int64 (round half up)."""
    values = np.asarray(values, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    half = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return np.right_shift(values + half, shift)


def requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int, zero_point: int,
               lo: int, hi: int) -> np.ndarray:
    """The requantisation rule above on an int64 accumulator; per-channel parameters broadcast."""
    acc = np.asarray(acc, dtype=np.int64)
    scaled = rounding_shift(acc * np.asarray(multiplier, dtype=np.int64), shift)
    return np.clip(scaled + np.int64(zero_point), lo, hi)


def channel_view(values: tuple[int, ...], rank: int, axis: int) -> np.ndarray:
    """Per-channel parameters shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    array = np.asarray(values, dtype=np.int64)
    if array.size == 1:
        return array.reshape(())
    return array.reshape([-1 if i == axis % rank else 1 for i in range(rank)])


def quantize_values(x: np.ndarray, scale: np.ndarray | float, zero_point: np.ndarray | int, dtype: str) -> np.ndarray:
    """Real values onto an integer grid: clamp(rint(x / scale) + zp), round half to even (ONNX's rule)."""
    lo, hi = integer_range(dtype)
    q = np.rint(np.asarray(x, dtype=np.float64) / np.asarray(scale, dtype=np.float64)) + np.asarray(zero_point)
    return np.clip(q, lo, hi).astype(dtype)


def dequantize_values(q: np.ndarray, scale: np.ndarray | float, zero_point: np.ndarray | int) -> np.ndarray:
    """Integers back to reals: (q - zp) * scale, in float32 as the bundles compute it."""
    diff = (np.asarray(q, dtype=np.int64) - np.asarray(zero_point, dtype=np.int64)).astype(np.float32)
    return diff * np.asarray(scale, dtype=np.float32)


def bits_needed(magnitude: float) -> int:
    """Bits of a signed integer holding values of absolute value up to ``magnitude``."""
    return max(1, math.ceil(math.log2(magnitude + 1))) + 1
