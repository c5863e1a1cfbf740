"""Element-wise functions of 8-bit tensors under ``rounding: tflite``: a 256-entry LookupTable holding, for
every input level, exactly what TFLite's int8 reference kernel outputs for it.

- LOGISTIC, TANH: TFLite fills a table in Prepare (LUTPopulate): real = s_x * (q - zx) in float32, the float
  function, round(f * (1 / s_y)) + zy in float32 with ties away from zero. Here in the same float32 steps;
  expf/tanhf are taken as the correctly rounded float32 of the double function.
- HARD_SWISH: the reference kernel's 16-bit fixed-point arithmetic (a relu-ish multiplier in [0, 1] times the
  input on the output scale), simulated level by level with its int16 roundings and saturations.
- LEAKY_RELU: MultiplyByQuantizedMultiplier by s_x / s_y for x >= zx, by s_x * alpha / s_y below (float32
  factors, as its Prepare computes them).
- CONCATENATION of inputs on other grids than the output (uint8 models): each such input goes through a table
  of ConcatenationWithScaling's float32 formula before the Concat.

A table is exact by construction, and the LookupTable op already has its kernels.

int16 LOGISTIC and TANH are not tables on the input's grid: TFLite rescales the input by an integer multiplier
and reads a 256-knot sigmoid table (pegasus.ops.integer_lut.QSigmoid16), with the multiplier and shift its
Prepare derives (``sigmoid16_rescale``). int16 LEAKY_RELU is QuantizeLeakyRelu's two requantisations
(pegasus.ops.integer_lut.QLeakyRelu), the multipliers the 8-bit table uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import INT32_MAX, integer_range, multiply_by_quantized_multiplier, tflite_multiplier
from pegasus.ops.integer_lut import sigmoid_knots
from pegasus.quantized.context import LoweringContext, integer_rule, same_grid
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.rules.common import round_half_away

f32 = np.float32


def _levels(q: TensorQuant) -> np.ndarray:
    lo, hi = integer_range(q.numpy_dtype)
    return np.arange(lo, hi + 1, dtype=np.int64)


def lut_populate(function: Callable[[np.ndarray], np.ndarray], xq: TensorQuant, yq: TensorQuant) -> np.ndarray:
    """TFLite's LUTPopulate over every level of x's type, in float32."""
    real = f32(xq.scale[0]) * (_levels(xq) - int(xq.zero_point[0])).astype(f32)
    rescaled = round_half_away(function(real) * (f32(1.0) / f32(yq.scale[0])))
    quantized = (rescaled + f32(int(yq.zero_point[0]))).astype(np.int64)
    return np.clip(quantized, *integer_range(yq.numpy_dtype)).astype(yq.numpy_dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1.0f / (1.0f + expf(-x))."""
    return f32(1.0) / (f32(1.0) + np.exp(-x.astype(np.float64)).astype(f32))


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x.astype(np.float64)).astype(f32)


# ---- HARD_SWISH: int16 fixed point ------------------------------------------------------------------------

def _int16(x: int) -> int:
    """x as C's static_cast<int16_t> keeps it (wrapping)."""
    return ((x + 32768) & 0xFFFF) - 32768


def _srdhm16(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16."""
    if a == b == -32768:
        return 32767
    product = a * b
    nudge = (1 << 14) if product >= 0 else 1 - (1 << 14)
    total = product + nudge
    return _int16(total // (1 << 15) if total >= 0 else -((-total) // (1 << 15)))


def _sdhm16(a: int, b: int) -> int:
    """SaturatingDoublingHighMul on int16: (a * b) / 2**15 truncated toward zero."""
    if a == b == -32768:
        return 32767
    product = a * b
    return _int16(product // (1 << 15) if product >= 0 else -((-product) // (1 << 15)))


def _rdbpot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    return (x >> exponent) + ((x & mask) > (mask >> 1) + (x < 0))


def _saturating_left_shift16(x: int, amount: int) -> int:
    return min(max(x * (1 << amount), -32768), 32767)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier then DownScaleInt32ToInt16Multiplier: (Q15 multiplier, TFLite exponent)."""
    m = tflite_multiplier(real)
    fixed = 32767 if m.multiplier >= INT32_MAX - (1 << 15) else (m.multiplier + (1 << 15)) >> 16
    return fixed, 31 - m.shift


def hard_swish_table(xq: TensorQuant, yq: TensorQuant) -> np.ndarray | None:
    """reference_ops::HardSwish on every level of x (None when its output multiplier would shift left)."""
    hires = f32(1.0 / 128.0) * f32(xq.scale[0])
    out_fixed, out_exponent = _int16_multiplier(float(hires / f32(yq.scale[0])))
    relu_fixed, relu_exponent = _int16_multiplier(float(hires / (f32(3.0) / f32(32768.0))))
    if out_exponent > 0:
        return None
    lo, hi = integer_range(yq.numpy_dtype)
    table = []
    for level in _levels(xq).tolist():
        hires_value = _int16((level - int(xq.zero_point[0])) * (1 << 7))
        preshift_output = _srdhm16(hires_value, out_fixed)
        reluish = hires_value
        if relu_exponent > 0:
            reluish = _saturating_left_shift16(reluish, relu_exponent - 1)
        reluish = _srdhm16(reluish, relu_fixed)
        if relu_exponent > 0:
            reluish = _saturating_left_shift16(reluish, 1)
        if relu_exponent < 0:
            reluish = _rdbpot(reluish, -relu_exponent)
        reluish = (reluish + (1 << 15)) >> 1
        output = _int16(_rdbpot(_sdhm16(reluish, preshift_output), -out_exponent) + int(yq.zero_point[0]))
        table.append(min(max(output, lo), hi))
    return np.asarray(table, dtype=yq.numpy_dtype)


def leaky_relu_table(xq: TensorQuant, yq: TensorQuant, alpha: float) -> np.ndarray | None:
    """QuantizeLeakyRelu on every level of x (None for a negative alpha, which QuantizeMultiplier refuses)."""
    if alpha < 0:
        return None
    sx, sy = f32(xq.scale[0]), f32(yq.scale[0])
    identity, slope = tflite_multiplier(float(sx / sy)), tflite_multiplier(float(sx * f32(alpha) / sy))
    centred = _levels(xq) - int(xq.zero_point[0])
    up = multiply_by_quantized_multiplier(centred, identity.multiplier, 31 - identity.shift)
    down = multiply_by_quantized_multiplier(centred, slope.multiplier, 31 - slope.shift)
    y = np.where(centred >= 0, up, down) + int(yq.zero_point[0])
    return np.clip(y, *integer_range(yq.numpy_dtype)).astype(yq.numpy_dtype)


def concat_rescale_table(xq: TensorQuant, yq: TensorQuant) -> np.ndarray:
    """ConcatenationWithScaling's requantisation of one input (uint8 models): round(q * scale + bias) + zy in
    float32, scale = s_x * (1 / s_y), bias = -zx * scale."""
    scale = f32(xq.scale[0]) * (f32(1.0) / f32(yq.scale[0]))
    bias = f32(-int(xq.zero_point[0])) * scale
    value = round_half_away(_levels(xq).astype(f32) * scale + bias).astype(np.int64) + int(yq.zero_point[0])
    return np.clip(value, *integer_range(yq.numpy_dtype)).astype(yq.numpy_dtype)


@integer_rule("Concat", rounding="tflite")
def concat(ctx: LoweringContext, node: Node) -> str | None:
    """CONCATENATION: an input on another grid than the output is rescaled by a table of TFLite's float
    formula (int8 models keep one grid; uint8 ones do not)."""
    y = node.outputs[0]
    yq = ctx.quant(y)
    inputs = []
    for index, name in enumerate(node.inputs):
        xq = ctx.quant(name)
        if same_grid(xq, yq):
            inputs.append(ctx.as_int(name))
            continue
        if xq.numpy_dtype not in ("int8", "uint8") or xq.per_channel or yq.per_channel:
            return f"input {index} on another {xq.precision} grid"
        table = ctx.constant(f"{node.name}_rescale_{index}_table", concat_rescale_table(xq, yq))
        inputs += ctx.emit("LookupTable", [ctx.as_int(name), table], name=f"{node.name}_rescale_{index}",
                           outputs=[f"{name}_rescaled"], quant=[yq])
    result = ctx.emit("Concat", inputs, node.attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


TABLES: dict[str, Callable[[Node, TensorQuant, TensorQuant], np.ndarray | None]] = {
    "Sigmoid": lambda node, xq, yq: lut_populate(_sigmoid, xq, yq),
    "Tanh": lambda node, xq, yq: lut_populate(_tanh, xq, yq),
    "HardSwish": lambda node, xq, yq: hard_swish_table(xq, yq),
    "LeakyRelu": lambda node, xq, yq: leaky_relu_table(xq, yq, float(node.attrs.alpha)),
}


#: int16 functions TFLite reads from its sigmoid table: op -> QSigmoid16's ``tanh``
SIGMOID16 = {"Sigmoid": False, "Tanh": True}


def sigmoid16_rescale(input_scale: float, tanh: bool) -> tuple[int, int] | None:
    """(multiplier, left_shift) of the int16 LOGISTIC/TANH Prepare: a power-of-two scale of 2**-12 (TANH also
    2**-11) is multiplied by 3 << shift; any other is s_x * 4096 * 3 doubled until above 32767 / 2 (None when
    that multiplier passes 16 bits, where the kernel's 32-bit product would overflow)."""
    log2 = math.log2(float(f32(input_scale)))
    rounded = round(log2)
    left_shift = 12 + rounded
    if abs(log2 - rounded) < 1e-3 and (left_shift == 0 or (tanh and left_shift == 1)):
        return 3 << left_shift, 0
    multiplier, left_shift = float(f32(input_scale)) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and left_shift <= 30:
        left_shift, multiplier = left_shift + 1, multiplier * 2.0
    return (int(multiplier), left_shift) if 1 <= int(multiplier) < 1 << 15 else None


def sigmoid16(ctx: LoweringContext, node: Node, xq: TensorQuant, yq: TensorQuant) -> str | None:
    """int16 LOGISTIC/TANH as QSigmoid16, on the grids its Prepare accepts (zero points 0, output 2**-15)."""
    tanh = SIGMOID16[node.op]
    if int(xq.zero_point[0]) or int(yq.zero_point[0]) or f32(yq.scale[0]) != f32(1.0 / 32768.0):
        return "zero points other than 0 or an output scale other than 2**-15 (TFLite's Prepare refuses them)"
    rescale = sigmoid16_rescale(float(xq.scale[0]), tanh)
    if rescale is None:
        return f"input scale {xq.scale[0]} too large for the kernel's 32-bit rescale"
    attrs = {"multiplier": rescale[0], "left_shift": rescale[1], "tanh": tanh}
    knots = ctx.constant(f"{node.name}_sigmoid_knots", sigmoid_knots())
    result = ctx.emit("QSigmoid16", [ctx.as_int(node.inputs[0]), knots], attrs, name=node.name,
                      outputs=[node.outputs[0]], quant=[yq])[0]
    ctx.set_home(node.outputs[0], result, yq)
    return None


def leaky_relu16(ctx: LoweringContext, node: Node, xq: TensorQuant, yq: TensorQuant) -> str | None:
    """int16 LEAKY_RELU as QLeakyRelu, with QuantizeLeakyRelu's float32 multipliers."""
    alpha = float(node.attrs.alpha)
    if alpha < 0:
        return "parameters TFLite's kernel refuses"
    sx, sy = f32(xq.scale[0]), f32(yq.scale[0])
    identity, slope = tflite_multiplier(float(sx / sy)), tflite_multiplier(float(sx * f32(alpha) / sy))
    attrs = {"multiplier": (identity.multiplier,), "shift": (identity.shift,), "alpha_multiplier": slope.multiplier,
             "alpha_shift": slope.shift, "x_zero_point": int(xq.zero_point[0]),
             "out_zero_point": int(yq.zero_point[0]), "out_dtype": yq.numpy_dtype, "rounding": "tflite"}
    result = ctx.emit("QLeakyRelu", [ctx.as_int(node.inputs[0])], attrs, name=node.name,
                      outputs=[node.outputs[0]], quant=[yq])[0]
    ctx.set_home(node.outputs[0], result, yq)
    return None


#: int16 functions: op -> the rule building TFLite's int16 kernel for it
INT16 = {"Sigmoid": sigmoid16, "Tanh": sigmoid16, "LeakyRelu": leaky_relu16}


@integer_rule(*TABLES, rounding="tflite")
def tflite_table(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.numpy_dtype == "int16" and node.op in INT16 and not xq.per_channel and not yq.per_channel:
        return INT16[node.op](ctx, node, xq, yq)
    if xq.numpy_dtype not in ("int8", "uint8") or xq.per_channel or yq.per_channel:
        return f"{xq.precision} input: TFLite's table kernels take 8-bit tensors"
    table = TABLES[node.op](node, xq, yq)
    if table is None:
        return "parameters TFLite's kernel refuses"
    result = ctx.emit("LookupTable", [ctx.as_int(x), ctx.constant(f"{node.name}_table", table)], name=node.name,
                      outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None
