"""Caffe converters that move or combine data: Eltwise, Concat, Slice, Split, Flatten, Reshape, Permute and
Crop.

Shapes are static, so Flatten and Reshape become a Reshape to the shape Caffe computes (Reshape's 0 copies
the input's dimension, -1 takes what is left, and ``axis``/``num_axes`` choose the part of the shape
replaced); Permute lists the leading axes of the new order (SSD writes ``order: 0 2 3 1``), the rest follow
in order; Crop cuts its first bottom to the second's size from ``axis`` on, at ``offset``; Slice splits at
``slice_point`` or into equal parts; Split copies its bottom to every top.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.caffe.context import CaffeContext, converter, param
from pegasus.importers.caffe.layers.common import canonical_axis, emit_chain
from pegasus.importers.common.converters import SourceNode

_PROD, _SUM, _MAX = 0, 1, 2


@converter("Eltwise")
def eltwise(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "eltwise_param")
    inputs = list(node.inputs)
    coeffs = list(p.coeff)
    if coeffs and (p.operation != _SUM or len(coeffs) != len(inputs)):
        raise PegasusError(f"{node.describe()}: coeff applies to SUM, one per bottom ({len(inputs)}), got "
                           f"{len(coeffs)}")
    if len(inputs) == 1:
        emit_chain(ctx, node, inputs[0], [("Mul", np.float32(coeffs[0]), {})] if coeffs and coeffs[0] != 1 else [])
        return
    if p.operation == _SUM:
        for index, coeff in enumerate(coeffs):
            if coeff != 1:
                constant = ctx.add_constant(f"{node.name}/coeff_{index}", np.float32(coeff))
                inputs[index] = ctx.emit("Mul", [inputs[index], constant], node=node, suffix=f"/coeff_{index}")[0]
        ctx.emit("Add" if len(inputs) == 2 else "Sum", inputs, node=node)
    elif p.operation == _PROD:
        x = inputs[0]
        for index, other in enumerate(inputs[1:], start=1):
            last = index == len(inputs) - 1
            x = ctx.emit("Mul", [x, other], node=node, outputs=node.outputs[:1] if last else None,
                         suffix="" if last else f"/product_{index}")[0]
    else:
        ctx.emit("Max", inputs, node=node)


@converter("Concat")
def concat(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "concat_param")
    rank = ctx.type_of(node.inputs[0]).rank
    axis = p.concat_dim if p.HasField("concat_dim") else canonical_axis(node, p.axis, rank)
    if len(node.inputs) == 1:
        ctx.emit("Identity", node.inputs, node=node)
        return
    ctx.emit("Concat", node.inputs, {"axis": int(axis)}, node=node)


@converter("Slice")
def slice_layer(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "slice_param")
    shape = ctx.type_of(node.inputs[0]).shape
    axis = p.slice_dim if p.HasField("slice_dim") else canonical_axis(node, p.axis, len(shape))
    size, parts = shape[axis], len(node.outputs)
    points = [int(v) for v in p.slice_point]
    if points:
        bounds = [0, *points, size]
        if len(points) != parts - 1 or any(b >= e for b, e in zip(bounds, bounds[1:])):
            raise PegasusError(f"{node.describe()}: slice_point {points} does not split axis {axis} (size {size}) "
                               f"into {parts} parts")
        sizes = tuple(e - b for b, e in zip(bounds, bounds[1:]))
    elif size % parts:
        raise PegasusError(f"{node.describe()}: axis {axis} (size {size}) does not split into {parts} equal parts")
    else:
        sizes = (size // parts,) * parts
    if parts == 1:
        ctx.emit("Identity", node.inputs, node=node)
        return
    ctx.emit("Split", node.inputs, {"split": sizes, "axis": int(axis)}, node=node)


@converter("Split")
def split(ctx: CaffeContext, node: SourceNode) -> None:
    for index, top in enumerate(node.outputs):
        ctx.emit("Identity", node.inputs[:1], node=node, outputs=[top], suffix=f"/{index}" if index else "")


@converter("Flatten")
def flatten(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "flatten_param")
    shape = ctx.type_of(node.inputs[0]).shape
    start = canonical_axis(node, p.axis, len(shape))
    end = canonical_axis(node, p.end_axis, len(shape), "end_axis")
    if end < start:
        raise PegasusError(f"{node.describe()}: end_axis {p.end_axis} comes before axis {p.axis}")
    merged = math.prod(shape[start:end + 1])
    ctx.emit("Reshape", node.inputs[:1], {"shape": (*shape[:start], merged, *shape[end + 1:])}, node=node)


def reshaped(node: SourceNode, shape: tuple[int, ...], dims: list[int], axis: int, num_axes: int) -> tuple[int, ...]:
    """The output shape of Caffe's Reshape."""
    rank = len(shape)
    start = axis if axis >= 0 else rank + axis + 1
    end = rank if num_axes == -1 else start + num_axes
    if not 0 <= start <= rank or num_axes < -1 or end > rank:
        raise PegasusError(f"{node.describe()}: axis {axis} and num_axes {num_axes} do not fit a {rank}-D input")
    middle = [shape[start + i] if d == 0 else d for i, d in enumerate(dims)]
    if any(d == 0 and start + i >= rank for i, d in enumerate(dims)) or sum(d == -1 for d in middle) > 1 or \
            any(d < -1 for d in middle):
        raise PegasusError(f"{node.describe()}: shape {dims} is not valid for input {list(shape)} (0 copies a "
                           "dimension, one -1 is inferred)")
    total = math.prod(shape[start:end])
    known = math.prod([d for d in middle if d != -1])
    if -1 in middle:
        if known == 0 or total % known:
            raise PegasusError(f"{node.describe()}: cannot infer -1 in {dims} for input {list(shape)}")
        middle[middle.index(-1)] = total // known
    elif known != total:
        raise PegasusError(f"{node.describe()}: shape {dims} holds {known} values, input {list(shape)} has {total} "
                           "there")
    return (*shape[:start], *middle, *shape[end:])


@converter("Reshape")
def reshape(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "reshape_param")
    shape = ctx.type_of(node.inputs[0]).shape
    target = reshaped(node, tuple(shape), [int(d) for d in p.shape.dim], p.axis, p.num_axes)
    ctx.emit("Reshape", node.inputs[:1], {"shape": target}, node=node)


@converter("Permute")
def permute(ctx: CaffeContext, node: SourceNode) -> None:
    rank = ctx.type_of(node.inputs[0]).rank
    order = [int(v) for v in param(node, "permute_param").order]
    if len(set(order)) != len(order) or any(not 0 <= v < rank for v in order):
        raise PegasusError(f"{node.describe()}: order {order} is not a permutation of the {rank} axes")
    perm = tuple(order + [axis for axis in range(rank) if axis not in order])
    if perm == tuple(range(rank)):
        ctx.emit("Identity", node.inputs[:1], node=node)
        return
    ctx.emit("Transpose", node.inputs[:1], {"perm": perm}, node=node)


@converter("Crop")
def crop(ctx: CaffeContext, node: SourceNode) -> None:
    if len(node.inputs) != 2:
        raise PegasusError(f"{node.describe()}: needs two bottoms (the blob to crop and the one giving the size)")
    shape, reference = ctx.type_of(node.inputs[0]).shape, ctx.type_of(node.inputs[1]).shape
    p = param(node, "crop_param")
    axis = canonical_axis(node, p.axis, len(shape))
    axes = list(range(axis, len(shape)))
    offsets = [int(v) for v in p.offset]
    if len(offsets) not in (0, 1, len(axes)):
        raise PegasusError(f"{node.describe()}: {len(offsets)} offsets for {len(axes)} cropped axes")
    offsets = offsets * len(axes) if len(offsets) == 1 else offsets or [0] * len(axes)
    if len(reference) != len(shape):
        raise PegasusError(f"{node.describe()}: bottoms {list(shape)} and {list(reference)} differ in rank")
    for a, offset in zip(axes, offsets):
        if offset + reference[a] > shape[a]:
            raise PegasusError(f"{node.describe()}: crop of axis {a} ({offset} + {reference[a]}) exceeds its size "
                               f"{shape[a]}")
    ctx.emit("Slice", node.inputs[:1], {"starts": tuple(offsets), "ends": tuple(o + reference[a] for a, o in
                                                                                 zip(axes, offsets)),
                                        "axes": tuple(axes)}, node=node)
