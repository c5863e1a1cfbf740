"""Keras converters for the preprocessing layers a model may start with: Rescaling (x * scale + offset),
Normalization ((x - mean) / max(sqrt(variance), 1e-7), or with Keras 3's ``invert`` the reverse; mean and
variance from the adapted weights or the config) and Resizing (``tf.image.resize``: bilinear or nearest
with half-pixel centers, as TF's kernels compute them; crop/pad to aspect ratio and antialiasing are
refused) and CenterCrop (a Slice of the middle window of an image at least the crop's size)."""

from __future__ import annotations

import math

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import resize_attrs
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode
from pegasus.importers.keras.layers.conv import channels_last
from pegasus.importers.keras.layers.normalization import axes, emit_affine
from pegasus.limits import check_tensor

EPSILON = 1e-7   # keras.backend.epsilon(), Normalization's floor on the standard deviation


@converter("Rescaling")
def rescaling(ctx: KerasContext, node: KerasNode) -> None:
    x = node.inputs[0]
    scale = np.asarray(node.attrs.get("scale", 1.0), np.float32)
    offset = np.asarray(node.attrs.get("offset", 0.0), np.float32)
    scaled = ctx.emit("Mul", [x, ctx.param(node, "scale", scale)], node=node, suffix="/scale")[0]
    ctx.emit("Add", [scaled, ctx.param(node, "offset", offset)], node=node, outputs=node.outputs[:1])


@converter("Normalization")
def normalization(ctx: KerasContext, node: KerasNode) -> None:
    cfg, x = node.attrs, node.inputs[0]
    shape = ctx.type_of(x).shape
    keep = axes(node, len(shape)) if cfg.get("axis", -1) is not None else []
    if cfg.get("mean") is not None and cfg.get("variance") is not None:
        mean, variance = (np.asarray(cfg[k], np.float64) for k in ("mean", "variance"))
    else:
        w = ctx.weights(node, ["mean", "variance", "count"])
        mean, variance = w["mean"].astype(np.float64), w["variance"].astype(np.float64)
    size = math.prod(shape[a] for a in keep)
    check_tensor([size], 8, f"{node.describe()}: mean and variance")   # broadcast from the config's scalars
    mean = np.broadcast_to(mean.reshape(-1), (size,)) if mean.size in (1, size) else None
    variance = np.broadcast_to(variance.reshape(-1), (size,)) if variance.size in (1, size) else None
    if mean is None or variance is None:
        raise PegasusError(f"{node.describe()}: mean/variance do not fit axes {keep} of {list(shape)}")
    spread = np.maximum(np.sqrt(variance), EPSILON)
    if cfg.get("invert"):
        slope, offset = spread, mean
    else:
        slope, offset = 1.0 / spread, -mean / spread
    if not keep:
        slope, offset = slope.reshape(()), offset.reshape(())
    emit_affine(ctx, node, x, slope, offset, keep)


_INTERPOLATION = {"bilinear": "linear", "nearest": "nearest"}


@converter("Resizing")
def resizing(ctx: KerasContext, node: KerasNode) -> None:
    cfg, x = node.attrs, node.inputs[0]
    refused = [k for k in ("crop_to_aspect_ratio", "pad_to_aspect_ratio", "antialias") if cfg.get(k)]
    if refused:
        raise PegasusError(f"{node.describe()}: {refused[0]}=True is not supported")
    mode = _INTERPOLATION.get(str(cfg.get("interpolation", "bilinear")))
    if mode is None:
        raise PegasusError(f"{node.describe()}: interpolation '{cfg.get('interpolation')}' is not supported "
                           f"({', '.join(_INTERPOLATION)})")
    emit_resize(ctx, node, x, (int(cfg["height"]), int(cfg["width"])), mode, half_pixel=True)


def emit_resize(ctx: KerasContext, node: KerasNode, x: str, size: tuple[int, int], mode: str,
                half_pixel: bool) -> str:
    """tf.image.resize of a 4-D tensor (in the layer's data format) to ``size`` as a Resize (the layer)."""
    shape = ctx.type_of(x).shape
    if len(shape) != 4:
        raise PegasusError(f"{node.describe()}: resizes a rank-{len(shape)} tensor; expected an image batch")
    last = channels_last(node)
    nhwc = shape if last else (shape[0], shape[2], shape[3], shape[1])
    attrs = resize_attrs(node, mode, nhwc, list(size), False, half_pixel)
    if not last:
        sizes = attrs["sizes"]
        attrs["sizes"] = (sizes[0], sizes[3], sizes[1], sizes[2])
    return ctx.emit("Resize", [x], attrs, node=node, outputs=node.outputs[:1])[0]


@converter("CenterCrop")
def center_crop(ctx: KerasContext, node: KerasNode) -> None:
    """The middle ``height`` x ``width`` window, starting (size - crop) // 2 (Keras' offsets) on each axis; an
    image smaller than the crop, which Keras resizes first, is refused."""
    cfg, x = node.attrs, node.inputs[0]
    shape = ctx.type_of(x).shape
    if len(shape) != 4:
        raise PegasusError(f"{node.describe()}: crops a rank-{len(shape)} tensor; expected an image batch")
    axes_hw = (1, 2) if channels_last(node) else (2, 3)
    crop = (int(cfg["height"]), int(cfg["width"]))
    if any(shape[a] < c for a, c in zip(axes_hw, crop)):
        raise PegasusError(f"{node.describe()}: the input {list(shape)} is smaller than the crop {list(crop)} "
                           "(Keras resizes it first), which is not supported")
    starts = tuple((shape[a] - c) // 2 for a, c in zip(axes_hw, crop))
    ctx.emit("Slice", [x], {"starts": starts, "ends": tuple(s + c for s, c in zip(starts, crop)), "axes": axes_hw},
             node=node, outputs=node.outputs[:1])
