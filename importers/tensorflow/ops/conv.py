"""TensorFlow converters for convolutions and what follows them: Conv2D (NHWC or NCHW; SAME, VALID or explicit
paddings; dilations; grouped when the filter has fewer input channels than x), DepthwiseConv2dNative,
Conv2DBackpropInput (the transposed convolution), BiasAdd and FusedBatchNorm/V2/V3 in inference form.

Filters are HWIO ((kh, kw, C/group, M); depthwise (kh, kw, C, multiplier)) and become the registry's
(M, C/group, kh, kw) once at import (importers/common/channels_last.py); activations keep the model's layout
(``channels_last`` on the registry op). BiasAdd is an Add of the bias along the channel axis and an NHWC
FusedBatchNorm a Mul and an Add of per-channel constants: the import pass fold_channel_affine.py folds both
into a channels-last Conv before them (fold_batchnorm.py folds an NCHW one, a BatchNormalization).
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import depthwise_to_oihw, hwio_to_oihw, padding
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.context import TfContext, converter


def explicit_pads(ctx: TfContext, node: SourceNode) -> tuple[int, ...]:
    """``explicit_paddings`` (a (before, after) pair per dimension, in data_format order) as the registry's
    pads: the spatial befores, then the spatial afters."""
    values = [int(v) for v in node.attrs.get("explicit_paddings", [])]
    pairs = [values[i:i + 2] for i in range(0, len(values), 2)]
    spatial = pairs[1:-1] if ctx.channels_last(node) else pairs[2:]
    if len(pairs) < 3 or any(pair[0] < 0 or pair[1] < 0 for pair in spatial):
        raise PegasusError(f"{node.describe()}: explicit_paddings {values} are not (before, after) pairs per "
                           "dimension")
    return tuple(p[0] for p in spatial) + tuple(p[1] for p in spatial)


def _window(ctx: TfContext, node: SourceNode, dilations: bool = True) -> dict:
    attrs = {"strides": ctx.spatial(node, "strides"), "channels_last": ctx.channels_last(node)}
    if dilations:
        attrs["dilations"] = ctx.spatial(node, "dilations")
    if node.attrs.get("padding") == "EXPLICIT":
        attrs["pads"] = explicit_pads(ctx, node)
    else:
        attrs.update(padding(node, node.attrs.get("padding", "VALID")))
    return attrs


def _channels(ctx: TfContext, node: SourceNode, x: str) -> int:
    shape = ctx.type_of(x).shape
    if len(shape) < 3:
        raise PegasusError(f"{node.describe()}: its input has shape {list(shape)}; a {node.op_type} takes a batch of "
                           "feature maps (rank 3 or more)")
    return shape[-1] if ctx.channels_last(node) else shape[1]


def _filter(ctx: TfContext, node: SourceNode, index: int = 1) -> np.ndarray:
    w = ctx.constant(node, index, "filter")
    if w.ndim != 4:
        raise PegasusError(f"{node.describe()}: filter {list(w.shape)} is not (kh, kw, in, out)")
    return w


@converter("Conv2D")
def conv2d(ctx: TfContext, node: SourceNode) -> None:
    """Conv2D: filter (kh, kw, C/group, M)."""
    x, w = node.inputs[0], _filter(ctx, node)
    channels = _channels(ctx, node, x)
    if channels % w.shape[2] or w.shape[3] % (channels // w.shape[2]):
        raise PegasusError(f"{node.describe()}: filter {list(w.shape)} does not fit {channels} input channels")
    weights = ctx.add_constant(f"{node.name}/filter", hwio_to_oihw(w))
    ctx.emit("Conv", [x, weights], {**_window(ctx, node), "group": channels // w.shape[2]}, node=node,
             outputs=node.outputs[:1])


@converter("DepthwiseConv2dNative")
def depthwise_conv2d(ctx: TfContext, node: SourceNode) -> None:
    """DepthwiseConv2dNative: filter (kh, kw, C, multiplier); output channel c * multiplier + m."""
    x, w = node.inputs[0], _filter(ctx, node)
    channels = _channels(ctx, node, x)
    if w.shape[2] != channels:
        raise PegasusError(f"{node.describe()}: filter {list(w.shape)} does not fit {channels} input channels")
    kh, kw, c, m = w.shape
    weights = ctx.add_constant(f"{node.name}/filter", depthwise_to_oihw(w.reshape(kh, kw, c * m)))
    ctx.emit("Conv", [x, weights], {**_window(ctx, node), "group": channels}, node=node, outputs=node.outputs[:1])


@converter("Conv2DBackpropInput")
def conv2d_backprop_input(ctx: TfContext, node: SourceNode) -> None:
    """Conv2DBackpropInput(input_sizes, filter (kh, kw, out channels, in channels), x): the transposed
    convolution producing ``input_sizes``; its weights become (C_in, M, kh, kw)."""
    sizes, w, x = ctx.ints(node, 0, "input sizes"), _filter(ctx, node), node.inputs[2]
    if w.shape[3] != _channels(ctx, node, x):
        raise PegasusError(f"{node.describe()}: filter {list(w.shape)} does not fit {_channels(ctx, node, x)} "
                           "input channels")
    weights = ctx.add_constant(f"{node.name}/filter", np.ascontiguousarray(w.transpose(3, 2, 0, 1)))
    attrs = _window(ctx, node)
    target = tuple(sizes[1:-1] if ctx.channels_last(node) else sizes[2:])
    if "pads" in attrs:     # explicit: the output size fixes the extra rows at the end (output_padding)
        in_shape = ctx.type_of(x).shape
        spatial = in_shape[1:-1] if ctx.channels_last(node) else in_shape[2:]
        n = len(target)
        dilation = attrs["dilations"] or (1,) * n
        reached = [(i - 1) * s + (k - 1) * d + 1 - attrs["pads"][a] - attrs["pads"][a + n] for a, (i, s, k, d)
                   in enumerate(zip(spatial, attrs["strides"], w.shape[:2], dilation))]
        attrs["output_padding"] = tuple(t - r for t, r in zip(target, reached))
    else:
        attrs["output_shape"] = target
    ctx.emit("ConvTranspose", [x, weights], attrs, node=node, outputs=node.outputs[:1])


def _per_channel(ctx: TfContext, node: SourceNode, x: str, vector: str) -> str:
    """``vector`` (C,) shaped to broadcast along x's channel axis (C, 1, ..., 1 for NCHW)."""
    rank = ctx.type_of(x).rank
    if ctx.channels_last(node) or rank < 3:
        return vector
    shape = tuple(ctx.type_of(vector).shape) + (1,) * (rank - 2)
    return ctx.emit("Reshape", [vector], {"shape": shape}, node=node, suffix="/per_channel")[0]


@converter("BiasAdd", "BiasAddV1")
def bias_add(ctx: TfContext, node: SourceNode) -> None:
    x = node.inputs[0]
    ctx.emit("Add", [x, _per_channel(ctx, node, x, node.inputs[1])], node=node, outputs=node.outputs[:1])


@converter("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def fused_batch_norm(ctx: TfContext, node: SourceNode) -> None:
    """Inference form: y = (x - mean) * scale / sqrt(variance + epsilon) + offset per channel; NHWC as a Mul
    and an Add of constants, NCHW as the registry's BatchNormalization."""
    if node.attrs.get("is_training", True):
        raise PegasusError(f"{node.describe()}: is_training is set (batch statistics, a training graph); export "
                           "the model in inference mode")
    x = node.inputs[0]
    scale, offset, mean, variance = (ctx.constant(node, i, what).astype(np.float64) for i, what in
                                     ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")))
    epsilon = float(node.attrs.get("epsilon", 1e-4))
    if not ctx.channels_last(node):
        params = [ctx.add_constant(f"{node.name}/{what}", value.astype(np.float32)) for what, value in
                  (("scale", scale), ("offset", offset), ("mean", mean), ("variance", variance))]
        ctx.emit("BatchNormalization", [x, *params], {"epsilon": epsilon}, node=node, outputs=node.outputs[:1])
        return
    if np.any(variance + epsilon < 0):
        raise PegasusError(f"{node.describe()}: its variance has negative values (smallest {variance.min():g}), which "
                           "no trained batch norm has (a damaged model)")
    dtype = ctx.type_of(x).dtype.numpy
    with np.errstate(all="ignore"):  # huge or non-finite values from the file give inf/NaN, as TensorFlow's would
        k = scale / np.sqrt(variance + epsilon)
        k_cast, shift_cast = k.astype(dtype), (offset - mean * k).astype(dtype)
    factor = ctx.add_constant(f"{node.name}/factor", k_cast)
    shift = ctx.add_constant(f"{node.name}/shift", shift_cast)
    scaled = ctx.emit("Mul", [x, factor], node=node, suffix="/scale")[0]
    ctx.emit("Add", [scaled, shift], node=node, outputs=node.outputs[:1])
