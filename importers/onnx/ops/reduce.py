"""ONNX converters for the reduction family: Reduce*, ArgMax/ArgMin, TopK, CumSum, Softmax/LogSoftmax.

Reduce* took ``axes`` as an attribute until opset 13 (ReduceSum) or 18 (the others) and as an input
afterwards; both become the registry op's ``axes`` attribute. Softmax/LogSoftmax before opset 13
coerced the input to 2-D at ``axis``; that old meaning is rebuilt from registry ops
(Flatten -> Softmax on the last axis -> Reshape), not with a second kernel.
"""

from __future__ import annotations

from pegasus.importers.onnx.ops.shape_ops import ints
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter, direct
from pegasus.ops.common import normalize_axes

REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
AXES_BECAME_INPUT = {"ReduceSum": 13}  # the others moved axes to an input in opset 18


def _reduce(ctx: OnnxContext, node: OnnxNode, axes: list[int] | None) -> None:
    """Canonical form: explicit sorted axes (empty = all); empty axes with noop_with_empty_axes = Identity."""
    x = node.inputs[0]
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        ctx.emit("Identity", [x], node=node)
        return
    rank = len(ctx.type_of(x).shape)
    axes = sorted(set(normalize_axes(axes, rank))) if axes else range(rank)
    ctx.emit(node.op_type, [x], {"axes": tuple(axes), "keepdims": bool(node.attrs.get("keepdims", 1))}, node=node)


def reduce_with_attribute(ctx: OnnxContext, node: OnnxNode) -> None:
    """Reduce* before axes became an input: ``axes`` attribute, empty meaning all axes."""
    _reduce(ctx, node, node.attrs.get("axes"))


def reduce_with_input(ctx: OnnxContext, node: OnnxNode) -> None:
    """Reduce* with ``axes`` as optional input 1, read at compile time."""
    _reduce(ctx, node, ints(ctx, node, 1, "axes"))


for _op in REDUCE_OPS:
    converter(_op, since=1)(reduce_with_attribute)
    converter(_op, since=AXES_BECAME_INPUT.get(_op, 18))(reduce_with_input)

direct("Softmax", "LogSoftmax", since=13)


def softmax_2d(ctx: OnnxContext, node: OnnxNode) -> None:
    """Softmax-1/11: normalise over all dims from ``axis`` (default 1) on, as one flattened row."""
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    axis = node.attrs.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if axis >= len(shape) - 1:  # one trailing axis: the old and new meanings agree
        ctx.emit(node.op_type, [x], {"axis": -1}, node=node)
        return
    rows = ctx.emit("Flatten", [x], {"axis": axis}, node=node, suffix="_flatten")
    normed = ctx.emit(node.op_type, rows, {"axis": -1}, node=node, suffix="_2d")
    ctx.emit("Reshape", normed, {"shape": shape}, node=node)


for _op in ("Softmax", "LogSoftmax"):
    converter(_op, since=1)(softmax_2d)


def arg_reduce(ctx: OnnxContext, node: OnnxNode) -> None:
    """ArgMax/ArgMin (select_last_index exists from opset 12; absent means the first index)."""
    attrs = {"axis": node.attrs.get("axis", 0), "keepdims": bool(node.attrs.get("keepdims", 1)),
             "select_last_index": bool(node.attrs.get("select_last_index", 0))}
    ctx.emit(node.op_type, [node.inputs[0]], attrs, node=node)


for _op in ("ArgMax", "ArgMin"):
    converter(_op, since=1)(arg_reduce)


@converter("TopK", since=1)
def top_k_v1(ctx: OnnxContext, node: OnnxNode) -> None:
    """TopK-1: ``k`` is an attribute; always the largest, sorted."""
    ctx.emit("TopK", [node.inputs[0]], {"k": node.attrs["k"], "axis": node.attrs.get("axis", -1)}, node=node)


@converter("TopK", since=10)
def top_k(ctx: OnnxContext, node: OnnxNode) -> None:
    """TopK-10+: K is input 1, read at compile time; ``largest`` and ``sorted`` from opset 11 (an unsorted
    result may come in any order: pegasus's is sorted)."""
    attrs = {"k": ints(ctx, node, 1, "K")[0], "axis": node.attrs.get("axis", -1),
             "largest": bool(node.attrs.get("largest", 1)), "sorted": bool(node.attrs.get("sorted", 1))}
    ctx.emit("TopK", [node.inputs[0]], attrs, node=node)


@converter("CumSum", since=11)
def cum_sum(ctx: OnnxContext, node: OnnxNode) -> None:
    """CumSum-11+: the axis is input 1, read at compile time; ``exclusive`` and ``reverse`` attributes."""
    attrs = {"axis": ints(ctx, node, 1, "axis")[0], "exclusive": bool(node.attrs.get("exclusive", 0)),
             "reverse": bool(node.attrs.get("reverse", 0))}
    ctx.emit("CumSum", [node.inputs[0]], attrs, node=node)
