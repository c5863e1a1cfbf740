"""Integer rules for tables with ``rounding: tflite`` (a model TFLite quantized): where TFLite's int8
reference kernels are built differently from pegasus's own integer ops, the op is lowered their way, with
every multiplier derived as their Prepare functions derive it (float32 or double, in their order).

- Relu/Clip (RELU, RELU6, RELU_N1_TO_1): Requantize by s_x / s_y (a float32 quotient), clamped at
  zero_point + round(bound / s_y) (float32, ties away from zero).
- Add/Sub: QAddRescaled, TFLite's structure: each operand on a grid of 2**20 (int16: 2**15) steps per step of
  twice the larger input scale, the sum requantised.
- AveragePool: QAveragePool's integer division of the window sum, rounded half away from zero (one grid).
- Softmax: QSoftmax's gemmlowp form, with the table of exp(beta * s_x * d) values the reference computes for
  each distance d to the row's maximum (kScaledDiffIntegerBits 5, inputs past diff_min count 0); int16 inputs,
  its two interpolated LUTs (exp and 1 / (1 + x), LUTPopulateInt16).
- ReduceMean: QReduceSum, TFLite's MEAN: the multiplier of s_x / s_y with 1/count folded in.
- QuantizeLinear/DequantizeLinear (the model's own QUANTIZE/DEQUANTIZE, graph inputs and outputs): the
  integer tensor on the op's grid, requantised where grids differ; no float on the way.

- Mul: the general QMul (int16: one rounding, as TFLite's int16 MUL).
- Resize, linear (RESIZE_BILINEAR, int8/int16): QResizeBilinear, its 10-bit fixed-point interpolation of the
  raw integers (pegasus/ops/integer_resize.py); nearest: the general rule.

Conv, depthwise and fully connected layers, pooling by maximum, reshapes and padding use the general rules,
which derive their multipliers with the table's rounding. Element-wise functions
(Sigmoid, Tanh, HardSwish, LeakyRelu) are tables: rules/tflite_tables.py.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import (
    exp_on_negative_values,
    integer_range,
    multiply_by_quantized_multiplier,
    tflite_multiplier,
)
from pegasus.ops.integer import QAveragePool
from pegasus.ops.registry import make_attrs
from pegasus.ops.resize import Resize
from pegasus.quantized.context import LoweringContext, integer_rule, same_grid
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.requant import requantize_attrs
from pegasus.quantized.rules.common import clamp_of, fused_output, quantized_bounds
from pegasus.quantized.rules.elementwise import mul as general_mul
from pegasus.quantized.rules.values import resize as general_resize

TFLITE = "tflite"
#: (align_corners, half_pixel_centers) of TF's resize, by the Resize coordinate mode its import maps them onto
#: (importers/common/channels_last.py)
TF_RESIZE_FLAGS = {"tf_asymmetric": (False, False), "tf_align_corners": (True, False), "tf_half_pixel": (False, True)}
#: kScaledDiffIntegerBits of TFLite's int8 softmax: exp's input is Q5.26
SOFTMAX_DIFF_BITS = 5


def _f32(value: float) -> np.float32:
    return np.float32(value)


def _scale(q: TensorQuant) -> float:
    return float(q.scale[0])


@integer_rule("Relu", "Clip", rounding=TFLITE)
def clamp(ctx: LoweringContext, node: Node) -> str | None:
    """QuantizedReluX: y = clamp(MultiplyByQuantizedMultiplier(x - zx, s_x / s_y) + zy)."""
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.per_channel or yq.per_channel:
        return "per-channel grid"
    lo, hi = quantized_bounds(yq, *clamp_of(node), TFLITE)
    attrs = requantize_attrs(xq, yq, lo, hi, TFLITE)
    m = tflite_multiplier(float(_f32(_scale(xq)) / _f32(_scale(yq))))   # ReluPrepare: float / float
    attrs.update(multiplier=(m.multiplier,), shift=(m.shift,))
    result = ctx.emit("Requantize", [ctx.as_int(x)], attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


@integer_rule("Add", "Sub", rounding=TFLITE)
def add(ctx: LoweringContext, node: Node) -> str | None:
    """TFLite's ADD/SUB Prepare: twice the larger input scale, input multipliers s / (2 max), output multiplier
    2 max / (2**left_shift * s_y), all in double from the float32 scales."""
    if len(node.inputs) != 2:
        return f"{len(node.inputs)} operands"
    a, b = node.inputs
    aq, bq = ctx.quant(a), ctx.quant(b)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if aq.per_channel or bq.per_channel or yq.per_channel:
        return "per-channel operand"
    left_shift = 15 if yq.numpy_dtype == "int16" else 20
    twice_max = 2.0 * max(_scale(aq), _scale(bq))
    ma, mb = tflite_multiplier(_scale(aq) / twice_max), tflite_multiplier(_scale(bq) / twice_max)
    mo = tflite_multiplier(twice_max / float(_f32((1 << left_shift) * _f32(_scale(yq)))))
    attrs = {"a_zero_point": int(aq.zero_point[0]), "b_zero_point": int(bq.zero_point[0]), "left_shift": left_shift,
             "a_multiplier": ma.multiplier, "a_shift": ma.shift, "b_multiplier": mb.multiplier, "b_shift": mb.shift,
             "multiplier": (mo.multiplier,), "shift": (mo.shift,), "out_zero_point": int(yq.zero_point[0]),
             "out_dtype": yq.numpy_dtype, "lo": lo, "hi": hi, "subtract": node.op == "Sub", "rounding": TFLITE}
    result = ctx.emit("QAddRescaled", [ctx.as_int(a), ctx.as_int(b)], attrs, name=node.name, outputs=[out],
                      quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


@integer_rule("Mul", rounding=TFLITE)
def mul(ctx: LoweringContext, node: Node) -> str | None:
    """MUL: requant((a - za) * (b - zb)) by s_a * s_b / s_y in double; its int16 kernel rounds once, half up
    (measured against TF 2.21's reference kernels; the int8 one rounds twice)."""
    return general_mul(ctx, node, "half_up" if ctx.quant(node.inputs[0]).numpy_dtype == "int16" else TFLITE)


@integer_rule("AveragePool", rounding=TFLITE)
def average_pool(ctx: LoweringContext, node: Node) -> str | None:
    """AVERAGE_POOL_2D: the raw window sum divided by its tap count, rounded half away from zero, clamped."""
    x = node.inputs[0]
    xq = ctx.quant(x)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if not same_grid(xq, yq) or xq.per_channel:
        return "input and output grids differ (TFLite's AVERAGE_POOL_2D keeps one grid)"
    window = {f: getattr(node.attrs, f) for f in node.attrs.__dataclass_fields__}
    attrs = make_attrs(QAveragePool, **window, multiplier=(), shift=(), out_zero_point=0, out_dtype=yq.numpy_dtype,
                       lo=lo, hi=hi, rounding=TFLITE, x_zero_point=0)
    result = ctx.emit("QAveragePool", [ctx.as_int(x)], attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


def softmax_table(input_scale: float, beta: float = 1.0) -> np.ndarray:
    """exp(-beta * s_x * d) in Q0.31 for d = 0..255 as TFLite's reference computes it (PreprocessSoftmaxScaling,
    MultiplyByQuantizedMultiplierGreaterThanOne, gemmlowp's exp_on_negative_values); 0 past diff_min."""
    real = min(beta * input_scale * (1 << (31 - SOFTMAX_DIFF_BITS)), (1 << 31) - 1.0)
    m = tflite_multiplier(real)
    left_shift = 31 - m.shift
    radius = math.floor(((1 << SOFTMAX_DIFF_BITS) - 1) * (1 << (31 - SOFTMAX_DIFF_BITS)) / (1 << left_shift))
    diff = -np.arange(256, dtype=np.int64)
    rescaled = multiply_by_quantized_multiplier(diff, m.multiplier, left_shift)
    exp = exp_on_negative_values(rescaled, SOFTMAX_DIFF_BITS)
    return np.where(diff >= -radius, exp, 0).astype(np.int32)


def softmax16_tables() -> np.ndarray:
    """The int16 SOFTMAX's two LUTs as its Prepare fills them (LUTPopulate in double): exp on [-10, 0] and
    1 / (1 + x) on [0, 1], both onto [-1, 1] in 65536 steps."""
    steps = 65535
    return np.stack([lut_populate_int16(np.exp, 10.0 / steps, 32767, 2.0 / steps, 0),
                     lut_populate_int16(lambda v: 1.0 / (1.0 + v), 1.0 / steps, -32768, 2.0 / steps, 0)])


@integer_rule("Softmax", rounding=TFLITE)
def softmax(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.numpy_dtype not in ("int8", "uint8", "int16") or xq.per_channel:
        return f"{xq.qtype} input (TFLite's reference softmax takes 8-bit and int16 inputs)"
    rank = ctx.source.type_of(x).rank
    if node.attrs.axis % rank != rank - 1:
        return "softmax over another axis than the last"
    sixteen = xq.numpy_dtype == "int16"
    if int(yq.zero_point[0]) != (0 if sixteen else integer_range(yq.numpy_dtype)[0]):
        return f"output zero point {yq.zero_point[0]} (TFLite's softmax outputs from the type's minimum, int16 from 0)"
    m = tflite_multiplier(float(_f32(_scale(xq))) / (10.0 / 65535.0)) if sixteen else tflite_multiplier(0.0)
    attrs = {"multiplier": (m.multiplier,), "shift": (m.shift,), "out_zero_point": int(yq.zero_point[0]),
             "out_dtype": yq.numpy_dtype, "axis": node.attrs.axis, "rounding": TFLITE}
    values = softmax16_tables() if sixteen else softmax_table(_scale(xq))
    table = ctx.constant(f"{node.name}_exp_table", values)
    result = ctx.emit("QSoftmax", [ctx.as_int(x), table], attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


def lut_populate_int16(function, input_scale: float, input_zero_point: int, output_scale: float,
                       output_zero_point: int) -> np.ndarray:
    """TFLite's LUTPopulateInt16 in double: 513 knots over the input's int16 range, each sample less half the
    interpolation error at its segment's midpoint, rounded half away from zero."""
    def rounded(v):
        return np.sign(v) * np.floor(np.abs(v) + 0.5)

    input_min = input_scale * (-32768 - input_zero_point)
    input_max = input_scale * (32767 - input_zero_point)
    output_min = output_scale * (-32768 - output_zero_point)
    output_max = output_scale * (32767 - output_zero_point)
    step = (input_max - input_min) / 512
    inverse = 65536.0 / (output_max - output_min)
    i = np.arange(512, dtype=np.float64)
    value = function(input_min + i * step)
    midpoint = function(input_min + i * step + step / 2)
    following = function(input_min + (i + 1) * step)
    sample = rounded(value * inverse)
    error = rounded((following * inverse + rounded(value * inverse)) / 2) - rounded(midpoint * inverse)
    knots = np.clip(sample - rounded(error / 2), -32768, 32767)
    last = np.clip(rounded(function(np.float64(input_max)) * inverse), -32768, 32767)
    return np.append(knots, last).astype(np.int16)


def mean_multiplier(input_scale: float, output_scale: float, count: int) -> tuple[int, int]:
    """TFLite's MEAN: QuantizeMultiplier(s_x / s_y), then 1/count folded into it (QuantizedMeanOrSum); as
    (multiplier, pegasus shift)."""
    m = tflite_multiplier(input_scale / output_scale)
    exponent = 31 - m.shift
    shift = min(count.bit_length() - 1, 32, 31 + exponent)
    multiplier = (m.multiplier << shift) // count
    return multiplier, 31 - (exponent - shift)


@integer_rule("ReduceMean", rounding=TFLITE)
def reduce_mean(ctx: LoweringContext, node: Node) -> str | None:
    x, y = node.inputs[0], node.outputs[0]
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.per_channel or yq.per_channel:
        return "per-channel grid"
    shape = ctx.source.type_of(x).shape
    axes = tuple(sorted({a % len(shape) for a in node.attrs.axes})) if node.attrs.axes else \
        (() if node.attrs.noop_with_empty_axes else tuple(range(len(shape))))
    if not axes:
        return "no axes (a copy)"
    count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    multiplier, shift = mean_multiplier(_scale(xq), _scale(yq), count)
    attrs = {"axes": axes, "keepdims": node.attrs.keepdims, "x_zero_point": int(xq.zero_point[0]),
             "multiplier": (multiplier,), "shift": (shift,), "out_zero_point": int(yq.zero_point[0]),
             "out_dtype": yq.numpy_dtype, "rounding": TFLITE}
    result = ctx.emit("QReduceSum", [ctx.as_int(x)], attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None


def _grid(ctx: LoweringContext, node: Node, integer: str) -> TensorQuant | None:
    """The per-tensor grid of a QuantizeLinear/DequantizeLinear (its constant scale and zero point)."""
    scale = ctx.value(node.inputs[1])
    zero = ctx.value(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), np.uint8)
    if scale is None or zero is None or scale.size != 1:
        return None
    dtype = str(ctx.source.type_of(integer).dtype.value)
    qtype = {"int8": "i8", "uint8": "u8", "int16": "i16", "int32": "i32"}.get(dtype)
    if qtype is None:
        return None
    return TensorQuant(qtype, "asymmetric_quantized", "layer", [], [], [float(scale.reshape(-1)[0])],
                       [int(zero.reshape(-1)[0])])


@integer_rule("QuantizeLinear", rounding=TFLITE)
def quantize_linear(ctx: LoweringContext, node: Node) -> str | None:
    """The integer tensor the op defines: its input on the op's grid (a Requantize where the grids differ)."""
    x, y = node.inputs[0], node.outputs[0]
    grid = _grid(ctx, node, y)
    if grid is None or x not in ctx.homes:
        return "per-axis or non-constant parameters" if grid is None else "its input is a constant"
    ctx.set_home(y, ctx.as_int(x, grid), None)
    return None


@integer_rule("DequantizeLinear", rounding=TFLITE)
def dequantize_linear(ctx: LoweringContext, node: Node) -> str | None:
    """The real tensor the op defines, kept as the integers it dequantizes (requantised onto its table grid)."""
    x, y = node.inputs[0], node.outputs[0]
    grid = _grid(ctx, node, x)
    yq = ctx.table.get(y)
    if grid is None or yq is None or not yq.is_integer or yq.per_channel or x not in ctx.homes:
        return "per-axis parameters" if grid is None else "its output is float in the table"
    home = ctx.homes[x][0]
    if not same_grid(grid, yq):
        home = ctx.emit("Requantize", [home], requantize_attrs(grid, yq, rounding=TFLITE), name=node.name,
                        outputs=[y], quant=[yq])[0]
    ctx.set_home(y, home, yq)
    return None



@integer_rule("Resize", rounding=TFLITE)
def resize(ctx: LoweringContext, node: Node) -> str | None:
    """RESIZE_BILINEAR on 8/16-bit integers: QResizeBilinear (input and output on one grid, as TFLite has it)."""
    if node.attrs.mode == "nearest":
        return general_resize(ctx, node)
    x, y = node.inputs[0], node.outputs[0]
    flags = TF_RESIZE_FLAGS.get(node.attrs.coordinate_transformation_mode)
    if node.attrs.mode != "linear" or flags is None:
        return f"mode {node.attrs.mode} with {node.attrs.coordinate_transformation_mode} coordinates"
    shape = ctx.source.type_of(x).shape
    sizes, _ = Resize.geometry(node.attrs, shape)
    if len(shape) != 4 or sizes[0] != shape[0] or sizes[3] != shape[3]:
        return "resizes other axes than height and width of an NHWC tensor"
    xq, yq = ctx.quant(x), ctx.quant(y)
    if xq.numpy_dtype not in ("int8", "int16") or xq.per_channel or not same_grid(xq, yq):
        return "the input and output are not one 8/16-bit signed grid"
    attrs = {"sizes": tuple(sizes[1:3]), "align_corners": flags[0], "half_pixel_centers": flags[1]}
    result = ctx.emit("QResizeBilinear", [ctx.as_int(x)], attrs, name=node.name, outputs=[y], quant=[yq])[0]
    ctx.set_home(y, result, yq)
    return None
