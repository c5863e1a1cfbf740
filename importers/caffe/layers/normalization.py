"""Caffe converters for normalizations and per-channel affines: BatchNorm, Scale, Bias, LRN, Normalize (SSD)
and Softmax.

BatchNorm holds mean, variance and a moving-average factor: the statistics are blob / factor (0 when the
factor is 0), and y = (x - mean) / sqrt(var + eps). With ``use_global_stats: false`` Caffe normalises with
the batch's own statistics instead (a BatchNormalization in training mode). A per-channel Scale or Bias (axis
1, one value per channel) becomes a BatchNormalization too (mean 0, variance 1, epsilon 0: exactly
gamma * x + beta), so the fold_batchnorm pass merges a Convolution → BatchNorm → Scale chain into the
convolution; other shapes are a Mul/Add with the blob broadcast from ``axis``.

LRN ACROSS_CHANNELS is the registry's LRN (bias = k); WITHIN_CHANNEL is what Caffe builds for it: the squares
averaged over a local_size² window (padding counted), then x * (1 + alpha * average) ^ -beta (Caffe ignores k
there). Normalize is SSD's L2 normalisation, x / sqrt(sum x² + eps) over the channels (or channels and space
with ``across_spatial``), times a learned scale per channel (or one for all).
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.caffe.context import BlobSpec, CaffeContext, converter, param
from pegasus.importers.caffe.layers.common import along, canonical_axis, emit_chain
from pegasus.importers.common.converters import SourceNode

_WITHIN_CHANNEL = 1


def _channel_affine(ctx: CaffeContext, node: SourceNode, x: str, gamma: np.ndarray, beta: np.ndarray) -> None:
    channels = gamma.size
    names = [ctx.add_constant(f"{node.name}/{what}", value.astype(np.float32)) for what, value in
             (("scale", gamma), ("bias", beta), ("mean", np.zeros(channels)), ("var", np.ones(channels)))]
    ctx.emit("BatchNormalization", [x, *names], {"epsilon": 0.0}, node=node)


@converter("BatchNorm")
def batch_norm(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "batch_norm_param")
    shape = ctx.type_of(node.inputs[0]).shape
    if len(shape) < 2:
        raise PegasusError(f"{node.describe()}: needs an (N, C, ...) input, got {list(shape)}")
    channels = shape[1]
    mean, var, factor = ctx.blobs(node, [BlobSpec("mean", (channels,), "mean"),
                                         BlobSpec("variance", (channels,), "var"),
                                         BlobSpec("moving-average factor", (1,), "factor")])
    scale = 0.0 if float(factor[0]) == 0 else 1.0 / float(factor[0])
    params = [("scale", np.ones(channels)), ("bias", np.zeros(channels)), ("mean", mean * scale), ("var", var * scale)]
    names = [ctx.add_constant(f"{node.name}/{what}", value.astype(np.float32)) for what, value in params]
    training = p.HasField("use_global_stats") and not p.use_global_stats
    ctx.emit("BatchNormalization", [node.inputs[0], *names], {"epsilon": float(p.eps), "training_mode": int(training)},
             node=node, outputs=node.outputs[:1])


def _covered_shape(node: SourceNode, shape: tuple, axis: int, num_axes: int) -> tuple[int, ...]:
    axis = canonical_axis(node, axis, len(shape))
    if num_axes < -1 or (num_axes >= 0 and axis + num_axes > len(shape)):
        raise PegasusError(f"{node.describe()}: num_axes {num_axes} does not fit a {len(shape)}-D input from "
                           f"axis {axis}")
    return tuple(shape[axis:] if num_axes == -1 else shape[axis:axis + num_axes])


def _scale_or_bias(ctx: CaffeContext, node: SourceNode, p, scale: bool) -> None:
    """Scale (x * gamma [+ beta]) or Bias (x + beta): the factor is the layer's blob covering ``num_axes``
    axes from ``axis``, or the second bottom (whose shape says which axes it covers)."""
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    rank = len(shape)
    axis = canonical_axis(node, p.axis, rank)
    second = node.inputs[1] if len(node.inputs) > 1 else None
    if second is not None:
        covered = tuple(ctx.type_of(second).shape)
        if tuple(shape[axis:axis + len(covered)]) != covered:
            raise PegasusError(f"{node.describe()}: bottom 1 {list(covered)} does not match input {list(shape)} "
                               f"from axis {axis}")
    else:
        covered = _covered_shape(node, shape, p.axis, p.num_axes)
    what = "scale" if scale else "bias"
    specs = [] if second is not None else [BlobSpec(what, covered, what)]
    if scale and p.bias_term:
        specs.append(BlobSpec("bias", covered, "bias"))
    blobs = ctx.blobs(node, specs)
    op = "Mul" if scale else "Add"
    if second is None:
        if axis == 1 and len(covered) == 1 and rank >= 2:  # per channel: folds into the layer before
            ones, zeros = np.ones(covered, np.float32), np.zeros(covered, np.float32)
            gamma, beta = (blobs[0], blobs[1] if len(blobs) > 1 else zeros) if scale else (ones, blobs[0])
            _channel_affine(ctx, node, x, gamma, beta)
            return
        emit_chain(ctx, node, x, [(o, along(b, axis, rank), {}) for o, b in zip((op, "Add"), blobs)])
        return
    factor = second
    if axis + len(covered) != rank:
        broadcast = tuple(covered) + (1,) * (rank - axis - len(covered))   # along()'s shape, nothing allocated
        factor = ctx.emit("Reshape", [second], {"shape": broadcast}, node=node, suffix="/broadcast")[0]
    if not blobs:
        ctx.emit(op, [x, factor], node=node)
        return
    y = ctx.emit(op, [x, factor], node=node, suffix=f"/{op.lower()}")[0]
    emit_chain(ctx, node, y, [("Add", along(blobs[0], axis, rank), {})])


@converter("Scale")
def scale(ctx: CaffeContext, node: SourceNode) -> None:
    _scale_or_bias(ctx, node, param(node, "scale_param"), scale=True)


@converter("Bias")
def bias(ctx: CaffeContext, node: SourceNode) -> None:
    _scale_or_bias(ctx, node, param(node, "bias_param"), scale=False)


@converter("LRN")
def lrn(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "lrn_param")
    size = int(p.local_size)
    if size < 1 or size % 2 == 0:
        raise PegasusError(f"{node.describe()}: local_size must be odd, got {size}")
    x = node.inputs[0]
    if p.norm_region != _WITHIN_CHANNEL:
        ctx.emit("LRN", [x], {"size": size, "alpha": float(p.alpha), "beta": float(p.beta), "bias": float(p.k)},
                 node=node)
        return
    pad = (size - 1) // 2
    squares = ctx.emit("Mul", [x, x], node=node, suffix="/square")[0]
    average = ctx.emit("AveragePool", [squares], {"kernel_shape": (size, size), "pads": (pad,) * 4,
                                                  "count_include_pad": 1}, node=node, suffix="/average")[0]
    steps = [("Mul", np.float32(p.alpha), {}), ("Add", np.float32(1.0), {}), ("Pow", np.float32(-p.beta), {})]
    factor = emit_chain(ctx, node, average, steps, output=ctx.graph.unique_tensor_name(f"{node.name}/factor"))
    ctx.emit("Mul", [x, factor], node=node, suffix="/normalize", outputs=node.outputs[:1])


@converter("Normalize")
def normalize(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "norm_param")
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    if len(shape) < 2:
        raise PegasusError(f"{node.describe()}: needs an (N, C, ...) input, got {list(shape)}")
    axes = tuple(range(1, len(shape))) if p.across_spatial else (1,)
    gamma = ctx.blobs(node, [BlobSpec("scale", (1,) if p.channel_shared else (shape[1],), "scale")])[0]
    sums = ctx.emit("ReduceSumSquare", [x], {"axes": axes, "keepdims": True}, node=node, suffix="/sum_squares")[0]
    norm = emit_chain(ctx, node, sums, [("Add", np.float32(p.eps), {}), ("Sqrt", None, {})],
                      output=ctx.graph.unique_tensor_name(f"{node.name}/norm"))
    unit = ctx.emit("Div", [x, norm], node=node, suffix="/divide")[0]
    gamma = gamma.reshape(()) if p.channel_shared else along(gamma, 1, len(shape))
    ctx.emit("Mul", [unit, ctx.add_constant(f"{node.name}/scale", gamma)], node=node)


@converter("Softmax")
def softmax(ctx: CaffeContext, node: SourceNode) -> None:
    rank = ctx.type_of(node.inputs[0]).rank
    ctx.emit("Softmax", [node.inputs[0]], {"axis": canonical_axis(node, param(node, "softmax_param").axis, rank)},
             node=node)
