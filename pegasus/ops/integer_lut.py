"""Op family: TFLite's int16 element-wise functions, as its reference kernels compute them.

QSigmoid16 (LOGISTIC, TANH): a 256-knot sigmoid table read after a fixed-point rescale.

TFLite's int16 kernels do not tabulate the function on the input's own grid (as LookupTable does): they
move the input onto a Q3.12 grid scaled by 3 (an integer multiplier and a rounding right shift), then
interpolate linearly between the knots of sigmoid(i / 24) in 0.16 format on the magnitude, and mirror the
result for negative inputs (tanh(x) = 2 * sigmoid(2x) - 1 reads the same table with one bit less of
fraction). A model TFLite quantized reproduces its reference kernels bit for bit only with this structure,
so it is a registry op of its own; the rule (pegasus.quantized.rules.tflite_tables) derives the multiplier
and shift as the kernels' Prepare does.

QLeakyRelu (LEAKY_RELU, QuantizeLeakyRelu): x - zx requantised by one of two multipliers, s_x / s_y at or above
the zero point and s_x * alpha / s_y below it (8-bit models get the same arithmetic as a 256-entry table).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.integer import RequantAttrs, check_channels, requant_type, requantize_accumulator
from pegasus.ops.registry import OpDef, ShapeError, register

#: Knots of the sigmoid table.
KNOTS = 256

#: The kernels' table (TFLite's sigmoid_table_uint16): sigmoid(i / 24) for i in 0..255 in 0.16 fixed point, as
#: TFLite ships it. 44 knots are one above round(65536 * sigmoid(i / 24)), so it is data, not a formula.
SIGMOID_KNOTS = (
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
)


def sigmoid_knots() -> np.ndarray:
    """The table as the uint16 constant QSigmoid16 reads."""
    return np.asarray(SIGMOID_KNOTS, dtype=np.uint16)


@register
class QSigmoid16(OpDef):
    """Y = TFLite's int16 LOGISTIC (``tanh`` false) or TANH of X (int16, zero point 0; Y on 1 / 32768), with
    ``table`` the 256 knots of ``sigmoid_knots``:

    v = (X * multiplier + round) >> left_shift (round = 2**(left_shift - 1), 0 without shift);
    LOGISTIC: a = |v|, i = a >> 9, f = a & 511, r = t[i] * 512 + f * (t[i + 1] - t[i]) (0x7FFF * 1024 when
    i >= 255); Y = (r + 512) >> 10 for v >= 0, (2**25 - r + 511) >> 10 below.
    TANH: i = a >> 8, f = a & 255, r = t[i] * 256 + f * (t[i + 1] - t[i]) (0xFFFF * 256 when i >= 255);
    Y = (r - 2**23 + 128) >> 8 for v >= 0, (2**23 - r + 127) >> 8 below (arithmetic shifts)."""

    name = "QSigmoid16"
    quantized_form = True
    num_inputs = (2, 2)
    elementwise = True

    @dataclass(frozen=True)
    class Attrs:
        multiplier: int = 3
        left_shift: int = 0
        tanh: bool = False

    @staticmethod
    def infer(attrs, inputs):
        x, table = inputs
        if x.dtype != DType.INT16 or table.shape != (KNOTS,) or table.dtype != DType.UINT16:
            raise ShapeError(f"QSigmoid16 takes an int16 tensor and {KNOTS} uint16 knots, got {x.dtype.value} "
                             f"and {list(table.shape)} {table.dtype.value}")
        if not 0 < attrs.multiplier < 1 << 15 or not 0 <= attrs.left_shift <= 31:
            raise ShapeError(f"QSigmoid16 multiplier {attrs.multiplier} (1..32767) or left_shift "
                             f"{attrs.left_shift} (0..31) out of range")
        return [TensorType(x.shape, DType.INT16)]

    @staticmethod
    def reference(attrs, inputs):
        x, table = inputs
        shift = attrs.left_shift
        rounding = (1 << (shift - 1)) if shift > 0 else 0
        v = (x.astype(np.int64) * attrs.multiplier + rounding) >> shift
        a = np.abs(v)
        bits = 8 if attrs.tanh else 9
        index = a >> bits
        inside = index < KNOTS - 1
        safe = np.where(inside, index, 0)
        t = table.astype(np.int64)
        low = t[safe]
        r = (low << bits) + (a & ((1 << bits) - 1)) * (t[safe + 1] - low)
        if attrs.tanh:
            r = np.where(inside, r, 0xFFFF << 8)
            y = np.where(v >= 0, r - (1 << 23) + (1 << 7), (1 << 23) - r + (1 << 7) - 1) >> 8
        else:
            r = np.where(inside, r, 0x7FFF << 10)
            y = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1) >> 10
        return [y.astype(np.int16)]


@register
class QLeakyRelu(OpDef):
    """Y = requant(X - x_zero_point) by multiplier/shift where X >= x_zero_point, by alpha_multiplier /
    alpha_shift below it; zero point, clamp and rounding as every requantising op (one multiplier each)."""

    name = "QLeakyRelu"
    quantized_form = True
    num_inputs = (1, 1)
    elementwise = True

    @dataclass(frozen=True)
    class Attrs(RequantAttrs):
        x_zero_point: int = 0
        alpha_multiplier: int = 1
        alpha_shift: int = 0

    @staticmethod
    def infer(attrs, inputs):
        check_channels(attrs, 1)
        return [requant_type(attrs, inputs[0].shape)]

    @staticmethod
    def reference(attrs, inputs):
        centred = inputs[0].astype(np.int64) - attrs.x_zero_point
        up = requantize_accumulator(attrs, centred, 0)
        alpha = replace(attrs, multiplier=(attrs.alpha_multiplier,), shift=(attrs.alpha_shift,))
        down = requantize_accumulator(alpha, centred, 0)
        return [np.where(centred >= 0, up, down)]
