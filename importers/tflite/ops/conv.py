"""TFLite converters for the MAC-heavy ops: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED and
BATCH_MATMUL.

Activations stay NHWC (``channels_last`` on Conv/ConvTranspose); kernels are turned into the registry's
(M, C/group, kh, kw) once, at import (importers/common/channels_last.py). FULLY_CONNECTED flattens its input
to (rows, K) as TFLite does (a Reshape, which costs nothing) and becomes a Gemm with the (N, K) weights,
then takes the input's leading shape back when ``keep_num_dims``. BATCH_MATMUL (attention's Q·K^T and
scores·V) is the registry MatMul (NumPy's batch broadcasting, TFLite's too), adj_x/adj_y a Transpose of the
last two axes before it.
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import depthwise_to_oihw, emit_activated, ohwi_to_oihw, padding
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter


def _window(node: SourceNode) -> dict:
    attrs = node.attrs
    return {**padding(node, attrs.get("padding", "VALID")),
            "strides": (int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))),
            "dilations": (int(attrs.get("dilation_h_factor", attrs.get("dilation_hfactor", 1))),
                          int(attrs.get("dilation_w_factor", attrs.get("dilation_wfactor", 1)))),
            "channels_last": True}


def _bias(ctx: TfliteContext, node: SourceNode, index: int) -> list[str]:
    bias = ctx.weights(node, index, "bias", optional=True)
    return [] if bias is None else [ctx.add_constant(f"{node.name}/bias", bias)]


@converter("CONV_2D")
def conv_2d(ctx: TfliteContext, node: SourceNode) -> None:
    """CONV_2D: x (N, H, W, C), filter (M, kh, kw, C/groups), bias (M)."""
    w = ctx.weights(node, 1, "filter")
    channels = ctx.type_of(node.inputs[0]).shape[-1]
    if w.ndim != 4 or channels % w.shape[-1]:
        raise PegasusError(f"{node.describe()}: filter {list(w.shape)} does not fit {channels} input channels")
    weights = ctx.add_constant(f"{node.name}/filter", ohwi_to_oihw(w))
    attrs = {**_window(node), "group": channels // w.shape[-1]}
    emit_activated(ctx, node, "Conv", [node.inputs[0], weights, *_bias(ctx, node, 2)], attrs, ctx.activation(node))


@converter("DEPTHWISE_CONV_2D")
def depthwise_conv_2d(ctx: TfliteContext, node: SourceNode) -> None:
    """DEPTHWISE_CONV_2D: filter (1, kh, kw, C*multiplier); output channel c*multiplier + m."""
    w = ctx.weights(node, 1, "filter")
    channels = ctx.type_of(node.inputs[0]).shape[-1]
    if w.ndim != 4 or w.shape[0] != 1 or w.shape[-1] % channels:
        raise PegasusError(f"{node.describe()}: filter {list(w.shape)} does not fit {channels} input channels")
    weights = ctx.add_constant(f"{node.name}/filter", depthwise_to_oihw(w[0]))
    attrs = {**_window(node), "group": channels}
    emit_activated(ctx, node, "Conv", [node.inputs[0], weights, *_bias(ctx, node, 2)], attrs, ctx.activation(node))


@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: TfliteContext, node: SourceNode) -> None:
    """TRANSPOSE_CONV: inputs (output_shape, filter (M, kh, kw, C), x, [bias]); the output shape fixes the
    padding (SAME: the smaller half before, as ONNX's SAME_UPPER)."""
    shape = ctx.ints(node, 0, "output shape")
    w = ctx.weights(node, 1, "filter")
    weights = ctx.add_constant(f"{node.name}/filter", w.transpose(3, 0, 1, 2).copy())  # (C, M, kh, kw)
    attrs = {**_window(node), "output_shape": tuple(shape[1:-1])}
    attrs.pop("dilations")
    inputs = [node.inputs[2], weights, *_bias(ctx, node, 3)]
    emit_activated(ctx, node, "ConvTranspose", inputs, attrs, ctx.activation(node))


@converter("FULLY_CONNECTED")
def fully_connected(ctx: TfliteContext, node: SourceNode) -> None:
    """FULLY_CONNECTED: y = x @ W^T + b over the input flattened to (rows, K), W (N, K)."""
    if node.attrs.get("weights_format", "DEFAULT") != "DEFAULT":
        raise PegasusError(f"{node.describe()}: weights_format {node.attrs['weights_format']} is not supported")
    x_shape = ctx.type_of(node.inputs[0]).shape
    w = ctx.weights(node, 1, "weights")
    if w.ndim != 2:
        raise PegasusError(f"{node.describe()}: weights of shape {list(w.shape)}; FULLY_CONNECTED takes (N, K)")
    depth = w.shape[-1]
    total = 1
    for d in x_shape:
        total *= d
    if w.ndim != 2 or total % depth:
        raise PegasusError(f"{node.describe()}: weights {list(w.shape)} do not fit input {list(x_shape)}")
    x = node.inputs[0]
    if len(x_shape) != 2 or x_shape[1] != depth:
        x = ctx.emit("Reshape", [x], {"shape": (total // depth, depth)}, node=node, suffix="/flatten")[0]
    inputs = [x, ctx.add_constant(f"{node.name}/weights", w), *_bias(ctx, node, 2)]
    keep = bool(node.attrs.get("keep_num_dims", False)) and len(x_shape) != 2
    out = ctx.graph.unique_tensor_name(f"{node.name}/rows") if keep else None
    y = emit_activated(ctx, node, "Gemm", inputs, {"transB": 1}, ctx.activation(node), output=out)
    if keep:
        ctx.emit("Reshape", [y], {"shape": tuple(x_shape[:-1]) + (w.shape[0],)}, node=node, outputs=node.outputs[:1],
                 suffix="/unflatten")


@converter("BATCH_MATMUL")
def batch_matmul(ctx: TfliteContext, node: SourceNode) -> None:
    """BATCH_MATMUL: x (..., M, K) @ y (..., K, N), either operand transposed first when adj_x / adj_y."""
    operands = []
    for index, flag in ((0, "adj_x"), (1, "adj_y")):
        name, rank = node.inputs[index], len(ctx.type_of(node.inputs[index]).shape)
        if rank < 2:
            raise PegasusError(f"{node.describe()}: operand {index} of rank {rank} (BATCH_MATMUL needs rank 2 or more)")
        if node.attrs.get(flag, False):
            perm = (*range(rank - 2), rank - 1, rank - 2)
            name = ctx.emit("Transpose", [name], {"perm": perm}, node=node, suffix=f"/{flag}")[0]
        operands.append(name)
    ctx.emit("MatMul", operands, node=node)
