"""Keras converters for the convolutions: Conv1D/2D/3D, DepthwiseConv1D/2D, SeparableConv1D/2D and
Conv1DTranspose/2DTranspose/3DTranspose, each with its ``activation=``.

Kernels become the registry's layouts once, at import (importers/common/channels_last.py): Keras' (k...,
C/groups, M) kernels are the HWIO of TF, depthwise kernels (k..., C, multiplier) a group-C Conv, a
transposed kernel (k..., M, C) the (C, M, k...) of ConvTranspose. The activations keep the layer's
``data_format`` (``channels_last`` on the registry op), so no transpose is added. Padding: ``same`` is TF's
SAME (the odd pixel after), ``causal`` (Conv1D) pads (k-1)*dilation steps before. A transposed convolution
computes TF's conv_transpose to the output size Keras derives (``output_padding`` included).
"""

from __future__ import annotations

from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import depthwise_to_oihw, hwio_to_oihw, padding, transposed_conv_pads
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode

#: layer class -> number of spatial axes
CONVOLUTIONS = {"Conv1D": 1, "Conv2D": 2, "Conv3D": 3}
DEPTHWISE = {"DepthwiseConv1D": 1, "DepthwiseConv2D": 2}
SEPARABLE = {"SeparableConv1D": 1, "SeparableConv2D": 2}
TRANSPOSED = {"Conv1DTranspose": 1, "Conv2DTranspose": 2, "Conv3DTranspose": 3}


def ints(value: Any, n: int) -> tuple[int, ...]:
    """A Keras int-or-tuple argument as ``n`` ints."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    values = values * n if len(values) == 1 else values
    return tuple(int(v) for v in values)


def channels_last(node: KerasNode) -> bool:
    return node.attrs.get("data_format") in (None, "channels_last")


def window(node: KerasNode, n: int, kernel: tuple[int, ...]) -> dict[str, Any]:
    """Strides, dilations, layout and padding of a Keras convolution with ``n`` spatial axes."""
    cfg = node.attrs
    attrs: dict[str, Any] = {"strides": ints(cfg.get("strides", 1), n),
                             "dilations": ints(cfg.get("dilation_rate", 1), n),
                             "channels_last": channels_last(node), "kernel_shape": kernel}
    mode = str(cfg.get("padding", "valid")).lower()
    if mode == "causal":
        attrs["pads"] = ((kernel[0] - 1) * attrs["dilations"][0], 0)
    else:
        attrs.update(padding(node, mode))
    return attrs


def _channels(ctx: KerasContext, node: KerasNode, n: int) -> int:
    shape = ctx.type_of(node.inputs[0]).shape
    if len(shape) != n + 2:
        raise PegasusError(f"{node.describe()}: expects a rank-{n + 2} input, got {list(shape)}")
    return shape[-1] if channels_last(node) else shape[1]


def _roles(node: KerasNode, *kernels: str) -> list[str]:
    return list(kernels) + (["bias"] if node.attrs.get("use_bias", True) else [])


def _bias(ctx: KerasContext, node: KerasNode, w: dict) -> list[str]:
    return [ctx.param(node, "bias", w["bias"])] if "bias" in w else []


@converter(*CONVOLUTIONS)
def conv(ctx: KerasContext, node: KerasNode) -> None:
    n = CONVOLUTIONS[node.op_type]
    w = ctx.weights(node, _roles(node, "kernel"))
    channels, kernel = _channels(ctx, node, n), w["kernel"]
    if kernel.ndim != n + 2 or kernel.shape[-2] < 1 or channels % kernel.shape[-2]:
        raise PegasusError(f"{node.describe()}: kernel {list(kernel.shape)} does not fit {channels} input channels")
    attrs = {**window(node, n, kernel.shape[:n]), "group": channels // kernel.shape[-2]}
    ctx.activated(node, "Conv", [node.inputs[0], ctx.param(node, "kernel", hwio_to_oihw(kernel)), *_bias(ctx, node, w)],
                  attrs)


def _depthwise(ctx: KerasContext, node: KerasNode, n: int, kernel, bias: tuple[str, ...] = (), suffix: str = "") -> str:
    """A depthwise (k..., C, multiplier) kernel as a Conv with group C (output channel c * multiplier + m): the
    layer with its activation, or with a ``suffix`` a plain Conv before the layer."""
    channels = _channels(ctx, node, n)
    if kernel.ndim != n + 2 or kernel.shape[-2] != channels:
        raise PegasusError(f"{node.describe()}: depthwise kernel {list(kernel.shape)} does not fit {channels} "
                           "input channels")
    weights = depthwise_to_oihw(kernel.reshape(kernel.shape[:n] + (-1,)))
    attrs = {**window(node, n, kernel.shape[:n]), "group": channels}
    inputs = [node.inputs[0], ctx.param(node, "depthwise_kernel", weights), *bias]
    if suffix:
        return ctx.emit("Conv", inputs, attrs, node=node, suffix=suffix)[0]
    return ctx.activated(node, "Conv", inputs, attrs)


@converter(*DEPTHWISE)
def depthwise(ctx: KerasContext, node: KerasNode) -> None:
    n = DEPTHWISE[node.op_type]
    w = ctx.weights(node, _roles(node, "depthwise_kernel"))
    _depthwise(ctx, node, n, w["depthwise_kernel"], bias=tuple(_bias(ctx, node, w)))


@converter(*SEPARABLE)
def separable(ctx: KerasContext, node: KerasNode) -> None:
    """A depthwise Conv (layer ``<name>/depthwise``, the window's strides, dilation and padding) then a 1x1
    Conv with the bias and activation (the layer itself)."""
    n = SEPARABLE[node.op_type]
    w = ctx.weights(node, _roles(node, "depthwise_kernel", "pointwise_kernel"))
    spread = _depthwise(ctx, node, n, w["depthwise_kernel"], suffix="/depthwise")
    pointwise = w["pointwise_kernel"]
    attrs = {"channels_last": channels_last(node), "kernel_shape": (1,) * n}
    ctx.activated(node, "Conv", [spread, ctx.param(node, "pointwise_kernel", hwio_to_oihw(pointwise)),
                                 *_bias(ctx, node, w)], attrs)


def _deconv_length(size: int, k: int, s: int, d: int, mode: str, extra: int | None) -> int:
    """Keras' deconv_output_length."""
    k = k + (k - 1) * (d - 1)
    if extra is None:
        return size * s + max(k - s, 0) if mode == "valid" else size * s
    pad = k // 2 if mode == "same" else 0
    return (size - 1) * s + k - 2 * pad + extra


@converter(*TRANSPOSED)
def transposed(ctx: KerasContext, node: KerasNode) -> None:
    n = TRANSPOSED[node.op_type]
    cfg = node.attrs
    w = ctx.weights(node, _roles(node, "kernel"))
    kernel = w["kernel"]                                  # (k..., M, C)
    channels = _channels(ctx, node, n)
    if kernel.ndim != n + 2 or kernel.shape[-1] != channels:
        raise PegasusError(f"{node.describe()}: kernel {list(kernel.shape)} does not fit {channels} input channels")
    shape = ctx.type_of(node.inputs[0]).shape
    sizes = shape[1:-1] if channels_last(node) else shape[2:]
    mode = str(cfg.get("padding", "valid")).lower()
    if mode not in ("valid", "same"):
        raise PegasusError(f"{node.describe()}: padding '{mode}' is not valid or same")
    strides, dilations = ints(cfg.get("strides", 1), n), ints(cfg.get("dilation_rate", 1), n)
    extra = cfg.get("output_padding")
    extra = ints(extra, n) if extra is not None else (None,) * n
    out = [_deconv_length(size, k, s, d, mode, e)
           for size, k, s, d, e in zip(sizes, kernel.shape[:n], strides, dilations, extra)]
    attrs = {"channels_last": channels_last(node), "strides": strides, "dilations": dilations,
             "kernel_shape": kernel.shape[:n],
             **transposed_conv_pads(sizes, kernel.shape[:n], strides, dilations, out, mode == "same")}
    ctx.activated(node, "ConvTranspose", [node.inputs[0], ctx.param(node, "kernel", hwio_to_oihw(kernel)),
                                          *_bias(ctx, node, w)], attrs)
