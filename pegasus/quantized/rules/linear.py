"""Integer rules for the MAC-heavy ops: Conv → QConv, Gemm/MatMul → QMatMul, and an unfolded
BatchNormalization → depthwise 1x1 QConv.

Weights are put on their table grid (per tensor, or per output channel), the bias becomes int32 at
scale ``s_x * s_w[c]``, and the output requantisation factor ``s_x * s_w[c] / s_y`` becomes a
fixed-point multiplier per channel. A ReLU/Clip that is the only reader is fused into the clamp.
"""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.fixedpoint import bits_needed
from pegasus.ops.normalization import BatchNormalization
from pegasus.quantized.lower import LoweringContext, integer_rule
from pegasus.quantized.params import TensorQuant
from pegasus.quantized.rules.common import fused_output, requant_fields


def _channel_scales(q: TensorQuant, channels: int) -> np.ndarray:
    scales = q.scales()
    return np.broadcast_to(scales if scales.size > 1 else scales.reshape(1), (channels,)).astype(np.float64)


def _bias(ctx: LoweringContext, name: str | None, real_scale: np.ndarray, beta: float = 1.0) -> np.ndarray | None:
    if not name:
        return None
    value = ctx.value(name)
    return np.rint(beta * value.astype(np.float64).reshape(-1) / real_scale).astype(np.int64)


def _accumulator_bits(x: TensorQuant, w_int: np.ndarray, w_zero: int, taps: int, bias: np.ndarray | None) -> int:
    x_span = float(np.iinfo(x.numpy_dtype).max) - float(np.iinfo(x.numpy_dtype).min)
    w_span = float(np.abs(w_int.astype(np.int64) - w_zero).max(initial=0))
    total = x_span * w_span * taps + (float(np.abs(bias).max(initial=0)) if bias is not None else 0.0)
    return bits_needed(total)


def _bias_constant(ctx: LoweringContext, node: Node, bias: np.ndarray | None, acc_bits: int) -> list[str]:
    if bias is None:
        return []
    dtype = np.int32 if acc_bits <= 32 else np.int64
    return [ctx.constant(f"{node.name}_bias_q", bias.astype(dtype))]


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
    weights = ctx.as_int(w)
    w_int = ctx.graph.value_of(weights)
    channels = w_int.shape[0]
    real_in = float(xq.scale[0]) * _channel_scales(wq, channels)
    bias = _bias(ctx, b, real_in)
    w_zero = int(wq.zero_point[0])
    acc_bits = _accumulator_bits(xq, w_int, w_zero, int(np.prod(w_int.shape[1:])), bias)
    attrs = {**{f: getattr(node.attrs, f) for f in node.attrs.__dataclass_fields__},
             **requant_fields(real_in / float(yq.scale[0]), yq, acc_bits, lo, hi),
             "x_zero_point": int(xq.zero_point[0]), "w_zero_point": w_zero}
    inputs = [ctx.as_int(x), weights] + _bias_constant(ctx, node, bias, acc_bits)
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
    b_int_name = ctx.as_int(b)
    columns = ctx.source.type_of(b).shape[0 if trans_b else -1]
    if trans_b:
        b_int_name = ctx.constant(f"{b}_q_t", ctx.graph.value_of(b_int_name).T.copy())
    real_in = alpha * float(aq.scale[0]) * _channel_scales(bq, columns)
    bias = None
    if bias_name:
        c = ctx.value(bias_name)
        if c is None or c.size not in (1, columns) or (c.ndim == 2 and c.shape[0] != 1):
            return "C is not a constant per-column bias"
        bias = _bias(ctx, bias_name, real_in, beta)
        bias = np.broadcast_to(bias, (columns,)).copy()
    b_val = ctx.graph.value_of(b_int_name)
    b_zero = int(bq.zero_point[0])
    if b_val is not None:
        acc_bits = _accumulator_bits(aq, b_val, b_zero, b_val.shape[-2], bias)
    else:
        span = float(np.iinfo(bq.numpy_dtype).max) - float(np.iinfo(bq.numpy_dtype).min)
        acc_bits = _accumulator_bits(aq, np.array([span]), 0, ctx.source.type_of(a).shape[-1], bias)
    attrs = {**requant_fields(real_in / float(yq.scale[0]), yq, acc_bits, lo, hi),
             "a_zero_point": int(aq.zero_point[0]), "b_zero_point": b_zero}
    inputs = [ctx.as_int(a), b_int_name] + _bias_constant(ctx, node, bias, acc_bits)
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
    w_scale = np.where(np.abs(slope) > 0, np.abs(slope) / top, 1.0)
    weights = np.rint(slope / w_scale).astype(np.int16 if wide else np.int8).reshape((channels, 1) + (1,) * (rank - 2))
    real_in = float(xq.scale[0]) * w_scale
    bias_q = np.rint(offset / real_in).astype(np.int64)
    acc_bits = _accumulator_bits(xq, weights, 0, 1, bias_q)
    attrs = {"group": channels, "kernel_shape": (1,) * (rank - 2),
             **requant_fields(real_in / float(yq.scale[0]), yq, acc_bits, lo, hi),
             "x_zero_point": int(xq.zero_point[0]), "w_zero_point": 0}
    inputs = [ctx.as_int(x), ctx.constant(f"{node.name}_weight_q", weights)] + _bias_constant(ctx, node, bias_q,
                                                                                              acc_bits)
    result = ctx.emit("QConv", inputs, attrs, name=node.name, outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None
