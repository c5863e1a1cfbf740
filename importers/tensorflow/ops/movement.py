"""TensorFlow converters for padding, image resizing and depth/space moves: Pad, PadV2, MirrorPad (REFLECT,
SYMMETRIC), ResizeBilinear and ResizeNearestNeighbor (align_corners / half_pixel_centers as TensorFlow's kernels
compute them), DepthToSpace and SpaceToDepth (NHWC). The arithmetic of each is shared with the other
channels-last importers (importers/common/channels_last.py); sizes and paddings must be known at compile time.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import emit_depth_to_space, emit_pad, resize_attrs
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.context import TfContext, converter

_RESIZE = {"ResizeBilinear": "linear", "ResizeNearestNeighbor": "nearest"}


@converter("Pad", "PadV2")
def pad(ctx: TfContext, node: SourceNode) -> None:
    value = ctx.constant(node, 2, "constant values", default=0.0)
    emit_pad(ctx, node, node.inputs[0], ctx.constant(node, 1, "paddings"), "CONSTANT",
             float(np.asarray(value).reshape(-1)[0]))


@converter("MirrorPad")
def mirror_pad(ctx: TfContext, node: SourceNode) -> None:
    emit_pad(ctx, node, node.inputs[0], ctx.constant(node, 1, "paddings"), str(node.attrs.get("mode", "REFLECT")))


@converter(*_RESIZE)
def resize(ctx: TfContext, node: SourceNode) -> None:
    attrs = resize_attrs(node, _RESIZE[node.op_type], ctx.type_of(node.inputs[0]).shape, ctx.ints(node, 1, "size"),
                         node.attrs.get("align_corners", False), node.attrs.get("half_pixel_centers", False))
    ctx.emit("Resize", [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])


@converter("DepthToSpace", "SpaceToDepth")
def depth_space(ctx: TfContext, node: SourceNode) -> None:
    if not ctx.channels_last(node):
        raise PegasusError(f"{node.describe()}: data_format {node.attrs.get('data_format')} is not supported "
                           "(only NHWC)")
    block = int(node.attrs.get("block_size", 0))
    if block < 2:
        raise PegasusError(f"{node.describe()}: block_size {block} must be at least 2")
    emit_depth_to_space(ctx, node, node.inputs[0], block, to_depth=node.op_type == "SpaceToDepth")
