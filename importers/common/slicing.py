"""TF's slicing ops, shared by the TF-family importers (TFLite's STRIDED_SLICE/SLICE/SPLIT_V/UNPACK,
TensorFlow's StridedSlice/Slice/SplitV/Unpack): the begin/end/strides vectors and their five masks read as a
NumPy index, which is TF's definition (``strided_index``), and any NumPy basic index emitted as registry ops
(``emit_index``): one Slice over the input's axes, plus a Reshape for the axes the index adds (None,
new_axis_mask) or drops (an integer, shrink_axis_mask); a split by sizes where one size may be -1
(``emit_split``), and an unpack into size-1 pieces without the axis (``emit_unpack``)."""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ImportContext, SourceNode
from pegasus.ops.common import normalize_axis


def _bit(mask: int, i: int) -> bool:
    return bool((int(mask) >> i) & 1)


def strided_index(node: SourceNode, begin: list[int], end: list[int], strides: list[int]) -> tuple:
    """TF's strided-slice specification (masks in ``node.attrs``) as a NumPy index tuple."""
    attrs = node.attrs
    if len(end) != len(begin) or len(strides) != len(begin):
        raise PegasusError(f"{node.describe()}: begin, end and strides have {len(begin)}, {len(end)} and "
                           f"{len(strides)} values (one each per axis)")
    if 0 in strides:
        raise PegasusError(f"{node.describe()}: a stride is 0")
    if bin(int(attrs.get("ellipsis_mask", 0)) & ((1 << len(begin)) - 1)).count("1") > 1:
        raise PegasusError(f"{node.describe()}: ellipsis_mask marks more than one axis")
    index: list = []
    for i in range(len(begin)):
        if _bit(attrs.get("ellipsis_mask", 0), i):
            index.append(Ellipsis)
        elif _bit(attrs.get("new_axis_mask", 0), i):
            index.append(None)
        elif _bit(attrs.get("shrink_axis_mask", 0), i):
            index.append(int(begin[i]))
        else:
            start = None if _bit(attrs.get("begin_mask", 0), i) else int(begin[i])
            stop = None if _bit(attrs.get("end_mask", 0), i) else int(end[i]) + (
                int(begin[i]) if attrs.get("offset", False) else 0)
            index.append(slice(start, stop, int(strides[i])))
    return tuple(index)


def emit_index(ctx: ImportContext, node: SourceNode, index: tuple) -> None:
    """Emit ``x[index]`` (slices, ints, None, Ellipsis) of the node's input 0 as one Slice over x's axes and a
    Reshape, writing the node's output."""
    in_shape = ctx.type_of(node.inputs[0]).shape
    try:
        result_shape = np.empty(in_shape, dtype=np.bool_)[index].shape
    except (IndexError, ValueError, TypeError) as exc:  # more indices than axes, an index past the end
        raise PegasusError(f"{node.describe()}: the slice does not fit input shape {list(in_shape)} ({exc})") from None
    explicit = sum(1 for item in index if item is not None and item is not Ellipsis)
    expanded: list = []
    for item in index:
        if item is Ellipsis:
            expanded += [slice(None)] * (len(in_shape) - explicit)
        elif item is not None:
            expanded.append(item)
    expanded += [slice(None)] * (len(in_shape) - len(expanded))
    starts, ends, steps, axes = [], [], [], []
    for axis, (item, dim) in enumerate(zip(expanded, in_shape)):
        if isinstance(item, int):
            item = slice(item % dim, item % dim + 1, 1)
        start, stop, step = item.indices(dim)
        if (start, stop, step) == (0, dim, 1):
            continue
        starts.append(start)
        ends.append(stop if stop >= 0 else -(dim + 1))
        steps.append(step)
        axes.append(axis)
    sliced_shape = tuple(len(range(*item.indices(dim))) if isinstance(item, slice) else 1
                         for item, dim in zip(expanded, in_shape))
    x = node.inputs[0]
    if not axes:
        ctx.emit("Reshape" if tuple(result_shape) != in_shape else "Identity", [x],
                 {"shape": tuple(result_shape)} if tuple(result_shape) != in_shape else {}, node=node)
        return
    attrs = {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(axes), "steps": tuple(steps)}
    if sliced_shape == tuple(result_shape):
        ctx.emit("Slice", [x], attrs, node=node)
        return
    sliced = ctx.emit("Slice", [x], attrs, node=node, suffix="/slice")[0]
    ctx.emit("Reshape", [sliced], {"shape": tuple(result_shape)}, node=node)


def emit_split(ctx: ImportContext, node: SourceNode, x: str, axis: int, sizes: list[int]) -> None:
    """Split ``x`` along ``axis`` into pieces of ``sizes`` (one of them may be -1: the rest) as the node's
    outputs."""
    shape = ctx.type_of(x).shape
    axis = normalize_axis(axis, len(shape))
    sizes = list(sizes)
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
    if sum(sizes) != shape[axis] or min(sizes) < 0:
        raise PegasusError(f"{node.describe()}: sizes {sizes} do not split axis {axis} of size {shape[axis]}")
    ctx.emit("Split", [x], {"axis": axis, "split": tuple(sizes)}, node=node, outputs=node.outputs)


def emit_unpack(ctx: ImportContext, node: SourceNode, axis: int) -> None:
    """Split input 0 along ``axis`` into size-1 pieces and drop the axis, one piece per output."""
    shape = ctx.type_of(node.inputs[0]).shape
    axis = axis % len(shape)
    count = shape[axis]
    pieces = ctx.emit("Split", [node.inputs[0]], {"axis": axis, "split": (1,) * count}, node=node,
                      outputs=[ctx.graph.unique_tensor_name(f"{node.name}/piece_{i}") for i in range(count)])
    for i, (piece, out) in enumerate(zip(pieces, node.outputs)):
        ctx.emit("Squeeze", [piece], {"axes": (axis,)}, node=node, outputs=[out], suffix=f"/squeeze_{i}")
