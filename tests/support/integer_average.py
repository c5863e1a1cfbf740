"""QAveragePool cases (the integer elementwise tests), reused by the channels-last integer tests."""

from __future__ import annotations

import math

import numpy as np

from pegasus.ops.fixedpoint import bits_needed, quantize_multiplier
from tests.support.bundle_cases import Case

RNG = np.random.default_rng(23)


def ints(shape, dtype: str, low: int | None = None, high: int | None = None) -> np.ndarray:
    """Random values over the type's range (or [low, high]); the first two are the type's extremes."""
    info = np.iinfo(dtype)
    values = RNG.integers(info.min if low is None else low, info.max if high is None else high, shape,
                          endpoint=True).astype(dtype)
    if low is None and high is None and values.size >= 2:
        values.flat[:2] = info.min, info.max
    return values


def qavg(id_: str, x: np.ndarray, real: float, zero_point: int, out_dtype: str, out_zero_point: int = 0,
         **window) -> Case:
    """A QAveragePool as the Average rule makes it: for c = 1..taps, entry c - 1 requantises a window of c
    taps by real / c, with the window sum's bits (taps * max|x - zero_point|)."""
    taps = math.prod(window["kernel_shape"])
    info = np.iinfo(x.dtype)
    acc_bits = bits_needed(taps * max(int(info.max) - zero_point, zero_point - int(info.min)))
    pairs = [quantize_multiplier(real / count, acc_bits) for count in range(1, taps + 1)]
    attrs = {**window, "multiplier": tuple(p.multiplier for p in pairs), "shift": tuple(p.shift for p in pairs),
             "out_zero_point": out_zero_point, "out_dtype": out_dtype, "x_zero_point": zero_point}
    return Case(id_, "QAveragePool", [x], attrs)


AVERAGE = [
    qavg("QAveragePool-u8-lenet", ints((1, 4, 8, 8), "uint8"), 0.93, 128, "uint8", 125, kernel_shape=(2, 2),
         strides=(2, 2)),
    qavg("QAveragePool-i8-pads", ints((2, 3, 7, 9), "int8"), 1.0, -3, "int8", -3, kernel_shape=(3, 3),
         pads=(1, 1, 1, 1)),
    # a finer output grid (r = 4): counts 4, 6, 9 scaled by 1, 2/3, 4/9
    qavg("QAveragePool-i8-pads-finer", ints((1, 3, 7, 9), "int8", -40, 40), 4.0, -3, "int8", 2, kernel_shape=(3, 3),
         pads=(1, 1, 1, 1)),
    qavg("QAveragePool-u8-pads-coarser", ints((1, 3, 7, 9), "uint8"), 0.37, 100, "uint8", 7, kernel_shape=(3, 3),
         pads=(1, 1, 1, 1)),
    qavg("QAveragePool-i8-count-pads-ceil", ints((1, 3, 11, 13), "int8"), 1.1, 5, "int8", 0, kernel_shape=(3, 3),
         strides=(2, 2), pads=(1, 1, 1, 1), ceil_mode=1, count_include_pad=1),
    qavg("QAveragePool-u8-ceil-overrun", ints((1, 2, 9, 10), "uint8"), 3.3, 0, "uint8", 0, kernel_shape=(2, 3),
         strides=(2, 2), ceil_mode=1),
    qavg("QAveragePool-i8-negative-sums", ints((1, 2, 6, 19), "int8", -128, 3), 1.0, 0, "int8", 0,
         kernel_shape=(2, 2), pads=(1, 0, 1, 1), strides=(1, 2)),
    qavg("QAveragePool-i8-negative-sums-finer", ints((1, 2, 6, 19), "int8", -30, 3), 3.0, 0, "int8", 0,
         kernel_shape=(2, 2), pads=(1, 0, 1, 1), strides=(1, 2)),
    qavg("QAveragePool-i8-half-ties", ints((1, 1, 8, 24), "int8", -2, 1), 1.0, 0, "int8", 0,
         kernel_shape=(1, 2), strides=(1, 1)),
    qavg("QAveragePool-u8-same-upper-count-pads", ints((1, 2, 10, 12), "uint8"), 0.97, 128, "uint8", 128,
         kernel_shape=(3, 3), strides=(2, 2), auto_pad="SAME_UPPER", count_include_pad=1),
    qavg("QAveragePool-i16-global", ints((1, 3, 7, 7), "int16"), 1.0, 0, "int16", 0, kernel_shape=(7, 7)),
    qavg("QAveragePool-u8-global-finer", ints((1, 5, 7, 7), "uint8", 100, 140), 6.5, 120, "uint8", 128,
         kernel_shape=(7, 7)),
    qavg("QAveragePool-i16-dilated-1d", ints((1, 2, 40), "int16"), 0.5, -100, "int8", 0, kernel_shape=(3,),
         dilations=(3,), pads=(2, 2), strides=(2,), count_include_pad=1),
    qavg("QAveragePool-i16-pads-finer", ints((1, 2, 9, 11), "int16", -3000, 3000), 2.5, 7, "int16", -9,
         kernel_shape=(3, 4), pads=(2, 1, 1, 2)),
    qavg("QAveragePool-u8-3d", ints((1, 2, 4, 5, 6), "uint8"), 1.0, 10, "uint8", 10, kernel_shape=(2, 2, 3),
         pads=(0, 1, 1, 1, 0, 1)),
    # pads wider than the kernel: windows with no tap inside X (count 0 → 1, sum 0)
    qavg("QAveragePool-i8-windows-in-padding", ints((1, 2, 3, 5), "int8"), 1.0, 5, "int8", 1, kernel_shape=(1, 2),
         pads=(1, 2, 1, 2)),
    qavg("QAveragePool-i8-windows-in-padding-counted", ints((1, 2, 3, 5), "int8"), 2.0, 5, "int8", 1,
         kernel_shape=(1, 2), pads=(1, 2, 1, 2), count_include_pad=1),
    # 25,600 taps of int16 with a zero point of 20,000: the sums need 64 bits
    qavg("QAveragePool-i16-wide-window", ints((1, 2, 128, 200), "int16"), 1.0, 20000, "int16", 0,
         kernel_shape=(128, 200)),
    qavg("QAveragePool-i16-wide-window-pads", ints((1, 1, 60, 70), "int16"), 1.7, -20000, "int16", 3,
         kernel_shape=(40, 50), pads=(3, 2, 1, 4), strides=(5, 7)),
    # counts 10,000 to 40,000 of sums up to 2**31: one shared shift would overflow 64 bits (per-entry tables)
    qavg("QAveragePool-i16-huge-window-half-pads", ints((1, 1, 200, 200), "int16"), 1.7, -20000, "int16", 3,
         kernel_shape=(200, 200), pads=(100, 100, 100, 100), strides=(100, 100)),
]
