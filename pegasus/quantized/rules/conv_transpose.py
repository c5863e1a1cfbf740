"""Integer rule for ConvTranspose: one QConv over the stride phases, then the phases interleaved.

Why. A transposed convolution (TFLite's TRANSPOSE_CONV, Keras' Conv2DTranspose, a UNet's or an autoencoder's
upsampling) had no integer kernel, so an int8 model ran it in float between a dequantize and a quantize: not
TFLite's arithmetic (a few LSB away from its reference kernels), and float code inside an integer bundle on a
Cortex-M. Rather than a second integer convolution with its own emitters for every CPU, the layer becomes
layers that already have them, exactly:

- Along an axis of stride s and kernel k, the full result's position f = s q + r (phase r) sums
  x[q - j] w[r + s j] over j: a stride-1 correlation of the input with the phase's sub-kernel of
  J = ceil(k / s) taps, ``v_r[t] = w[r + s (J - 1 - t)]`` (taps past k hold the weights' zero point, so they add
  nothing), the input padded by J - 1 before. All phases are one QConv of ``prod(strides) * M`` output
  channels, phase-major (channel p * M + m), each phase's channel requantised as the layer's channel m: the
  same sums, the same bias and multiplier as TFLite's scatter-accumulating reference kernel, so the same bits.
- The QConv's output (N, Q..., P * M) is viewed as (N, Q..., s..., M), transposed to (N, Q1, s1, Q2, s2, ...,
  M) and viewed as (N, Q1 s1, ..., M): the full result in order (channels first likewise); a Slice crops the
  layer's padding (TFLite's SAME, ONNX pads, output_padding and output_shape: ``transposed_window``).

Grouped and dilated layers keep running in float (the reason is listed).
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.conv import ConvTranspose
from pegasus.ops.layout import first_shape
from pegasus.quantized.context import LoweringContext, integer_rule
from pegasus.quantized.requant import requant_fields
from pegasus.quantized.rules.common import fused_output
from pegasus.quantized.rules.linear import accumulator_bits, accumulator_rounding, bias_constant, weights_and_bias


def phase_weights(w: np.ndarray, strides: tuple[int, ...], fill: int) -> np.ndarray:
    """ConvTranspose weights (C, M, k...) as the (P * M, C, J...) weights of the stride-1 correlation that
    computes every phase (module docstring): phase p (``np.ndindex(*strides)`` order) in rows p * M .. p * M + M,
    tap t of an axis holding w[r + s (J - 1 - t)], ``fill`` (the weights' zero point) past the kernel."""
    c, m, kernel = w.shape[0], w.shape[1], w.shape[2:]
    taps = tuple(-(-k // s) for k, s in zip(kernel, strides))
    out = np.full((prod(strides), m, c) + taps, fill, w.dtype)
    for p, phase in enumerate(np.ndindex(*strides)):
        sources = [r + s * (j - 1 - np.arange(j)) for r, s, j in zip(phase, strides, taps)]
        picked = w[np.ix_(range(c), range(m), *[np.minimum(src, k - 1) for src, k in zip(sources, kernel)])]
        inside = np.ones(taps, bool)
        for axis, (src, k) in enumerate(zip(sources, kernel)):
            inside &= (src < k).reshape([-1 if a == axis else 1 for a in range(len(taps))])
        out[p] = np.where(inside, picked, fill).transpose(1, 0, *range(2, 2 + len(kernel)))
    return out.reshape((prod(strides) * m, c) + taps)


def _interleave(ctx: LoweringContext, node: Node, phases: str, channels: int, strides: tuple[int, ...],
                sizes: tuple[int, ...], channels_last: bool, quant, output: str) -> str:
    """The QConv's phase-major output (N, Q..., P * M) (channels first: (N, P * M, Q...)) as (N, Q1 s1, ...,
    M): a view, one transpose, a view."""
    n = len(strides)
    batch = ctx.graph.type_of(phases).shape[0]
    if channels_last:
        split = (batch, *sizes, *strides, channels)
        perm = (0, *[a for i in range(n) for a in (1 + i, 1 + n + i)], 2 * n + 1)
        merged = (batch, *[q * s for q, s in zip(sizes, strides)], channels)
    else:
        split = (batch, *strides, channels, *sizes)
        perm = (0, n + 1, *[a for i in range(n) for a in (n + 2 + i, 1 + i)])
        merged = (batch, channels, *[q * s for q, s in zip(sizes, strides)])
    view = ctx.emit("Reshape", [phases], {"shape": split}, name=f"{node.name}_phases_split",
                    outputs=[f"{phases}_split"], quant=[quant])[0]
    moved = ctx.emit("Transpose", [view], {"perm": perm}, name=f"{node.name}_phases_interleave",
                     outputs=[f"{phases}_interleaved"], quant=[quant])[0]
    return ctx.emit("Reshape", [moved], {"shape": merged}, name=f"{node.name}_phases_merge",
                    outputs=[output], quant=[quant])[0]


@integer_rule("ConvTranspose")
def conv_transpose(ctx: LoweringContext, node: Node) -> str | None:
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    if ctx.value(w) is None or (b and ctx.value(b) is None):
        return "weights are not constant"
    if node.attrs.group != 1:
        return f"group {node.attrs.group} (only ungrouped transposed convolutions have an integer kernel)"
    channels_last = node.attrs.channels_last
    w_shape = ctx.source.type_of(w).shape
    x_shape = first_shape(ctx.source.type_of(x).shape, channels_last)
    win = ConvTranspose.geometry(replace(node.attrs, channels_last=False), x_shape, w_shape)
    if any(d != 1 for d in win.dilations):
        return f"dilations {list(win.dilations)}"
    xq, wq = ctx.quant(x), ctx.quant(w)
    if wq.per_channel and (wq.axis or 0) != 1:
        return f"per-channel weights along axis {wq.axis} (ConvTranspose needs axis 1)"
    out, lo, hi = fused_output(ctx, node)
    yq = ctx.quant(out)
    channels = w_shape[1]
    on_grid, bias, real_in = weights_and_bias(ctx, node, w, b, channels, 1)
    w_int = ctx.graph.value_of(on_grid)
    w_zero = int(wq.zero_point[0])
    strides = win.strides
    phases = prod(strides)
    weights = phase_weights(w_int, strides, w_zero)
    taps = weights.shape[2:]
    # the phases' positions must cover the crop [pads_begin, pads_begin + out) of the full result
    sizes = tuple(max(i + j - 1, -(-(p + o) // s)) for i, j, p, o, s in
                  zip(x_shape[2:], taps, win.pads_begin, win.out, strides))
    pads = tuple(j - 1 for j in taps) + tuple(q - i for q, i in zip(sizes, x_shape[2:]))
    bias = None if bias is None else np.tile(bias, phases)
    acc_bits = accumulator_bits(xq, weights, w_zero, int(np.prod(weights.shape[1:])), bias)
    attrs = {"kernel_shape": taps, "strides": (1,) * len(taps), "pads": pads, "dilations": (1,) * len(taps),
             "group": 1, "channels_last": channels_last,
             **requant_fields(np.tile(real_in, phases) / float(yq.scale[0]), yq, acc_bits, lo, hi,
                              ctx.table.rounding),
             "x_zero_point": int(xq.zero_point[0]), "w_zero_point": w_zero,
             "rounding": accumulator_rounding(ctx.table.rounding, xq)}
    inputs = [ctx.as_int(x), ctx.constant(f"{w}_phases_q", weights)] + bias_constant(ctx, node, bias, acc_bits)
    full = tuple(s * q for s, q in zip(strides, sizes))
    crop = tuple(win.out) != full or any(win.pads_begin)
    last = "qconv" if not crop and phases == 1 else "interleave" if not crop else "crop"
    result = ctx.emit("QConv", inputs, attrs, name=node.name,
                      outputs=[out if last == "qconv" else f"{out}_phases"], quant=[yq])[0]
    if phases > 1:
        result = _interleave(ctx, node, result, channels, strides, sizes, channels_last, yq,
                             out if last == "interleave" else f"{out}_full")
    if crop:
        first = 2 - int(channels_last)
        result = ctx.emit("Slice", [result], {"starts": tuple(win.pads_begin),
                                              "ends": tuple(p + o for p, o in zip(win.pads_begin, win.out)),
                                              "axes": tuple(range(first, first + len(taps))),
                                              "steps": (1,) * len(taps)},
                          name=f"{node.name}_crop", outputs=[out], quant=[yq])[0]
    ctx.set_home(out, result, yq)
    return None
