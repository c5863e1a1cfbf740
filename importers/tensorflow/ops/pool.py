"""TensorFlow converters for pooling: MaxPool, MaxPoolV2 (window and strides as inputs) and AvgPool (padding
excluded from the average, as TensorFlow does), NHWC or NCHW (``channels_last`` on the registry op)."""

from __future__ import annotations

from pegasus.importers.common.channels_last import padding
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.context import TfContext, converter
from pegasus.importers.tensorflow.ops.conv import explicit_pads

_OPS = {"MaxPool": "MaxPool", "MaxPoolV2": "MaxPool", "AvgPool": "AveragePool"}


@converter(*_OPS)
def pool(ctx: TfContext, node: SourceNode) -> None:
    given = node.op_type == "MaxPoolV2"    # ksize and strides as inputs 1 and 2
    attrs = {"kernel_shape": ctx.spatial(node, "ksize", ctx.ints(node, 1, "ksize") if given else None),
             "strides": ctx.spatial(node, "strides", ctx.ints(node, 2, "strides") if given else None),
             "channels_last": ctx.channels_last(node)}
    if node.attrs.get("padding") == "EXPLICIT":
        attrs["pads"] = explicit_pads(ctx, node)
    else:
        attrs.update(padding(node, node.attrs.get("padding", "VALID")))
    ctx.emit(_OPS[node.op_type], [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])
