"""TensorFlow converters for shapes and data movement: Shape, Size, Rank, Reshape, Squeeze, ExpandDims,
Transpose, ConcatV2/Concat, Pack, Unpack, StridedSlice, Slice, Split, SplitV, Tile, Fill, BroadcastTo,
GatherV2/Gather, ZerosLike/OnesLike and Range.

Every input shape is static, so Shape, Size, Rank and the chains built on them (Shape -> StridedSlice -> Pack
-> Reshape, the tf.function plumbing Keras leaves in a graph) fold to constants as they are converted;
parameters passed as tensors (a Reshape's shape, a slice's bounds) must be constants. StridedSlice's masks
are read once for every TF-family importer (importers/common/slicing.py). A tensor folded here (Fill, ZerosLike,
Range) is checked against the size budget (pegasus.limits) before it is allocated.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.common.slicing import emit_index, emit_split, emit_unpack, strided_index
from pegasus.importers.tensorflow.context import TfContext, converter
from pegasus.ir.dtypes import DType
from pegasus.limits import check_count, check_tensor
from pegasus.ops.common import normalize_axis
from pegasus.ops.shape_ops import resolve_reshape, resolve_squeeze_axes, resolve_unsqueeze_axes


def _shape(ctx: TfContext, node: SourceNode, index: int = 0) -> tuple[int, ...]:
    return ctx.type_of(node.inputs[index]).shape


def _constant_output(ctx: TfContext, node: SourceNode, value, dtype: str) -> None:
    ctx.builder.set_constant(node.outputs[0], np.asarray(value, dtype=dtype))


@converter("Shape")
def shape(ctx: TfContext, node: SourceNode) -> None:
    _constant_output(ctx, node, _shape(ctx, node), str(node.attrs.get("out_type", "int32")))


@converter("Size")
def size(ctx: TfContext, node: SourceNode) -> None:
    _constant_output(ctx, node, int(np.prod(_shape(ctx, node), dtype=np.int64)), str(node.attrs.get("out_type",
                                                                                                    "int32")))


@converter("Rank")
def rank(ctx: TfContext, node: SourceNode) -> None:
    _constant_output(ctx, node, len(_shape(ctx, node)), "int32")


@converter("ZerosLike", "OnesLike")
def zeros_like(ctx: TfContext, node: SourceNode) -> None:
    ttype = ctx.type_of(node.inputs[0])
    fill = np.zeros if node.op_type == "ZerosLike" else np.ones
    check_tensor(ttype.shape, ttype.dtype.numpy.itemsize, node.describe())
    ctx.builder.set_constant(node.outputs[0], fill(ttype.shape, ttype.dtype.numpy))


@converter("Reshape")
def reshape(ctx: TfContext, node: SourceNode) -> None:
    """Reshape to input 1 (-1 inferred; 0 is a real size in TensorFlow)."""
    target = resolve_reshape(_shape(ctx, node), ctx.ints(node, 1, "shape"), True)
    ctx.emit("Reshape", [node.inputs[0]], {"shape": target}, node=node, outputs=node.outputs[:1])


@converter("Squeeze")
def squeeze(ctx: TfContext, node: SourceNode) -> None:
    axes = resolve_squeeze_axes(_shape(ctx, node), list(node.attrs.get("squeeze_dims", [])))
    ctx.emit("Squeeze", [node.inputs[0]], {"axes": axes}, node=node, outputs=node.outputs[:1])


@converter("ExpandDims")
def expand_dims(ctx: TfContext, node: SourceNode) -> None:
    axes = resolve_unsqueeze_axes(len(_shape(ctx, node)), ctx.ints(node, 1, "axis"))
    ctx.emit("Unsqueeze", [node.inputs[0]], {"axes": axes}, node=node, outputs=node.outputs[:1])


@converter("Transpose")
def transpose(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit("Transpose", [node.inputs[0]], {"perm": tuple(ctx.ints(node, 1, "permutation"))}, node=node,
             outputs=node.outputs[:1])


@converter("ConcatV2", "Concat")
def concat(ctx: TfContext, node: SourceNode) -> None:
    """ConcatV2(values..., axis); the older Concat(axis, values...)."""
    axis_index, values = (-1, node.inputs[:-1]) if node.op_type == "ConcatV2" else (0, node.inputs[1:])
    axis = ctx.ints(node, axis_index % len(node.inputs), "axis")[0]
    if len(values) == 1:
        ctx.emit("Identity", list(values), node=node, outputs=node.outputs[:1])
        return
    ctx.emit("Concat", list(values), {"axis": axis}, node=node, outputs=node.outputs[:1])


@converter("Pack")
def pack(ctx: TfContext, node: SourceNode) -> None:
    """Pack: stack the inputs along a new axis = Unsqueeze each, then Concat."""
    axis = int(node.attrs.get("axis", 0)) % (len(_shape(ctx, node)) + 1)
    parts = [ctx.emit("Unsqueeze", [name], {"axes": (axis,)}, node=node, suffix=f"/unsqueeze_{i}")[0]
             for i, name in enumerate(node.inputs)]
    ctx.emit("Concat", parts, {"axis": axis}, node=node, outputs=node.outputs[:1])


@converter("Unpack")
def unpack(ctx: TfContext, node: SourceNode) -> None:
    """Unpack: split along ``axis`` into size-1 pieces and drop the axis."""
    emit_unpack(ctx, node, int(node.attrs.get("axis", 0)))


@converter("Split")
def split(ctx: TfContext, node: SourceNode) -> None:
    """Split(split_dim, value) into num_split equal parts."""
    x, count = node.inputs[1], int(node.attrs.get("num_split", len(node.outputs)))
    axis = ctx.ints(node, 0, "split dimension")[0]
    dim = ctx.type_of(x).shape[normalize_axis(axis, ctx.type_of(x).rank)]
    if dim % count:
        raise PegasusError(f"{node.describe()}: axis {axis} of size {dim} does not split into {count} equal parts")
    emit_split(ctx, node, x, axis, [dim // count] * count)


@converter("SplitV")
def split_v(ctx: TfContext, node: SourceNode) -> None:
    """SplitV(value, size_splits, split_dim); one size may be -1 (the rest)."""
    emit_split(ctx, node, node.inputs[0], ctx.ints(node, 2, "split dimension")[0], ctx.ints(node, 1, "size splits"))


@converter("StridedSlice")
def strided_slice(ctx: TfContext, node: SourceNode) -> None:
    begin, end = ctx.ints(node, 1, "begin"), ctx.ints(node, 2, "end")
    strides = ctx.ints(node, 3, "strides") if node.input(3) else [1] * len(begin)
    emit_index(ctx, node, strided_index(node, begin, end, strides))


@converter("Slice")
def slice_(ctx: TfContext, node: SourceNode) -> None:
    """Slice(input, begin, size); a size of -1 takes the rest of the axis."""
    begin, sizes = ctx.ints(node, 1, "begin"), ctx.ints(node, 2, "size")
    emit_index(ctx, node, tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, sizes)))


@converter("Tile")
def tile(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit("Tile", [node.inputs[0]], {"repeats": tuple(ctx.ints(node, 1, "multiples"))}, node=node,
             outputs=node.outputs[:1])


@converter("Fill")
def fill(ctx: TfContext, node: SourceNode) -> None:
    """Fill(dims, value): a constant when the value is one, else the value broadcast (Expand)."""
    dims = tuple(ctx.ints(node, 0, "dims"))
    value = ctx.value(node.inputs[1])
    if value is not None:
        check_tensor(dims, value.dtype.itemsize, node.describe())
        ctx.builder.set_constant(node.outputs[0], np.full(dims, value.reshape(()), dtype=value.dtype))
        return
    ctx.emit("Expand", [node.inputs[1]], {"shape": dims}, node=node, outputs=node.outputs[:1])


@converter("BroadcastTo")
def broadcast_to(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit("Expand", [node.inputs[0]], {"shape": tuple(ctx.ints(node, 1, "shape"))}, node=node,
             outputs=node.outputs[:1])


@converter("GatherV2", "Gather")
def gather(ctx: TfContext, node: SourceNode) -> None:
    """GatherV2(params, indices, axis) with batch_dims 0; the older Gather along axis 0."""
    if int(node.attrs.get("batch_dims", 0)):
        raise PegasusError(f"{node.describe()}: batch_dims {node.attrs['batch_dims']} is not supported (only 0)")
    axis = ctx.ints(node, 2, "axis")[0] if node.op_type == "GatherV2" else 0
    ctx.emit("Gather", node.inputs[:2], {"axis": axis}, node=node, outputs=node.outputs[:1])


@converter("Range")
def range_(ctx: TfContext, node: SourceNode) -> None:
    start, limit, delta = (ctx.constant(node, i, what).reshape(()) for i, what in
                           ((0, "start"), (1, "limit"), (2, "delta")))
    dtype = DType.parse(str(node.attrs.get("Tidx") or ctx.output_dtype(node))).numpy
    if not np.all(np.isfinite([start, limit, delta])) or delta == 0:
        raise PegasusError(f"{node.describe()}: Range({start}, {limit}, {delta}) is not a finite range")
    check_count(max(0, int(np.ceil((float(limit) - float(start)) / float(delta)))), np.dtype(dtype).itemsize,
                node.describe())
    _constant_output(ctx, node, np.arange(start, limit, delta), dtype)
