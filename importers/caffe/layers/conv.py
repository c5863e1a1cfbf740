"""Caffe converters for the layers with weights on a window or a matrix: Convolution, Deconvolution and
InnerProduct.

Caffe's blobs are already in the registry's layouts: Convolution (M, C/group, k...), Deconvolution
(C, M/group, k...), both NCHW with symmetric padding; InnerProduct (N, K) — (K, N) with ``transpose`` — over
the input flattened from ``axis`` on, which becomes a Gemm between a Flatten and, when leading axes stay,
a Reshape back.
"""

from __future__ import annotations

import math

from pegasus.errors import PegasusError
from pegasus.importers.caffe.context import BlobSpec, CaffeContext, converter, param
from pegasus.importers.caffe.layers.common import canonical_axis, optional, spatial_values
from pegasus.importers.common.converters import SourceNode


def _geometry(node: SourceNode, p, n: int) -> dict:
    """kernel/pads/strides/dilations of a ConvolutionParameter over ``n`` spatial axes."""
    kernel = spatial_values(node, "kernel", p.kernel_size, optional(p, "kernel_h"), optional(p, "kernel_w"), n, None)
    pads = spatial_values(node, "pad", p.pad, optional(p, "pad_h"), optional(p, "pad_w"), n, 0)
    strides = spatial_values(node, "stride", p.stride, optional(p, "stride_h"), optional(p, "stride_w"), n, 1)
    dilations = spatial_values(node, "dilation", p.dilation, None, None, n, 1)
    if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1:
        raise PegasusError(f"{node.describe()}: kernel, stride and dilation must be positive")
    return {"kernel_shape": kernel, "pads": pads + pads, "strides": strides, "dilations": dilations}


def _conv_setup(ctx: CaffeContext, node: SourceNode) -> tuple:
    p = param(node, "convolution_param")
    shape = ctx.type_of(node.inputs[0]).shape
    if p.axis != 1 or len(shape) < 3:
        raise PegasusError(f"{node.describe()}: needs an (N, C, spatial...) input with channels on axis 1, got "
                           f"{list(shape)} with axis {p.axis}")
    channels, outputs, group = shape[1], p.num_output, p.group
    if outputs < 1:
        raise PegasusError(f"{node.describe()}: num_output is required")
    if group < 1 or channels % group or outputs % group:
        raise PegasusError(f"{node.describe()}: group {group} does not divide {channels} input and {outputs} "
                           "output channels")
    return p, channels, outputs, group, _geometry(node, p, len(shape) - 2)


def _emit(ctx: CaffeContext, node: SourceNode, op: str, weight_shape: tuple, outputs: int, p, attrs: dict) -> None:
    specs = [BlobSpec("weights", weight_shape)] + ([BlobSpec("bias", (outputs,), "bias")] if p.bias_term else [])
    blobs = ctx.blobs(node, specs)
    inputs = [node.inputs[0], ctx.add_constant(f"{node.name}/weights", blobs[0])]
    if p.bias_term:
        inputs.append(ctx.add_constant(f"{node.name}/bias", blobs[1]))
    ctx.emit(op, inputs, attrs, node=node)


@converter("Convolution")
def convolution(ctx: CaffeContext, node: SourceNode) -> None:
    p, channels, outputs, group, attrs = _conv_setup(ctx, node)
    _emit(ctx, node, "Conv", (outputs, channels // group, *attrs["kernel_shape"]), outputs, p,
          {**attrs, "group": group})


@converter("Deconvolution")
def deconvolution(ctx: CaffeContext, node: SourceNode) -> None:
    """Output size stride * (in - 1) + dilation * (k - 1) + 1 - 2 * pad, as ConvTranspose with those pads."""
    p, channels, outputs, group, attrs = _conv_setup(ctx, node)
    _emit(ctx, node, "ConvTranspose", (channels, outputs // group, *attrs["kernel_shape"]), outputs, p,
          {**attrs, "group": group})


@converter("InnerProduct")
def inner_product(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "inner_product_param")
    shape = ctx.type_of(node.inputs[0]).shape
    axis = canonical_axis(node, p.axis, len(shape))
    depth, rows = math.prod(shape[axis:]), math.prod(shape[:axis])
    if p.num_output < 1:
        raise PegasusError(f"{node.describe()}: num_output is required")
    n = p.num_output
    specs = [BlobSpec("weights", (depth, n) if p.transpose else (n, depth))]
    specs += [BlobSpec("bias", (n,), "bias")] if p.bias_term else []
    blobs = ctx.blobs(node, specs)
    x = node.inputs[0]
    if tuple(shape) != (rows, depth):
        x = ctx.emit("Flatten", [x], {"axis": axis}, node=node, suffix="/flatten")[0]
    inputs = [x, ctx.add_constant(f"{node.name}/weights", blobs[0])]
    if p.bias_term:
        inputs.append(ctx.add_constant(f"{node.name}/bias", blobs[1]))
    keep = axis != 1  # leading axes besides the batch stay: (rows, n) back to shape[:axis] + (n,)
    out = ctx.graph.unique_tensor_name(f"{node.name}/rows") if keep else node.outputs[0]
    ctx.builder.emit("Gemm", inputs, {"transB": 0 if p.transpose else 1}, name=node.name, outputs=[out])
    if keep:
        ctx.emit("Reshape", [out], {"shape": tuple(shape[:axis]) + (n,)}, node=node, outputs=node.outputs[:1],
                 suffix="/unflatten")
