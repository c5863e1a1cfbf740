"""TFLite converters for the data-movement ops beyond reshaping and slicing (shape_ops.py): PAD, PADV2,
MIRROR_PAD, SPLIT, SPLIT_V, GATHER, TILE, BROADCAST_TO, DEPTH_TO_SPACE, SPACE_TO_DEPTH, SPACE_TO_BATCH_ND and
BATCH_TO_SPACE_ND (what the converter leaves around a dilated convolution it could not fuse, e.g. a Keras
Conv1D with dilation_rate > 1: Pad/Reshape/Transpose/Reshape and Reshape/Transpose/Reshape/Slice).

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


def _blocks(ctx: TfliteContext, node: SourceNode, x: str) -> tuple[tuple[int, ...], list[int], np.ndarray]:
    """x's shape, block_shape (M) and the (M, 2) paddings or crops of SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND."""
    shape = ctx.type_of(x).shape
    block = ctx.ints(node, 1, "block shape")
    edges = np.asarray(ctx.constant(node, 2, "paddings" if node.op_type == "SPACE_TO_BATCH_ND" else "crops"),
                       dtype=np.int64).reshape(-1, 2)
    if not block or len(block) != len(edges) or len(block) > len(shape) - 1 or min(block) < 1 or (edges < 0).any():
        raise PegasusError(f"{node.describe()}: block shape {block} and {edges.tolist()} do not fit input "
                           f"{list(shape)}")
    return shape, block, edges


@converter("SPACE_TO_BATCH_ND")
def space_to_batch_nd(ctx: TfliteContext, node: SourceNode) -> None:
    """SPACE_TO_BATCH_ND: x (N, S1..SM, rest) padded, then block b_i of every spatial axis moved to the batch:
    (N, P1/b1, b1, ..., PM/bM, bM, rest) -> (b1, ..., bM, N, P1/b1, ..., rest) -> (N*prod(b), P1/b1, ..., rest)."""
    x = node.inputs[0]
    shape, block, pads = _blocks(ctx, node, x)
    m = len(block)
    padded = [shape[1 + i] + int(pads[i].sum()) for i in range(m)]
    if any(p % b for p, b in zip(padded, block)):
        raise PegasusError(f"{node.describe()}: padded spatial sizes {padded} are not multiples of the block shape "
                           f"{block}")
    if pads.any():
        zeros = [0] * (len(shape) - 1 - m)
        attrs = {"pads": (0, *pads[:, 0].tolist(), *zeros, 0, *pads[:, 1].tolist(), *zeros), "mode": "constant",
                 "constant_value": 0.0}
        x = ctx.emit("Pad", [x], attrs, node=node, suffix="/pad")[0]
    rest = tuple(shape[1 + m:])
    split = (shape[0], *[d for p, b in zip(padded, block) for d in (p // b, b)], *rest)
    perm = (*[2 + 2 * i for i in range(m)], 0, *[1 + 2 * i for i in range(m)], *range(1 + 2 * m, len(split)))
    out = (shape[0] * int(np.prod(block)), *[p // b for p, b in zip(padded, block)], *rest)
    x = ctx.emit("Reshape", [x], {"shape": split}, node=node, suffix="/blocks")[0]
    x = ctx.emit("Transpose", [x], {"perm": perm}, node=node, suffix="/transpose")[0]
    ctx.emit("Reshape", [x], {"shape": out}, node=node)


@converter("BATCH_TO_SPACE_ND")
def batch_to_space_nd(ctx: TfliteContext, node: SourceNode) -> None:
    """BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND's inverse: (b1, ..., bM, N, S1..SM, rest) -> (N, S1, b1, ..., SM,
    bM, rest) -> (N, S1*b1, ..., SM*bM, rest), then the crops sliced off."""
    x = node.inputs[0]
    shape, block, crops = _blocks(ctx, node, x)
    m, count = len(block), int(np.prod(block))
    if shape[0] % count:
        raise PegasusError(f"{node.describe()}: batch {shape[0]} is not a multiple of the block shape {block}")
    batch, spatial, rest = shape[0] // count, tuple(shape[1:1 + m]), tuple(shape[1 + m:])
    split = (*block, batch, *spatial, *rest)
    perm = (m, *[d for i in range(m) for d in (m + 1 + i, i)], *range(2 * m + 1, len(split)))
    joined = (batch, *[s * b for s, b in zip(spatial, block)], *rest)
    x = ctx.emit("Reshape", [x], {"shape": split}, node=node, suffix="/blocks")[0]
    x = ctx.emit("Transpose", [x], {"perm": perm}, node=node, suffix="/transpose")[0]
    if not crops.any():
        ctx.emit("Reshape", [x], {"shape": joined}, node=node)
        return
    x = ctx.emit("Reshape", [x], {"shape": joined}, node=node, suffix="/joined")[0]
    axes = tuple(range(1, m + 1))
    attrs = {"starts": tuple(int(c[0]) for c in crops), "ends": tuple(j - int(c[1]) for c, j in zip(crops, joined[1:])),
             "axes": axes, "steps": (1,) * m}
    ctx.emit("Slice", [x], attrs, node=node)
