"""TFLite converters for RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: NHWC images resized to the
(height, width) of a constant input, with TF's align_corners / half_pixel_centers flags mapped onto the
registry Resize's coordinate modes once for every TF-family importer (importers/common/channels_last.py)."""

from __future__ import annotations

from pegasus.importers.common.channels_last import resize_attrs
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

_MODES = {"RESIZE_BILINEAR": "linear", "RESIZE_NEAREST_NEIGHBOR": "nearest"}


@converter(*_MODES)
def resize(ctx: TfliteContext, node: SourceNode) -> None:
    attrs = resize_attrs(node, _MODES[node.op_type], ctx.type_of(node.inputs[0]).shape, ctx.ints(node, 1, "size"),
                         node.attrs.get("align_corners", False), node.attrs.get("half_pixel_centers", False))
    ctx.emit("Resize", [node.inputs[0]], attrs, node=node)
