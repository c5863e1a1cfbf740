"""TensorFlow converters for reductions: Mean, Sum, Max, Min, Prod (axes in input 1, ``keep_dims``; an empty
axis list leaves x unchanged, as TensorFlow does), ArgMax/ArgMin (``output_type``, int64 by default), and
Softmax/LogSoftmax over the last axis."""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.context import TfContext, converter

#: TensorFlow op -> registry op
REDUCTIONS = {"Mean": "ReduceMean", "Sum": "ReduceSum", "Max": "ReduceMax", "Min": "ReduceMin",
              "Prod": "ReduceProd"}
ARG_REDUCTIONS = {"ArgMax": "ArgMax", "ArgMin": "ArgMin"}
SOFTMAX = {"Softmax": "Softmax", "LogSoftmax": "LogSoftmax"}


@converter(*REDUCTIONS)
def reduce(ctx: TfContext, node: SourceNode) -> None:
    attrs = {"axes": tuple(ctx.ints(node, 1, "reduction indices")), "keepdims": bool(node.attrs.get("keep_dims")),
             "noop_with_empty_axes": True}
    ctx.emit(REDUCTIONS[node.op_type], [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])


@converter(*ARG_REDUCTIONS)
def arg_reduce(ctx: TfContext, node: SourceNode) -> None:
    """The index of the first extreme value along the axis of input 1, as ``output_type``."""
    axis = ctx.ints(node, 1, "dimension")
    if len(axis) != 1:
        raise PegasusError(f"{node.describe()}: takes one axis, got {axis}")
    dtype = str(node.attrs.get("output_type", "int64"))
    attrs = {"axis": axis[0], "keepdims": False}
    if dtype == "int64":
        ctx.emit(ARG_REDUCTIONS[node.op_type], [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])
        return
    index = ctx.emit(ARG_REDUCTIONS[node.op_type], [node.inputs[0]], attrs, node=node, suffix="/int64")[0]
    ctx.emit("Cast", [index], {"to": dtype}, node=node, outputs=node.outputs[:1])


@converter(*SOFTMAX)
def softmax(ctx: TfContext, node: SourceNode) -> None:
    ctx.emit(SOFTMAX[node.op_type], [node.inputs[0]], {"axis": -1}, node=node, outputs=node.outputs[:1])
