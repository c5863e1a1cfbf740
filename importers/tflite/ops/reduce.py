"""TFLite converters for the reductions: MEAN, SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD (axes from a
constant input, ``keep_dims``) and ARG_MAX, ARG_MIN (axis from a constant input, the index type from
``output_type``)."""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

#: TFLite builtin -> registry op
REDUCTIONS = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin",
              "REDUCE_PROD": "ReduceProd"}
ARG_REDUCTIONS = {"ARG_MAX": "ArgMax", "ARG_MIN": "ArgMin"}


@converter(*REDUCTIONS)
def reduce(ctx: TfliteContext, node: SourceNode) -> None:
    """Reduce over the axes of input 1; an empty axis list leaves x unchanged, as TFLite does."""
    axes = ctx.ints(node, 1, "axes")
    attrs = {"axes": tuple(axes), "keepdims": bool(node.attrs.get("keep_dims", False)), "noop_with_empty_axes": True}
    ctx.emit(REDUCTIONS[node.op_type], [node.inputs[0]], attrs, node=node)


@converter(*ARG_REDUCTIONS)
def arg_reduce(ctx: TfliteContext, node: SourceNode) -> None:
    """The index of the first extreme value along the axis of input 1; int64, or int32 as output_type says."""
    axis = ctx.ints(node, 1, "axis")
    if len(axis) != 1:
        raise PegasusError(f"{node.describe()}: takes one axis, got {axis}")
    dtype = ctx.tensors[node.outputs[0]].dtype
    attrs = {"axis": axis[0], "keepdims": False}
    if dtype == "int64":
        ctx.emit(ARG_REDUCTIONS[node.op_type], [node.inputs[0]], attrs, node=node)
        return
    index = ctx.emit(ARG_REDUCTIONS[node.op_type], [node.inputs[0]], attrs, node=node, suffix="/int64")[0]
    ctx.emit("Cast", [index], {"to": dtype}, node=node)
