"""PyTorch converters for the reductions: mean, sum, amax, amin, and max/min (all elements, along a dim with
its indices, or element-wise between two tensors).

A ``dim`` of None or [] reduces every axis. ``max``/``min`` along a dim return (values, indices): the
values are a ReduceMax/ReduceMin and the indices an ArgMax/ArgMin (first occurrence, as PyTorch on CPU).
On Python numbers ``max``/``min`` are shape arithmetic, computed at import.
"""

from __future__ import annotations

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
