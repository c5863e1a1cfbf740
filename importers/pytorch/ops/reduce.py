"""PyTorch converters for the reductions: mean, sum, amax, amin, max/min (all elements, along a dim with its
indices, or element-wise between two tensors), and the vector norms (``linalg_vector_norm``, ``norm``: what
``F.normalize`` computes) of order 1, 2 or infinity, argmax/argmin, var and std.

A ``dim`` of None or [] reduces every axis. ``max``/``min`` along a dim return (values, indices): the
values are a ReduceMax/ReduceMin and the indices an ArgMax/ArgMin (first occurrence, as PyTorch on CPU).
On Python numbers ``max``/``min`` are shape arithmetic, computed at import.
"""

from __future__ import annotations

import math

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter, dim
from pegasus.importers.pytorch.ops.plumbing import fold_python

_REDUCE = {"mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax", "amin": "ReduceMin", "max": "ReduceMax",
           "min": "ReduceMin", "prod": "ReduceProd"}


def _axes(ctx: TorchContext, x: str, given) -> tuple[int, ...]:
    rank = ctx.rank(x)
    if given is None or (isinstance(given, (list, tuple)) and not given):
        return tuple(range(rank))
    return tuple(sorted(dim(int(d), rank) for d in (given if isinstance(given, (list, tuple)) else [given])))


@converter("aten::mean", "aten::sum", "aten::amax", "aten::amin", "aten::prod")
def reduce(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    attrs = {"axes": _axes(ctx, x, args.get("dim")), "keepdims": bool(args.get("keepdim", False))}
    ctx.emit(_REDUCE[node.op_type.split("::")[1]], [x], attrs, node=node)


@converter("aten::max", "aten::min")
def max_min(ctx: TorchContext, node: SourceNode) -> None:
    name = node.op_type.split("::")[1]
    if fold_python(ctx, node, max if name == "max" else min):
        return
    args = ctx.args(node)
    x = args["self"]
    if ctx.is_tensor(args.get("other")):
        ctx.emit("Max" if name == "max" else "Min", [x, args["other"]], node=node)
        return
    if args.get("dim") is None:
        ctx.emit(_REDUCE[name], [x], {"axes": _axes(ctx, x, None), "keepdims": False}, node=node)
        return
    axis, keep = dim(int(args["dim"]), ctx.rank(x)), bool(args.get("keepdim", False))
    values, indices = ctx.output_names(node, 2)
    ctx.emit(_REDUCE[name], [x], {"axes": (axis,), "keepdims": keep}, node=node, outputs=[values])
    ctx.emit("ArgMax" if name == "max" else "ArgMin", [x], {"axis": axis, "keepdims": keep}, node=node,
             outputs=[indices], suffix="/indices")


@converter("aten::linalg_vector_norm", "aten::norm")
def vector_norm(ctx: TorchContext, node: SourceNode) -> None:
    """||x|| over ``dim``: order 2 a ReduceL2, 1 a ReduceL1, infinity the largest magnitude."""
    args = ctx.args(node)
    x = args["self"]
    order = args.get("ord", args.get("p", 2))
    order = 2.0 if order is None else float(ctx.number(node, order, "order"))
    attrs = {"axes": _axes(ctx, x, args.get("dim")), "keepdims": bool(args.get("keepdim", False))}
    if order in (1.0, 2.0):
        ctx.emit("ReduceL1" if order == 1.0 else "ReduceL2", [x], attrs, node=node)
    elif order == float("inf"):
        magnitude = ctx.emit("Abs", [x], node=node, suffix="/abs")[0]
        ctx.emit("ReduceMax", [magnitude], attrs, node=node)
    else:
        raise PegasusError(f"{node.describe()}: a norm of order {order:g} is not supported (1, 2 and inf are)")


@converter("aten::argmax", "aten::argmin")
def arg_max_min(ctx: TorchContext, node: SourceNode) -> None:
    """The index of the first largest (smallest) value along ``dim``, or in the flattened tensor when dim is None
    (a segmentation map's ``logits.argmax(1)``, a classifier's label)."""
    args = ctx.args(node)
    x, axis, keep = args["self"], args.get("dim"), bool(args.get("keepdim", False))
    op = "ArgMax" if node.op_type == "aten::argmax" else "ArgMin"
    if axis is None:
        flat = ctx.emit("Reshape", [x], {"shape": (math.prod(ctx.shape(x)),)}, node=node, suffix="/flatten")[0]
        if not keep:
            ctx.emit(op, [flat], {"axis": 0, "keepdims": False}, node=node)
            return
        index = ctx.emit(op, [flat], {"axis": 0, "keepdims": True}, node=node, suffix="/flat")[0]
        ctx.emit("Reshape", [index], {"shape": (1,) * ctx.rank(x)}, node=node)
        return
    ctx.emit(op, [x], {"axis": dim(int(axis), ctx.rank(x)), "keepdims": keep}, node=node)


@converter("aten::var", "aten::std")
def var_std(ctx: TorchContext, node: SourceNode) -> None:
    """The variance over ``dim``, mean((x - mean(x))^2) * n / (n - correction) (``unbiased``: correction 1), and
    the standard deviation its square root (a hand-written LayerNorm's ``x.std(-1, keepdim=True)``)."""
    args = ctx.args(node)
    x = args["self"]
    axes = _axes(ctx, x, args.get("dim"))
    correction = args.get("correction")
    correction = (1.0 if args.get("unbiased", True) else 0.0) if correction is None else \
        float(ctx.number(node, correction, "correction"))
    count = math.prod(ctx.shape(x)[a] for a in axes)
    mean = ctx.emit("ReduceMean", [x], {"axes": axes, "keepdims": True}, node=node, suffix="/mean")[0]
    centred = ctx.emit("Sub", [x, mean], node=node, suffix="/centred")[0]
    squared = ctx.emit("Mul", [centred, centred], node=node, suffix="/squared")[0]
    keep = bool(args.get("keepdim", False))
    std = node.op_type == "aten::std"
    variance = ctx.emit("ReduceMean", [squared], {"axes": axes, "keepdims": keep}, node=node,
                        suffix="/biased" if correction or std else "")[0]
    if correction:
        scale = ctx.tensor(node, count / (count - correction) if count > correction else float("inf"), x, "scale")
        variance = ctx.emit("Mul", [variance, scale], node=node, suffix="/variance" if std else "")[0]
    if std:
        ctx.emit("Sqrt", [variance], node=node)
