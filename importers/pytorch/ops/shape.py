"""PyTorch converters for the ops that move data without computing: flatten, view/reshape, permute,
transpose, cat, stack, split/chunk/unbind, slice, select, narrow, squeeze/unsqueeze, expand, repeat,
embedding (a Gather of the weight's rows).

Shapes are static by now, so every shape argument (a ``-1``, a ``view`` built from ``x.size(0)``) is
resolved to explicit sizes here; PyTorch's negative dims count from the end. ``slice``'s end may be
``sys.maxsize`` (to the end), as the registry's Slice clamps like ONNX does. ``select`` is a Gather of one
index (the axis goes away), ``stack`` an Unsqueeze of each input then a Concat.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter, dim


def explicit_shape(node: SourceNode, shape, total: int) -> tuple[int, ...]:
    """A view's shape with its -1 resolved."""
    shape = [int(d) for d in shape]
    known = math.prod(d for d in shape if d != -1)
    if shape.count(-1) > 1 or (shape.count(-1) and (known == 0 or total % known)):
        raise PegasusError(f"{node.describe()}: cannot view {total} elements as {shape}")
    return tuple(total // known if d == -1 else d for d in shape)


def _reshape(ctx: TorchContext, node: SourceNode, x: str, shape) -> None:
    ctx.emit("Reshape", [x], {"shape": explicit_shape(node, shape, math.prod(ctx.shape(x)))}, node=node)


@converter("aten::view", "aten::reshape", "aten::_unsafe_view", "aten::view_as", "aten::reshape_as")
def view(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    shape = ctx.shape(args["other"]) if "other" in args else args.get("size", args.get("shape"))
    _reshape(ctx, node, args["self"], shape)


@converter("aten::unflatten")
def unflatten(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    shape = ctx.shape(x)
    axis = dim(int(args["dim"]), len(shape))
    sizes = explicit_shape(node, args["sizes"], shape[axis])
    _reshape(ctx, node, x, list(shape[:axis]) + list(sizes) + list(shape[axis + 1:]))


@converter("aten::flatten")
def flatten(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args.get("self", args.get("input"))
    shape = ctx.shape(x)
    if not shape:
        _reshape(ctx, node, x, [1])
        return
    start, end = dim(int(args.get("start_dim", 0)), len(shape)), dim(int(args.get("end_dim", -1)), len(shape))
    _reshape(ctx, node, x, list(shape[:start]) + [math.prod(shape[start:end + 1])] + list(shape[end + 1:]))


@converter("aten::permute")
def permute(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    ctx.emit("Transpose", [x], {"perm": tuple(dim(int(d), ctx.rank(x)) for d in args["dims"])}, node=node)


@converter("aten::transpose", "aten::t", "aten::numpy_T", "aten::swapaxes", "aten::mT", "aten::mH")
def transpose(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    rank = ctx.rank(x)
    perm = list(range(rank))[::-1] if node.op_type in ("aten::t", "aten::numpy_T") else list(range(rank))
    if node.op_type in ("aten::mT", "aten::mH"):  # the last two axes (real tensors: mH is mT)
        perm[-2:] = perm[-1], perm[-2]
    elif node.op_type not in ("aten::t", "aten::numpy_T"):
        a, b = (dim(int(args[k]), rank) for k in (("dim0", "dim1") if "dim0" in args else ("axis0", "axis1")))
        perm[a], perm[b] = perm[b], perm[a]
    ctx.emit("Transpose", [x], {"perm": tuple(perm)}, node=node)


@converter("aten::cat", "aten::concat", "aten::concatenate")
def cat(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    tensors = [t for t in args["tensors"] if math.prod(ctx.shape(t)) or len(args["tensors"]) == 1]
    ctx.emit("Concat", tensors, {"axis": dim(int(args.get("dim", 0)), ctx.rank(tensors[0]))}, node=node)


@converter("aten::stack")
def stack(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    tensors = args["tensors"]
    axis = dim(int(args.get("dim", 0)), ctx.rank(tensors[0]) + 1)
    expanded = [ctx.emit("Unsqueeze", [t], {"axes": (axis,)}, node=node, suffix=f"/unsqueeze{i}")[0]
                for i, t in enumerate(tensors)]
    ctx.emit("Concat", expanded, {"axis": axis}, node=node)


def _split(ctx: TorchContext, node: SourceNode, x: str, sizes: list[int], axis: int) -> list[str]:
    outputs = ctx.output_names(node, len(sizes))  # a list value (unpacked later), or the node's own outputs
    ctx.emit("Split", [x], {"split": tuple(sizes), "axis": axis}, node=node, outputs=outputs)
    return outputs


@converter("aten::split", "aten::split_with_sizes", "aten::chunk", "prim::ConstantChunk", "aten::unsafe_split",
           "aten::tensor_split", "aten::unsafe_chunk", "aten::unbind")
def split(ctx: TorchContext, node: SourceNode) -> None:
    """split (a size or a list of sizes), chunk (a count: sizes ceil(n / chunks), the last smaller), unbind."""
    args = ctx.args(node)
    x = args.get("self", (args.get("inputs") or [None])[0])
    rank = ctx.rank(x)
    axis = dim(int(args.get("dim", 0)), rank)
    length = ctx.shape(x)[axis]
    if node.op_type == "aten::unbind":
        parts = _split(ctx, node, x, [1] * length, axis)
        squeezed = [ctx.emit("Squeeze", [p], {"axes": (axis,)}, node=node, suffix=f"/squeeze{i}")[0]
                    for i, p in enumerate(parts)]
        ctx.values[node.outputs[0]] = squeezed
        return
    if "chunk" in node.op_type:
        step = -(-length // int(args["chunks"]))
        sizes = [min(step, length - start) for start in range(0, length, step)]
    else:
        given = args.get("split_size", args.get("split_sizes", args.get("split_size_or_sections")))
        if isinstance(given, (list, tuple)):
            sizes = [int(s) for s in given]
        else:
            sizes = [min(int(given), length - start) for start in range(0, length, int(given))]
    _split(ctx, node, x, sizes, axis)


@converter("aten::slice")
def slice_(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args.get("self", args.get("l"))
    if not ctx.is_tensor(x):  # a slice of a Python list (shape arithmetic)
        start, end, step = (args.get(k) for k in ("start", "end", "step"))
        ctx.set_value(node, list(x)[slice(start, end, step)])
        return
    axis = dim(int(args.get("dim", 0)), ctx.rank(x))
    length = ctx.shape(x)[axis]
    start = 0 if args.get("start") is None else int(args["start"])
    end = length if args.get("end") is None else min(int(args["end"]), length)
    attrs = {"starts": (start,), "ends": (end,), "axes": (axis,), "steps": (int(args.get("step", 1)),)}
    ctx.emit("Slice", [x], attrs, node=node)


@converter("aten::narrow")
def narrow(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    axis = dim(int(args["dim"]), ctx.rank(x))
    start = int(ctx.number(node, args["start"], "start"))
    start = start + ctx.shape(x)[axis] if start < 0 else start
    attrs = {"starts": (start,), "ends": (start + int(args["length"]),), "axes": (axis,), "steps": (1,)}
    ctx.emit("Slice", [x], attrs, node=node)


@converter("aten::select")
def select(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    axis = dim(int(args["dim"]), ctx.rank(x))
    index = int(args["index"])
    index = index + ctx.shape(x)[axis] if index < 0 else index
    ctx.emit("Gather", [x, ctx.add_constant(f"{node.name}/index", np.asarray(index, np.int64))], {"axis": axis},
             node=node)


@converter("aten::squeeze", "aten::squeeze_")
def squeeze(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    shape = ctx.shape(x)
    given = args.get("dim")
    axes = range(len(shape)) if given is None else given if isinstance(given, (list, tuple)) else [given]
    axes = tuple(a for a in (dim(int(d), len(shape)) for d in axes) if shape[a] == 1)
    if axes:
        ctx.emit("Squeeze", [x], {"axes": axes}, node=node)
    else:
        ctx.alias(node, x)


@converter("aten::unsqueeze", "aten::unsqueeze_")
def unsqueeze(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    ctx.emit("Unsqueeze", [x], {"axes": (dim(int(args["dim"]), ctx.rank(x) + 1),)}, node=node)


@converter("aten::expand", "aten::expand_as", "aten::broadcast_to")
def expand(ctx: TorchContext, node: SourceNode) -> None:
    """expand: -1 keeps a dim; new leading dims may be added."""
    args = ctx.args(node)
    x = args["self"]
    size = ctx.shape(args["other"]) if "other" in args else args["size"]
    shape = ctx.shape(x)
    padded = (1,) * (len(size) - len(shape)) + shape
    target = tuple(p if int(s) == -1 else int(s) for s, p in zip(size, padded))
    ctx.emit("Expand", [x], {"shape": target}, node=node)


@converter("aten::repeat")
def repeat(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x, repeats = args["self"], [int(r) for r in args["repeats"]]
    extra = len(repeats) - ctx.rank(x)
    if extra:
        x = ctx.emit("Reshape", [x], {"shape": (1,) * extra + ctx.shape(x)}, node=node, suffix="/rank")[0]
    ctx.emit("Tile", [x], {"repeats": tuple(repeats)}, node=node)


@converter("aten::embedding")
def embedding(ctx: TorchContext, node: SourceNode) -> None:
    """The rows of the weight the indices select (padding_idx only matters when training)."""
    args = ctx.args(node)
    ctx.emit("Gather", [args["weight"], args["indices"]], {"axis": 0}, node=node)


@converter("aten::flip")
def flip(ctx: TorchContext, node: SourceNode) -> None:
    """Reversed along each dim: a Slice with step -1 from the last index to before the first."""
    args = ctx.args(node)
    x = args["self"]
    shape = ctx.shape(x)
    axes = tuple(dim(int(d), len(shape)) for d in args["dims"])
    attrs = {"starts": tuple(shape[a] - 1 for a in axes), "ends": tuple(-shape[a] - 1 for a in axes), "axes": axes,
             "steps": (-1,) * len(axes)}
    ctx.emit("Slice", [x], attrs, node=node)


@converter("aten::index_select")
def index_select(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    ctx.emit("Gather", [x, args["index"]], {"axis": dim(int(args["dim"]), ctx.rank(x))}, node=node)


@converter("aten::index", "aten::_unsafe_index")
def index(ctx: TorchContext, node: SourceNode) -> None:
    """``x[:, [2, 1, 0]]`` (a channel swap), ``x[..., mask]``: one axis indexed by integers or a boolean mask known
    at import (after any number of full slices, None in ``indices``) is a Gather along it; indices computed at
    run time, or on several axes at once, are refused."""
    args = ctx.args(node)
    x, indices = args["self"], list(args["indices"])
    given = [i for i, v in enumerate(indices) if v is not None]
    if len(given) != 1:
        raise PegasusError(f"{node.describe()}: indexing {len(given)} axes at once with tensors is not supported")
    axis = given[0]
    value = ctx.value(indices[axis]) if ctx.is_tensor(indices[axis]) else None
    if value is None:
        raise PegasusError(f"{node.describe()}: an index computed at run time is not supported (only indices known "
                           "at import)")
    if value.dtype == np.bool_:
        if value.ndim != 1:
            raise PegasusError(f"{node.describe()}: a boolean mask over several axes is not supported")
        value = np.flatnonzero(value)
    positions = ctx.add_constant(f"{node.name}/indices", value.astype(np.int64))
    ctx.emit("Gather", [x, positions], {"axis": axis}, node=node)


@converter("aten::roll")
def roll(ctx: TorchContext, node: SourceNode) -> None:
    """Shifted along each dim, wrapping around: the last ``shift`` elements, then the others (Slice, Concat)."""
    args = ctx.args(node)
    x = args["self"]
    shifts, dims = (list(v) if isinstance(v, (list, tuple)) else [v] for v in (args["shifts"], args.get("dims", [])))
    if len(dims) != len(shifts):
        raise PegasusError(f"{node.describe()}: roll of the flattened tensor (no dims) is not supported")
    for index, (shift, axis) in enumerate(zip(shifts, dims)):
        axis = dim(int(axis), ctx.rank(x))
        length = ctx.shape(x)[axis]
        cut = length - int(shift) % length
        pieces = ((cut, length, "tail"), (0, cut, "head"))
        parts = [ctx.emit("Slice", [x], {"starts": (start,), "ends": (end,), "axes": (axis,)}, node=node,
                          suffix=f"/roll{index}_{part}")[0] for start, end, part in pieces if end > start]
        last = index == len(dims) - 1
        x = ctx.emit("Concat", parts, {"axis": axis}, node=node, suffix="" if last else f"/roll{index}")[0]
