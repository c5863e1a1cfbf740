"""Keras converters for the reshaping layers: Flatten, Reshape, Permute, RepeatVector, ZeroPadding1D/2D/3D,
Cropping1D/2D/3D and UpSampling1D/2D/3D.

Shapes never include the batch axis in a Keras config; the converters add it. Flatten flattens in
channels-last order (a channels-first tensor is transposed first, as Keras does). The padding and
cropping layers act on the spatial axes of their ``data_format``. UpSampling repeats each element
``size`` times per spatial axis (a nearest Resize with integer scales, whose asymmetric source coordinate
y / size picks exactly the repeated element) or, for UpSampling2D's bilinear, resizes as
``tf.image.resize`` does (half-pixel centers).
"""

from __future__ import annotations

from math import prod
from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode
from pegasus.importers.keras.layers.conv import channels_last, ints
from pegasus.importers.keras.layers.preprocessing import emit_resize

#: layer class -> spatial axes
PADDINGS = {"ZeroPadding1D": 1, "ZeroPadding2D": 2, "ZeroPadding3D": 3}
CROPPINGS = {"Cropping1D": 1, "Cropping2D": 2, "Cropping3D": 3}
UPSAMPLINGS = {"UpSampling1D": 1, "UpSampling2D": 2, "UpSampling3D": 3}


def _spatial_axes(ctx: KerasContext, node: KerasNode, n: int) -> list[int]:
    rank = ctx.type_of(node.inputs[0]).rank
    if rank != n + 2:
        raise PegasusError(f"{node.describe()}: expects a rank-{n + 2} input, got rank {rank}")
    return list(range(1, n + 1)) if channels_last(node) else list(range(2, n + 2))


def _pairs(value: Any, n: int) -> list[tuple[int, int]]:
    """Keras' int / (sym, ...) / ((before, after), ...) padding or cropping as (before, after) per axis."""
    if not isinstance(value, (list, tuple)):
        return [(int(value), int(value))] * n
    if n == 1 and len(value) == 2 and not isinstance(value[0], (list, tuple)):
        return [(int(value[0]), int(value[1]))]
    return [(int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v)) for v in value]


@converter("Flatten")
def flatten(ctx: KerasContext, node: KerasNode) -> None:
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    if not channels_last(node) and len(shape) > 2:
        x = ctx.emit("Transpose", [x], {"perm": (0, *range(2, len(shape)), 1)}, node=node, suffix="/to_last")[0]
    ctx.emit("Reshape", [x], {"shape": (shape[0], prod(shape[1:]))}, node=node, outputs=node.outputs[:1])


@converter("Reshape")
def reshape(ctx: KerasContext, node: KerasNode) -> None:
    shape = ctx.type_of(node.inputs[0]).shape
    target = [int(d) for d in node.attrs["target_shape"]]
    if target.count(-1) == 1:   # the one unknown dimension takes what the others leave
        target[target.index(-1)] = prod(shape[1:]) // max(1, -prod(target))
    if prod(target) != prod(shape[1:]):
        raise PegasusError(f"{node.describe()}: cannot reshape {list(shape)} to {[shape[0], *target]}")
    batch = shape[0]
    ctx.emit("Reshape", [node.inputs[0]], {"shape": (batch, *target)}, node=node, outputs=node.outputs[:1])


@converter("Permute")
def permute(ctx: KerasContext, node: KerasNode) -> None:
    dims = tuple(int(d) for d in node.attrs["dims"])   # 1-based, batch excluded
    ctx.emit("Transpose", [node.inputs[0]], {"perm": (0, *dims)}, node=node, outputs=node.outputs[:1])


@converter("RepeatVector")
def repeat_vector(ctx: KerasContext, node: KerasNode) -> None:
    x = node.inputs[0]
    batch, features = ctx.type_of(x).shape
    column = ctx.emit("Unsqueeze", [x], {"axes": (1,)}, node=node, suffix="/unsqueeze")[0]
    ctx.emit("Expand", [column], {"shape": (batch, int(node.attrs["n"]), features)}, node=node,
             outputs=node.outputs[:1])


@converter(*PADDINGS)
def zero_padding(ctx: KerasContext, node: KerasNode) -> None:
    n = PADDINGS[node.op_type]
    on = _spatial_axes(ctx, node, n)
    rank = n + 2
    pairs = dict(zip(on, _pairs(node.attrs.get("padding", 1), n)))
    pads = tuple(pairs.get(a, (0, 0))[0] for a in range(rank)) + tuple(pairs.get(a, (0, 0))[1] for a in range(rank))
    ctx.emit("Pad", [node.inputs[0]], {"pads": pads}, node=node, outputs=node.outputs[:1])


@converter(*CROPPINGS)
def cropping(ctx: KerasContext, node: KerasNode) -> None:
    n = CROPPINGS[node.op_type]
    on = _spatial_axes(ctx, node, n)
    shape = ctx.type_of(node.inputs[0]).shape
    pairs = _pairs(node.attrs.get("cropping", 1), n)
    if any(b + e >= shape[a] for a, (b, e) in zip(on, pairs)):
        raise PegasusError(f"{node.describe()}: cropping {pairs} leaves nothing of {list(shape)}")
    attrs = {"starts": tuple(b for b, _ in pairs), "ends": tuple(shape[a] - e for a, (_, e) in zip(on, pairs)),
             "axes": tuple(on)}
    ctx.emit("Slice", [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])


@converter(*UPSAMPLINGS)
def upsampling(ctx: KerasContext, node: KerasNode) -> None:
    n = UPSAMPLINGS[node.op_type]
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    on = list(range(1, n + 1)) if n == 1 else _spatial_axes(ctx, node, n)   # UpSampling1D has no data_format
    size = ints(node.attrs.get("size", 2), n)
    interpolation = str(node.attrs.get("interpolation", "nearest"))
    if interpolation == "bilinear" and n == 2:
        emit_resize(ctx, node, x, (shape[on[0]] * size[0], shape[on[1]] * size[1]), "linear", half_pixel=True)
        return
    if interpolation != "nearest":
        raise PegasusError(f"{node.describe()}: interpolation '{interpolation}' is not supported")
    factors = dict(zip(on, size))
    sizes = tuple(d * factors.get(a, 1) for a, d in enumerate(shape))
    ctx.emit("Resize", [x], {"sizes": sizes, "mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                             "nearest_mode": "floor"}, node=node, outputs=node.outputs[:1])
