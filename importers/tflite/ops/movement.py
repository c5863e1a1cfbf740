"""TFLite converters for the data-movement ops beyond reshaping and slicing (shape_ops.py): PAD, PADV2,
MIRROR_PAD, SPLIT, SPLIT_V, GATHER, TILE, BROADCAST_TO, DEPTH_TO_SPACE and SPACE_TO_DEPTH.

TF's pad modes and its NHWC depth/space rearrangements are shared with the other channels-last
frameworks (importers/common/channels_last.py); the sizes and axes TFLite passes as tensors must be known
at compile time.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import emit_depth_to_space, emit_pad
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.common.slicing import emit_split
from pegasus.importers.tflite.context import TfliteContext, converter
from pegasus.ops.common import normalize_axis


@converter("PAD", "PADV2")
def pad(ctx: TfliteContext, node: SourceNode) -> None:
    """PAD / PADV2: paddings (rank, 2) in input 1; PADV2's pad value in input 2 (else zero)."""
    paddings = ctx.constant(node, 1, "paddings")
    value = ctx.constant(node, 2, "constant value", default=0.0)
    emit_pad(ctx, node, node.inputs[0], paddings, "CONSTANT", float(np.asarray(value).reshape(-1)[0]))


@converter("MIRROR_PAD")
def mirror_pad(ctx: TfliteContext, node: SourceNode) -> None:
    emit_pad(ctx, node, node.inputs[0], ctx.constant(node, 1, "paddings"), str(node.attrs.get("mode", "REFLECT")))


@converter("SPLIT")
def split(ctx: TfliteContext, node: SourceNode) -> None:
    """SPLIT: inputs (axis, x) into num_splits equal parts."""
    x, count = node.inputs[1], int(node.attrs.get("num_splits", len(node.outputs)))
    axis = ctx.ints(node, 0, "axis")[0]
    dim = ctx.type_of(x).shape[normalize_axis(axis, len(ctx.type_of(x).shape))]
    if dim % count:
        raise PegasusError(f"{node.describe()}: axis {axis} of size {dim} does not split into {count} equal parts")
    emit_split(ctx, node, x, axis, [dim // count] * count)


@converter("SPLIT_V")
def split_v(ctx: TfliteContext, node: SourceNode) -> None:
    """SPLIT_V: inputs (x, size_splits, axis); one size may be -1 (the rest)."""
    emit_split(ctx, node, node.inputs[0], ctx.ints(node, 2, "axis")[0], ctx.ints(node, 1, "size splits"))


@converter("GATHER")
def gather(ctx: TfliteContext, node: SourceNode) -> None:
    if int(node.attrs.get("batch_dims", 0)):
        raise PegasusError(f"{node.describe()}: batch_dims {node.attrs['batch_dims']} is not supported (only 0)")
    ctx.emit("Gather", node.inputs[:2], {"axis": int(node.attrs.get("axis", 0))}, node=node)


@converter("TILE")
def tile(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("Tile", [node.inputs[0]], {"repeats": tuple(ctx.ints(node, 1, "multiples"))}, node=node)


@converter("BROADCAST_TO")
def broadcast_to(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("Expand", [node.inputs[0]], {"shape": tuple(ctx.ints(node, 1, "shape"))}, node=node)


@converter("DEPTH_TO_SPACE", "SPACE_TO_DEPTH")
def depth_space(ctx: TfliteContext, node: SourceNode) -> None:
    block = int(node.attrs.get("block_size", 0))
    if block < 1:
        raise PegasusError(f"{node.describe()}: block_size {block} must be at least 1")
    emit_depth_to_space(ctx, node, node.inputs[0], block, to_depth=node.op_type == "SPACE_TO_DEPTH")
