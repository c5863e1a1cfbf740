"""Integer rules for the MAC-heavy ops: Conv → QConv, Gemm/MatMul → QMatMul, and an unfolded
BatchNormalization → depthwise 1x1 QConv.

Weights are put on their table grid (per tensor, or per output channel), the bias becomes an integer at
scale ``s_x * s_w[c]``, and the output requantisation factor ``s_x * s_w[c] / s_y`` becomes a
fixed-point multiplier per channel, derived as the table's rounding says (TFLite: s_x * s_w[c] / s_y in
double for per-channel weights, its FULLY_CONNECTED's float32 product s_x * s_w for per-tensor ones; and its
FULLY_CONNECTED applies the Q31 multiplier with one rounding, half up, for int8 and 16x8 alike, where CONV_2D
and BATCH_MATMUL round twice and its 16x8 form scales the int64 accumulator by a 16-bit multiplier, ``tflite_wide`` --
measured against TF 2.21's reference kernels). A ReLU/Clip that is the only reader is fused into the clamp.

The integer bias stays within ``bias_limit`` (2**30 beside 8-bit operands, half the int32 range as TFLite
keeps it; 2**46 beside 16-bit ones, whose accumulators are 64-bit). A channel whose weights are ~0 next to a
bias (a dead channel BatchNormalization folding left at 1e-30, or a table edited by hand) would need
``|b| / (s_x * s_w[c])`` far beyond that: its weight scale is raised to ``|b| / (s_x * limit)`` (TFLite's
AdjustWeightsForBiasScale), so its weights become ~0 and its bias is kept to one part in the limit; the
channel outputs its bias, as in float. A bias that is not finite saturates at the limit. Both are reported
(``LoweringContext.note``).

A bias whose table entry is 8-bit (Glow's -quantization-precision-bias=Int8) is quantized on that grid and
rescaled into the accumulator as Glow's CPU backend does (``glow_bias``): in float32, ``b_q = clip(nearbyint(b /
s_b + zp))``, ``r = s_b / (s_x * s_w[c])`` becomes Glow's quantizeScaleOffset32To8 (pre, post, integer scale),
and the accumulator starts at libjit_scale_i32i8: ``(((b_q - zp) >> pre) * scale + 2**(post-1)) >> post``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import bits_needed
from pegasus.ops.normalization import BatchNormalization
from pegasus.quantized.context import LoweringContext, integer_rule
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.requant import requant_fields
from pegasus.quantized.rules.common import fused_output


def accumulator_rounding(rounding: str, x: TensorQuant) -> str:
    """The op rounding of a MAC layer: TFLite's 16x8 kernels accumulate in int64 and scale it their own way."""
    return "tflite_wide" if rounding == "tflite" and x.numpy_dtype == "int16" else rounding


def bias_steps(ctx: LoweringContext, bias: str, real_in: np.ndarray) -> np.ndarray:
    """The real value of one integer bias step: s_x * s_w[c]; under the tflite rounding the file's own bias
    scale, of which the float32 bias holds an exact multiple up to 2**23 steps (s_x * s_w[c] in double is one
    float32 rounding away from it)."""
    entry = ctx.table.get(bias) if bias else None
    if ctx.table.rounding != "tflite" or entry is None or not entry.is_integer:
        return real_in
    scales = entry.scales()
    return np.broadcast_to(scales if scales.size > 1 else scales.reshape(1), real_in.shape).astype(np.float64)


def _channel_scales(q: TensorQuant, channels: int) -> np.ndarray:
    scales = q.scales()
    return np.broadcast_to(scales if scales.size > 1 else scales.reshape(1), (channels,)).astype(np.float64)


def bias_limit(x: TensorQuant, w_dtype: str) -> float:
    """Largest integer bias magnitude beside operands of these types (see the module docstring)."""
    narrow = np.dtype(x.numpy_dtype).itemsize == 1 and np.dtype(w_dtype).itemsize == 1
    return 2.0 ** 30 if narrow else 2.0 ** 46


def _bias_values(ctx: LoweringContext, name: str, channels: int, beta: float = 1.0) -> np.ndarray | None:
    """The real bias per output channel (float64), or None without one."""
    if not name:
        return None
    return np.broadcast_to(beta * ctx.value(name).astype(np.float64).reshape(-1), (channels,)).copy()


def fit_bias(ctx: LoweringContext, node: Node, bias: np.ndarray | None, x_scale: float, w_scales: np.ndarray,
             limit: float) -> np.ndarray:
    """The weight scales, each raised where the channel's bias would not fit ``limit`` integer steps."""
    if bias is None:
        return w_scales
    finite = np.isfinite(bias)
    needed = np.abs(np.where(finite, bias, 0.0)) / (abs(x_scale) * limit)
    raised = needed > w_scales
    if raised.any():
        channels = np.flatnonzero(raised)
        ctx.note(node.name, f"{len(channels)} output channel(s) ({_listed(channels)}) have weights too small for "
                            f"their bias on the table's grid: their weight scale is raised to |bias| / (s_in * "
                            f"2^{int(np.log2(limit))}) (they output their bias)")
    return np.where(raised, needed, w_scales)


def integer_bias(ctx: LoweringContext, node: Node, bias: np.ndarray | None, real_scale: np.ndarray,
                 limit: float) -> np.ndarray | None:
    """``rint(bias / real_scale)``, saturated explicitly at ±``limit`` (a bias that is not finite)."""
    if bias is None:
        return None
    steps = bias / real_scale
    saturated = ~(np.abs(steps) <= limit)  # also NaN
    if saturated.any():
        channels = np.flatnonzero(saturated)
        ctx.note(node.name, f"the bias of output channel(s) {_listed(channels)} ({_listed(bias[channels])}) "
                            f"saturates at ±2^{int(np.log2(limit))} integer steps")
        steps = np.clip(np.nan_to_num(steps, nan=0.0, posinf=limit, neginf=-limit), -limit, limit)
    return np.rint(steps).astype(np.int64)


def is_8bit_bias(ctx: LoweringContext, name: str) -> bool:
    entry = ctx.table.get(name) if name else None
    return entry is not None and entry.is_integer and entry.numpy_dtype in ("int8", "uint8")


def glow_scale(ratio: np.float32) -> tuple[int, int, int]:
    """Glow's quantizeScaleOffset32To8: a positive float32 factor as (pre shift, post shift, integer scale)."""
    mantissa, exponent = np.frexp(ratio)
    if mantissa == 0.5:  # a power of two: a plain multiply or a rounded shift
        return (0, 0, int(ratio)) if exponent - 1 > 0 else (0, 1 - int(exponent), 1)
    scale, pre, post = np.float32(ratio), 0, 0
    while scale < 0.5 or (scale < 256 and post < 15):
        scale, post = np.float32(scale * 2), post + 1
    while scale < 255 and pre < post // 2:
        scale, pre = np.float32(scale * 2), pre + 1
    return pre, post, int(np.floor(np.float64(scale) + 0.5))  # std::round of a positive value


def glow_bias(ctx: LoweringContext, name: str, bias: np.ndarray, x_scale: float, w_scales: np.ndarray) -> np.ndarray:
    """The accumulator bias of an 8-bit bias entry, per output channel, computed as Glow's CPU backend does."""
    entry = ctx.table.get(name)
    info = np.iinfo(entry.numpy_dtype)
    channels = bias.size
    b_scales = np.broadcast_to(np.asarray(entry.scale, dtype=np.float32).reshape(-1), (channels,))
    zeros = np.broadcast_to(np.asarray(entry.zero_point, dtype=np.int64).reshape(-1), (channels,))
    with np.errstate(over="ignore", invalid="ignore"):  # ±inf/NaN biases saturate below, as Glow's clip does
        steps = bias.astype(np.float32) / b_scales + zeros.astype(np.float32)
    steps = np.nan_to_num(steps, nan=0.0, posinf=info.max, neginf=info.min)
    b_q = np.clip(np.rint(steps), info.min, info.max).astype(np.int64)
    out = np.empty(channels, dtype=np.int64)
    for c in range(channels):
        pre, post, scale = glow_scale(np.float32(b_scales[c] / (np.float32(x_scale) * np.float32(w_scales[c]))))
        rounding = 1 << (post - 1) if post > 0 else 0
        out[c] = ((((int(b_q[c]) - int(zeros[c])) >> pre) * scale) + rounding) >> post
    return out


def _listed(values: np.ndarray, most: int = 8) -> str:
    shown = ", ".join(str(v) for v in values[:most].tolist())
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def _weight_grid(wq: TensorQuant, scales: np.ndarray, axis: int) -> TensorQuant:
    """The table's weight grid, or per channel with ``scales`` (same zero point) where the bias raised some."""
    if np.array_equal(scales, _channel_scales(wq, scales.size)):
        return wq
    return replace(wq, method="channel", scale=[float(s) for s in scales],
                   zero_point=[int(wq.zero_point[0])] * scales.size, axis=axis)


def accumulator_bits(x: TensorQuant, w_int: np.ndarray, w_zero: int, taps: int, bias: np.ndarray | None) -> int:
    """Bits of the largest accumulator of ``taps`` products of x's full range by w_int - w_zero, plus the bias."""
    x_span = float(np.iinfo(x.numpy_dtype).max) - float(np.iinfo(x.numpy_dtype).min)
    w_span = float(np.abs(w_int.astype(np.int64) - w_zero).max(initial=0))
    total = x_span * w_span * taps + (float(np.abs(bias).max(initial=0)) if bias is not None else 0.0)
    return bits_needed(total)


def bias_constant(ctx: LoweringContext, node: Node, bias: np.ndarray | None, acc_bits: int) -> list[str]:
    """The integer bias input of ``node`` (int32, or int64 for a wider accumulator); none without a bias."""
    if bias is None:
        return []
    dtype = np.int32 if acc_bits <= 32 else np.int64
    return [ctx.constant(f"{node.name}_bias_q", bias.astype(dtype))]


def weights_and_bias(ctx: LoweringContext, node: Node, w: str, b: str, channels: int,
                     axis: int) -> tuple[str, np.ndarray | None, np.ndarray]:
    """A convolution's integer weights (the name of the constant, on the table's grid per output channel along
    ``axis``, the scales raised where the bias needs it) and integer bias, and each channel's real step
    s_x * s_w[c] of the accumulator (Conv, and ConvTranspose's rule)."""
    xq, wq = ctx.quant(node.inputs[0]), ctx.quant(w)
    limit = bias_limit(xq, wq.numpy_dtype)
    bias_real = _bias_values(ctx, b, channels)
    w_scales = _channel_scales(wq, channels)
    if not is_8bit_bias(ctx, b):
        w_scales = fit_bias(ctx, node, bias_real, float(xq.scale[0]), w_scales, limit)
    weights = ctx.as_int(w, _weight_grid(wq, w_scales, axis))
    real_in = float(xq.scale[0]) * w_scales
    bias = (glow_bias(ctx, b, bias_real, float(xq.scale[0]), w_scales) if is_8bit_bias(ctx, b) else
            integer_bias(ctx, node, bias_real, bias_steps(ctx, b, real_in), limit))
    return weights, bias, real_in


@integer_rule("Conv")
def conv(ctx: LoweringContext, node: Node) -> str | None:
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    if ctx.value(w) is None or (b and ctx.value(b) is None):
        return "weights are not constant"
    xq, wq = ctx.quant(x), ctx.quant(w)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    if wq.per_channel and (wq.axis or 0) != 0:
        return f"per-channel weights along axis {wq.axis} (Conv needs axis 0)"
    weights, bias, real_in = weights_and_bias(ctx, node, w, b, ctx.source.type_of(w).shape[0], 0)
    w_int = ctx.graph.value_of(weights)
    w_zero = int(wq.zero_point[0])
    acc_bits = accumulator_bits(xq, w_int, w_zero, int(np.prod(w_int.shape[1:])), bias)
    attrs = {**{f: getattr(node.attrs, f) for f in node.attrs.__dataclass_fields__},
             **requant_fields(real_in / float(yq.scale[0]), yq, acc_bits, lo, hi, ctx.table.rounding),
             "x_zero_point": int(xq.zero_point[0]), "w_zero_point": w_zero,
             "rounding": accumulator_rounding(ctx.table.rounding, xq)}
    inputs = [ctx.as_int(x), weights] + bias_constant(ctx, node, bias, acc_bits)
    result = ctx.emit("QConv", inputs, attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


def _matmul(ctx: LoweringContext, node: Node, a: str, b: str, bias_name: str, *, trans_b: bool,
            alpha: float = 1.0, beta: float = 1.0) -> str | None:
    aq, bq = ctx.quant(a), ctx.quant(b)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    b_const = ctx.value(b) is not None
    weight_axis = 0 if trans_b else ctx.source.type_of(b).rank - 1
    if bq.per_channel and (not b_const or (bq.axis or 0) % ctx.source.type_of(b).rank != weight_axis):
        return f"per-channel B along axis {bq.axis} is not per output column"
    columns = ctx.source.type_of(b).shape[0 if trans_b else -1]
    if bias_name:
        c = ctx.value(bias_name)
        if c is None or c.size not in (1, columns) or (c.ndim == 2 and c.shape[0] != 1):
            return "C is not a constant per-column bias"
    limit = bias_limit(aq, bq.numpy_dtype)
    bias_real = _bias_values(ctx, bias_name, columns, beta)
    a_scale = alpha * float(aq.scale[0])
    b_scales = _channel_scales(bq, columns)
    if b_const and not is_8bit_bias(ctx, bias_name):
        b_scales = fit_bias(ctx, node, bias_real, a_scale, b_scales, limit)
    b_int_name = ctx.as_int(b, _weight_grid(bq, b_scales, weight_axis))
    if trans_b:
        b_int_name = ctx.constant(f"{b}_q_t", ctx.graph.value_of(b_int_name).T.copy())
    real_in = a_scale * b_scales
    bias = (glow_bias(ctx, bias_name, bias_real, a_scale, b_scales) if is_8bit_bias(ctx, bias_name) else
            integer_bias(ctx, node, bias_real, bias_steps(ctx, bias_name, real_in), limit))
    if ctx.table.rounding == "tflite" and not bq.per_channel:  # TFLite's FULLY_CONNECTED: s_a * s_b in float32
        real_in = np.full_like(real_in, float(np.float32(a_scale) * np.float32(b_scales[0])))
    b_val = ctx.graph.value_of(b_int_name)
    b_zero = int(bq.zero_point[0])
    if b_val is not None:
        acc_bits = accumulator_bits(aq, b_val, b_zero, b_val.shape[-2], bias)
    else:
        span = float(np.iinfo(bq.numpy_dtype).max) - float(np.iinfo(bq.numpy_dtype).min)
        acc_bits = accumulator_bits(aq, np.array([span]), 0, ctx.source.type_of(a).shape[-1], bias)
    attrs = {**requant_fields(real_in / float(yq.scale[0]), yq, acc_bits, lo, hi, ctx.table.rounding),
             "a_zero_point": int(aq.zero_point[0]), "b_zero_point": b_zero}
    if ctx.table.rounding == "tflite" and node.op == "Gemm":   # FULLY_CONNECTED rounds once: (acc * M + 2**(S-1)) >> S
        attrs["rounding"] = "half_up"                              # (BATCH_MATMUL, a MatMul, rounds twice)
    inputs = [ctx.as_int(a), b_int_name] + bias_constant(ctx, node, bias, acc_bits)
    result = ctx.emit("QMatMul", inputs, attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None


@integer_rule("Gemm")
def gemm(ctx: LoweringContext, node: Node) -> str | None:
    if node.attrs.transA:
        return "transA=1"
    if ctx.value(node.inputs[1]) is None:
        return "B is not constant"
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    return _matmul(ctx, node, node.inputs[0], node.inputs[1], c, trans_b=bool(node.attrs.transB),
                   alpha=float(node.attrs.alpha), beta=float(node.attrs.beta))


@integer_rule("MatMul")
def matmul(ctx: LoweringContext, node: Node) -> str | None:
    a, b = node.inputs
    if ctx.source.type_of(a).rank < 2 or ctx.source.type_of(b).rank < 2:
        return "1-D operand"
    return _matmul(ctx, node, a, b, "", trans_b=False)


@integer_rule("BatchNormalization")
def batch_normalization(ctx: LoweringContext, node: Node) -> str | None:
    """A BatchNormalization the import could not fold (e.g. after a Concat) is a per-channel affine map:
    a depthwise 1x1 QConv whose weights (symmetric, per channel) and int32 bias come from its parameters."""
    if node.attrs.training_mode:
        return "training mode"
    x, scale, bias, mean, var = node.inputs
    params = [ctx.value(name) for name in (scale, bias, mean, var)]
    if any(p is None for p in params) or ctx.source.type_of(x).rank < 3:
        return "parameters are not constant" if any(p is None for p in params) else "input has no spatial axes"
    slope, offset = BatchNormalization.affine(node.attrs, *params)
    xq = ctx.quant(x)
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    rank = ctx.source.type_of(x).rank
    channels = slope.size
    wide = xq.numpy_dtype == "int16"
    top = 32767 if wide else 127
    magnitude = np.abs(slope).astype(np.float64)
    largest = float(magnitude.max(initial=0.0))
    w_scale = np.where(magnitude > 0, magnitude / top, largest / top if largest > 0 else 1.0)
    limit = bias_limit(xq, "int16" if wide else "int8")
    offset = offset.astype(np.float64).reshape(-1)
    w_scale = fit_bias(ctx, node, offset, float(xq.scale[0]), w_scale, limit)
    weights = np.rint(slope / w_scale).astype(np.int16 if wide else np.int8).reshape((channels, 1) + (1,) * (rank - 2))
    real_in = float(xq.scale[0]) * w_scale
    bias_q = integer_bias(ctx, node, offset, real_in, limit)
    acc_bits = accumulator_bits(xq, weights, 0, 1, bias_q)
    attrs = {"group": channels, "kernel_shape": (1,) * (rank - 2),
             **requant_fields(real_in / float(yq.scale[0]), yq, acc_bits, lo, hi, ctx.table.rounding),
             "x_zero_point": int(xq.zero_point[0]), "w_zero_point": 0}
    inputs = [ctx.as_int(x), ctx.constant(f"{node.name}_weight_q", weights)] + bias_constant(ctx, node, bias_q,
                                                                                              acc_bits)
    result = ctx.emit("QConv", inputs, attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None
