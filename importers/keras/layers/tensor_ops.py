"""Keras converters for the tensor operations a functional model records between layers beyond arithmetic
(ops.py): reductions (``keras.ops.mean(x, axis=[1, 2])``, ``tf.reduce_mean(x, [1, 2], keepdims=True)``, as an SE
block or a global pooling is often written), reshape, transpose, expand_dims, squeeze, concatenate, softmax,
matmul and slicing (``x[:, 1:5, ..., ::2]``, ``x[:, 0]``).

Keras 3 keeps an operation's parameters in its config (``{"axis": [1, 2], "keepdims": true}``, ``newshape``,
``axes``) and its tensors in the call's arguments; Keras 2 (TFOpLambda, SlicingOpLambda) keeps every argument of
the TensorFlow function by name in the call (graph.py's ``kwargs``: ``axis``, ``keepdims``, ``shape``, ``perm``,
``slice_spec``). ``_option`` reads either. A parameter given as a tensor (``tf.reshape(x, tf.shape(y))``) is
refused naming the layer: only numbers the file holds are converted.
"""

from __future__ import annotations

import math
from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import TABLE, KerasContext
from pegasus.importers.keras.graph import KerasNode

_MISSING = object()


def _option(node: KerasNode, keys: tuple[str, ...], default: Any = None) -> Any:
    """The operation's parameter under the first of ``keys`` present (config for Keras 3, the call's keyword
    arguments for Keras 2); a tensor there is refused."""
    source = node.attrs.get("kwargs") or {} if node.domain == "tf" else node.attrs
    value = next((source[k] for k in keys if k in source), _MISSING)
    if value is _MISSING:
        return default
    if isinstance(value, dict) and "input" in value:
        raise PegasusError(f"{node.describe()}: '{keys[0]}' is a tensor; only values the file holds are supported")
    return value


def _axes(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    return tuple(int(a) for a in value) if isinstance(value, (list, tuple)) else (int(value),)


def _rank(ctx: KerasContext, node: KerasNode) -> int:
    return len(ctx.type_of(node.inputs[0]).shape)


#: reduction (keras.ops class, tf function) -> registry op
REDUCE = {"Mean": "ReduceMean", "Sum": "ReduceSum", "Max": "ReduceMax", "Min": "ReduceMin", "Prod": "ReduceProd"}
TF_REDUCE = {"math.reduce_mean": "Mean", "math.reduce_sum": "Sum", "math.reduce_max": "Max",
             "math.reduce_min": "Min", "math.reduce_prod": "Prod"}


def reduce(ctx: KerasContext, node: KerasNode) -> None:
    """Over ``axis`` (every axis when None), keeping them as 1 with ``keepdims``."""
    op = REDUCE[TF_REDUCE.get(node.op_type, node.op_type)]
    if _option(node, ("initial",)) is not None:
        raise PegasusError(f"{node.describe()}: a reduction with an initial value is not supported")
    axes = _axes(_option(node, ("axis",))) or tuple(range(_rank(ctx, node)))
    keepdims = bool(_option(node, ("keepdims", "keep_dims"), False))
    ctx.emit(op, node.inputs[:1], {"axes": axes, "keepdims": keepdims}, node=node, outputs=node.outputs[:1])


def reshape(ctx: KerasContext, node: KerasNode) -> None:
    """To ``newshape`` (Keras 3) / ``shape`` (tf), batch included; one -1 takes what is left."""
    shape = _axes(_option(node, ("newshape", "shape")))
    if shape is None:
        raise PegasusError(f"{node.describe()}: the reshape has no target shape")
    size = math.prod(ctx.type_of(node.inputs[0]).shape)
    known = math.prod(d for d in shape if d != -1)
    if shape.count(-1) > 1 or (-1 in shape and (known == 0 or size % known)) or (-1 not in shape and known != size):
        raise PegasusError(f"{node.describe()}: cannot reshape {list(ctx.type_of(node.inputs[0]).shape)} to "
                           f"{list(shape)}")
    shape = tuple(size // known if d == -1 else d for d in shape)
    ctx.emit("Reshape", node.inputs[:1], {"shape": shape}, node=node, outputs=node.outputs[:1])


def transpose(ctx: KerasContext, node: KerasNode) -> None:
    perm = _axes(_option(node, ("axes", "perm"))) or tuple(reversed(range(_rank(ctx, node))))
    ctx.emit("Transpose", node.inputs[:1], {"perm": perm}, node=node, outputs=node.outputs[:1])


def expand_dims(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("Unsqueeze", node.inputs[:1], {"axes": _axes(_option(node, ("axis",)))}, node=node,
             outputs=node.outputs[:1])


def squeeze(ctx: KerasContext, node: KerasNode) -> None:
    """The size-1 ``axis``; without one every size-1 axis but the batch (of unknown size in the model)."""
    shape = ctx.type_of(node.inputs[0]).shape
    axes = _axes(_option(node, ("axis", "squeeze_dims"))) or tuple(i for i, d in enumerate(shape) if d == 1 and i)
    ctx.emit("Squeeze", node.inputs[:1], {"axes": axes}, node=node, outputs=node.outputs[:1])


def concatenate(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("Concat", list(node.inputs), {"axis": int(_option(node, ("axis",), 0))}, node=node,
             outputs=node.outputs[:1])


def softmax(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("Softmax", node.inputs[:1], {"axis": int(_option(node, ("axis", "dim"), -1))}, node=node,
             outputs=node.outputs[:1])


def matmul(ctx: KerasContext, node: KerasNode) -> None:
    """a @ b of two tensors, tf's ``transpose_a``/``transpose_b`` as Transposes of the last two axes."""
    if len(node.inputs) != 2:
        raise PegasusError(f"{node.describe()}: a matrix product of {len(node.inputs)} tensors (and numbers) is "
                           "not supported")
    operands = []
    for name, flag in zip(node.inputs, ("transpose_a", "transpose_b")):
        if _option(node, (flag, flag.replace("transpose", "adjoint")), False):
            rank = len(ctx.type_of(name).shape)
            perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
            name = ctx.emit("Transpose", [name], {"perm": perm}, node=node, suffix=f"/{flag}")[0]
        operands.append(name)
    ctx.emit("MatMul", operands, node=node, outputs=node.outputs[:1])


def _slice_item(item: Any) -> Any:
    """One entry of a slicing: a dict {start, stop, step} (Keras 2; Keras 3 wraps it as ``__slice__``), an
    index, None (a new axis) or Ellipsis (Keras 3 writes ``{"class_name": "__ellipsis__"}``)."""
    if isinstance(item, dict) and item.get("class_name") == "__slice__":
        item = item.get("config", {})
    if isinstance(item, dict) and item.get("class_name") == "__ellipsis__":
        return Ellipsis
    if isinstance(item, dict) and set(item) <= {"start", "stop", "step"}:
        return slice(item.get("start"), item.get("stop"), item.get("step"))
    if item is None or item is Ellipsis or (isinstance(item, int) and not isinstance(item, bool)):
        return item
    raise ValueError(repr(item))


def get_item(ctx: KerasContext, node: KerasNode) -> None:
    """``x[...]`` with slices, indices, ``None`` and ``...``: a Slice, then a Reshape dropping the indexed axes
    and inserting the new ones."""
    spec = _option(node, ("slice_spec",)) if node.domain == "tf" else (node.attrs.get("args") or [None, None])[1]
    spec = spec if isinstance(spec, list) else [spec]
    try:
        items = [_slice_item(item) for item in spec]
    except ValueError as error:
        raise PegasusError(f"{node.describe()}: the index {error} is not supported (slices, integers, None and "
                           "... are)") from None
    shape = ctx.type_of(node.inputs[0]).shape
    if Ellipsis in items:
        k = items.index(Ellipsis)
        fill = len(shape) - sum(item is not None for item in items if item is not Ellipsis)
        items = items[:k] + [slice(None)] * fill + items[k + 1:]
    items += [slice(None)] * (len(shape) - sum(item is not None for item in items))
    starts, ends, axes, steps, out = [], [], [], [], []
    axis = 0
    for item in items:
        if item is None:
            out.append(1)
            continue
        size = shape[axis]
        if isinstance(item, int):
            index = item + size if item < 0 else item
            if not 0 <= index < size:
                raise PegasusError(f"{node.describe()}: index {item} is out of range for axis {axis} of size {size}")
            start, stop, step = index, index + 1, 1
        else:
            start, stop, step = item.indices(size)
            out.append(len(range(start, stop, step)))
        if (start, stop, step) != (0, size, 1):
            starts.append(start)
            ends.append(stop if stop >= 0 else -size - 1)
            axes.append(axis)
            steps.append(step)
        axis += 1
    x = node.inputs[0]
    reshaped = tuple(out) != tuple(shape)
    attrs = {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(axes), "steps": tuple(steps)}
    if not axes:
        ctx.emit("Reshape" if reshaped else "Identity", [x], {"shape": tuple(out)} if reshaped else {}, node=node,
                 outputs=node.outputs[:1])
        return
    sliced = ctx.emit("Slice", [x], attrs, node=node, outputs=None, suffix="/slice")[0]
    if tuple(ctx.type_of(sliced).shape) == tuple(out):
        ctx.emit("Identity", [sliced], node=node, outputs=node.outputs[:1])
    else:
        ctx.emit("Reshape", [sliced], {"shape": tuple(out)}, node=node, outputs=node.outputs[:1])


def _register(names, fn, tf_names=()) -> None:
    for name in names:
        TABLE.register(name, domain="ops")(fn)
    for name in tf_names:
        TABLE.register(name, domain="tf")(fn)


_register(REDUCE, reduce, TF_REDUCE)
_register(["Reshape"], reshape, ["reshape"])
_register(["Transpose"], transpose, ["transpose", "compat.v1.transpose"])
_register(["ExpandDims"], expand_dims, ["expand_dims", "compat.v1.expand_dims"])
_register(["Squeeze"], squeeze, ["squeeze", "compat.v1.squeeze"])
_register(["Concatenate"], concatenate, ["concat"])
_register(["Softmax"], softmax, ["nn.softmax", "math.softmax"])
_register(["Matmul"], matmul, ["linalg.matmul"])
_register(["GetItem"], get_item, ["__operators__.getitem"])
