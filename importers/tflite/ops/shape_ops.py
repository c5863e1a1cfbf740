"""TFLite converters for the data-movement ops: SHAPE, RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE,
CONCATENATION, PACK, UNPACK, STRIDED_SLICE, SLICE, and FILL (a constant of a shape known at compile time:
tf_keras' LayerNormalization fills its ones and zeros that way).

Parameters that TFLite passes as tensors (a reshape's target, a slice's bounds) must be known at compile
time; the shape chains Keras leaves in a model (SHAPE → STRIDED_SLICE → PACK → RESHAPE) fold as they are
converted, since every input shape is static. STRIDED_SLICE's masks become one Slice over the input's
axes plus a Reshape for the axes it adds (new_axis_mask) or removes (shrink_axis_mask); the selection is
worked out the way NumPy indexes, which is TF's definition.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.common.slicing import emit_index, emit_unpack, strided_index
from pegasus.importers.tflite.context import TfliteContext, converter
from pegasus.limits import check_tensor
from pegasus.ops.shape_ops import resolve_reshape, resolve_squeeze_axes, resolve_unsqueeze_axes

_INT_TYPES = {2: "int32", 4: "int64"}   # SHAPE's out_type (TensorType enum)


def _shape(ctx: TfliteContext, node: SourceNode, index: int = 0) -> tuple[int, ...]:
    return ctx.type_of(node.inputs[index]).shape


@converter("SHAPE")
def shape(ctx: TfliteContext, node: SourceNode) -> None:
    dtype = _INT_TYPES.get(int(node.attrs.get("out_type", 2)), "int32")
    value = ctx.emit("Shape", [node.inputs[0]], node=node, suffix="/int64")[0]
    ctx.emit("Cast", [value], {"to": dtype}, node=node)


@converter("RESHAPE")
def reshape(ctx: TfliteContext, node: SourceNode) -> None:
    """RESHAPE: the target is input 1 when present, else the new_shape option (TF's 0 is a real size)."""
    target = ctx.ints(node, 1, "new shape") if node.input(1) else list(node.attrs.get("new_shape", []))
    ctx.emit("Reshape", [node.inputs[0]], {"shape": resolve_reshape(_shape(ctx, node), target, True)}, node=node)


@converter("SQUEEZE")
def squeeze(ctx: TfliteContext, node: SourceNode) -> None:
    axes = resolve_squeeze_axes(_shape(ctx, node), list(node.attrs.get("squeeze_dims", [])))
    ctx.emit("Squeeze", [node.inputs[0]], {"axes": axes}, node=node)


@converter("EXPAND_DIMS")
def expand_dims(ctx: TfliteContext, node: SourceNode) -> None:
    axes = resolve_unsqueeze_axes(len(_shape(ctx, node)), ctx.ints(node, 1, "axis"))
    ctx.emit("Unsqueeze", [node.inputs[0]], {"axes": axes}, node=node)


@converter("TRANSPOSE")
def transpose(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("Transpose", [node.inputs[0]], {"perm": tuple(ctx.ints(node, 1, "permutation"))}, node=node)


@converter("CONCATENATION")
def concatenation(ctx: TfliteContext, node: SourceNode) -> None:
    """CONCATENATION: its options carry a fused activation, but TFLite's kernel refuses any but NONE (the
    XNNPACK delegate ignores it), so a model asking for one has no TFLite meaning to reproduce."""
    if ctx.activation(node) != "NONE":
        raise PegasusError(f"{node.describe()}: fused activation {ctx.activation(node)} on CONCATENATION, which "
                           "TFLite's kernel refuses (it accepts only NONE)")
    ctx.emit("Concat", list(node.inputs), {"axis": int(node.attrs.get("axis", 0))}, node=node)


@converter("PACK")
def pack(ctx: TfliteContext, node: SourceNode) -> None:
    """PACK: stack the inputs along a new axis = Unsqueeze each, then Concat."""
    axis = int(node.attrs.get("axis", 0))
    rank = len(_shape(ctx, node)) + 1
    axis = axis % rank
    parts = [ctx.emit("Unsqueeze", [name], {"axes": (axis,)}, node=node, suffix=f"/unsqueeze_{i}")[0]
             for i, name in enumerate(node.inputs)]
    ctx.emit("Concat", parts, {"axis": axis}, node=node)


@converter("UNPACK")
def unpack(ctx: TfliteContext, node: SourceNode) -> None:
    """UNPACK: split along ``axis`` into size-1 pieces and drop the axis."""
    emit_unpack(ctx, node, int(node.attrs.get("axis", 0)))


@converter("STRIDED_SLICE")
def strided_slice(ctx: TfliteContext, node: SourceNode) -> None:
    begin = ctx.ints(node, 1, "begin")
    end = ctx.ints(node, 2, "end")
    strides = ctx.ints(node, 3, "strides", optional=True) or [1] * len(begin)
    emit_index(ctx, node, strided_index(node, begin, end, strides))


@converter("SLICE")
def slice_(ctx: TfliteContext, node: SourceNode) -> None:
    """SLICE: begin and size (-1: to the end) per axis."""
    begin = ctx.ints(node, 1, "begin")
    size = ctx.ints(node, 2, "size")
    index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))
    emit_index(ctx, node, index)



@converter("FILL")
def fill(ctx: TfliteContext, node: SourceNode) -> None:
    """FILL: a tensor of shape ``dims`` (input 0) holding the scalar ``value`` (input 1), both known at compile time."""
    dims = ctx.ints(node, 0, "dims")
    value = ctx.constant(node, 1, "value")
    if dims is None or value is None or value.size != 1 or min(dims, default=0) < 0:
        raise PegasusError(f"{node.describe()}: dims {dims} and value {value} are not a shape and a scalar")
    check_tensor(dims, value.dtype.itemsize, node.describe())  # before np.full allocates it
    ctx.builder.set_constant(node.outputs[0], np.full(dims, value.reshape(()), dtype=value.dtype))
