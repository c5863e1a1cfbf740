"""TFLite converters for pooling: MAX_POOL_2D, AVERAGE_POOL_2D (padding excluded from the average, as TF
does) and L2_POOL_2D (the square root of the average of squares), all on NHWC activations."""

from __future__ import annotations

from pegasus.importers.common.channels_last import emit_activated, padding
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter


def _window(node: SourceNode) -> dict:
    attrs = node.attrs
    return {**padding(node, attrs.get("padding", "VALID")), "channels_last": True,
            "kernel_shape": (int(attrs["filter_height"]), int(attrs["filter_width"])),
            "strides": (int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1)))}


@converter("MAX_POOL_2D")
def max_pool(ctx: TfliteContext, node: SourceNode) -> None:
    emit_activated(ctx, node, "MaxPool", [node.inputs[0]], _window(node), ctx.activation(node))


@converter("AVERAGE_POOL_2D")
def average_pool(ctx: TfliteContext, node: SourceNode) -> None:
    emit_activated(ctx, node, "AveragePool", [node.inputs[0]], _window(node), ctx.activation(node))


@converter("L2_POOL_2D")
def l2_pool(ctx: TfliteContext, node: SourceNode) -> None:
    x = node.inputs[0]
    squares = ctx.emit("Mul", [x, x], node=node, suffix="/square")[0]
    mean = ctx.emit("AveragePool", [squares], _window(node), node=node, suffix="/mean")[0]
    emit_activated(ctx, node, "Sqrt", [mean], {}, ctx.activation(node))
