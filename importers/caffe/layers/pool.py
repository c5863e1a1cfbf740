"""Caffe converters for pooling and resizing: Pooling, Interp and Upsample.

Pooling follows Caffe's arithmetic: the output size is ceil((in + 2 * pad - kernel) / stride) + 1, less one
when padding would make the last window start in the padding (OpenCV's ``ceil_mode: false`` floors
instead); MAX ignores the padding; AVE divides by the taps inside the padded input, padding included but not
the part of a last window that overruns it. That is the registry's MaxPool/AveragePool with symmetric pads,
``ceil_mode`` and ``count_include_pad``. A configuration where the two rules disagree (a window starting past
the input, possible only when the kernel is smaller than the stride) is refused.

Interp (DeepLab/PSPNet) is bilinear resizing with aligned corners — Caffe's source coordinate is
out * (in - 1) / (out - 1) — after cropping by its non-positive pads; Upsample (the YOLOv3 Caffe ports) is
nearest-neighbour upsampling by an integer factor.
"""

from __future__ import annotations

import math

from pegasus.errors import PegasusError
from pegasus.importers.caffe.context import CaffeContext, converter, param
from pegasus.importers.caffe.layers.common import optional
from pegasus.importers.common.converters import SourceNode

_MAX, _AVE = 0, 1


def _pool_size(size: int, kernel: int, pad: int, stride: int, ceil: bool) -> int:
    """Caffe's (and OpenCV's) pooled size along one axis."""
    span = size + 2 * pad - kernel
    if not ceil:
        return span // stride + 1
    out = math.ceil(span / stride) + 1
    if pad and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _onnx_pool_size(size: int, kernel: int, pad: int, stride: int, ceil: bool) -> int:
    """The registry's pooled size for the same window (spatial.window)."""
    span = size + 2 * pad - kernel
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and span >= 0 and (out - 1) * stride >= size + pad:
        out -= 1
    return out


@converter("Pooling")
def pooling(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "pooling_param")
    if len(node.outputs) > 1:
        raise PegasusError(f"{node.describe()}: a second top (the max-pooling mask) is not supported")
    if p.pool not in (_MAX, _AVE):
        raise PegasusError(f"{node.describe()}: STOCHASTIC pooling is not supported (MAX and AVE are)")
    shape = ctx.type_of(node.inputs[0]).shape
    if len(shape) != 4:
        raise PegasusError(f"{node.describe()}: needs a 4-D (N, C, H, W) input, got {list(shape)}")
    pads = (optional(p, "pad_h"), optional(p, "pad_w"))
    pads = pads if pads != (None, None) else (p.pad, p.pad)
    if p.global_pooling:
        if any(pads) or p.stride != 1 or optional(p, "stride_h") or optional(p, "stride_w"):
            raise PegasusError(f"{node.describe()}: global pooling takes no pad or stride")
        ctx.emit("GlobalMaxPool" if p.pool == _MAX else "GlobalAveragePool", [node.inputs[0]], node=node)
        return
    kernel = (optional(p, "kernel_h"), optional(p, "kernel_w"))
    if kernel == (None, None):
        if not p.HasField("kernel_size"):
            raise PegasusError(f"{node.describe()}: kernel_size (or kernel_h and kernel_w) is required")
        kernel = (p.kernel_size, p.kernel_size)
    strides = (optional(p, "stride_h"), optional(p, "stride_w"))
    strides = strides if strides != (None, None) else (p.stride, p.stride)
    if None in pads or None in kernel or None in strides:
        raise PegasusError(f"{node.describe()}: the _h and _w forms of pad, kernel and stride go in pairs")
    if min(kernel) < 1 or min(strides) < 1:
        raise PegasusError(f"{node.describe()}: kernel and stride must be positive")
    ceil = bool(p.ceil_mode)
    for size, k, pad, s in zip(shape[2:], kernel, pads, strides):
        if pad >= k:
            raise PegasusError(f"{node.describe()}: pad {pad} must be smaller than the kernel {k}")
        caffe, ours = _pool_size(size, k, pad, s, ceil), _onnx_pool_size(size, k, pad, s, ceil)
        if caffe != ours:
            raise PegasusError(f"{node.describe()}: Caffe's last window (kernel {k}, stride {s}, size {size}) would "
                               "start outside the input; pegasus refuses this pooling")
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads + pads, "ceil_mode": int(ceil)}
    if p.pool == _AVE:
        attrs["count_include_pad"] = 1
    ctx.emit("MaxPool" if p.pool == _MAX else "AveragePool", [node.inputs[0]], attrs, node=node,
             outputs=node.outputs[:1])


def _interp_size(node: SourceNode, p, size: int, reference: int | None) -> int:
    if reference is not None:
        return reference
    shrink, zoom = optional(p, "shrink_factor"), optional(p, "zoom_factor")
    if shrink is None and zoom is None:
        raise PegasusError(f"{node.describe()}: give height and width, zoom_factor or shrink_factor")
    if (shrink is not None and shrink < 1) or (zoom is not None and zoom < 1):
        raise PegasusError(f"{node.describe()}: zoom_factor and shrink_factor must be positive")
    if shrink is not None:
        size = (size - 1) // shrink + 1
    if zoom is not None:
        size = size + (size - 1) * (zoom - 1)
    return size


@converter("Interp")
def interp(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "interp_param")
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    if len(shape) != 4:
        raise PegasusError(f"{node.describe()}: needs a 4-D (N, C, H, W) input, got {list(shape)}")
    if p.pad_beg > 0 or p.pad_end > 0:
        raise PegasusError(f"{node.describe()}: pad_beg and pad_end must be 0 or negative (a crop), as in Caffe")
    sized = p.HasField("height") or p.HasField("width")
    if len(node.inputs) > 1 and (sized or p.HasField("zoom_factor") or p.HasField("shrink_factor")):
        raise PegasusError(f"{node.describe()}: a second bottom gives the size; height, width, zoom and shrink "
                           "cannot be set too")
    if sized and not (p.HasField("height") and p.HasField("width")):
        raise PegasusError(f"{node.describe()}: height and width go together")
    reference = ctx.type_of(node.inputs[1]).shape[2:] if len(node.inputs) > 1 else \
        (p.height, p.width) if sized else (None, None)
    effective = [d + p.pad_beg + p.pad_end for d in shape[2:]]
    if min(effective) < 1:
        raise PegasusError(f"{node.describe()}: the pads crop away the whole {shape[2]}x{shape[3]} input")
    if p.pad_beg or p.pad_end:
        x = ctx.emit("Slice", [x], {"starts": (-p.pad_beg, -p.pad_beg), "ends": (shape[2] + p.pad_end,
                                                                                  shape[3] + p.pad_end),
                                    "axes": (2, 3)}, node=node, suffix="/crop")[0]
    sizes = tuple(_interp_size(node, p, d, r) for d, r in zip(effective, reference))
    if min(sizes) < 1:
        raise PegasusError(f"{node.describe()}: output size {list(sizes)} is not positive")
    ctx.emit("Resize", [x], {"sizes": tuple(shape[:2]) + sizes, "mode": "linear",
                             "coordinate_transformation_mode": "align_corners"}, node=node)


@converter("Upsample")
def upsample(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "upsample_param")
    if len(node.inputs) > 1:
        raise PegasusError(f"{node.describe()}: unpooling with a mask (a second bottom) is not supported; "
                           "nearest-neighbour Upsample is")
    shape = ctx.type_of(node.inputs[0]).shape
    factors = (optional(p, "scale_h") or p.scale, optional(p, "scale_w") or p.scale)
    if len(shape) != 4 or min(factors) < 1:
        raise PegasusError(f"{node.describe()}: needs a 4-D input and positive scales, got {list(shape)}, "
                           f"{list(factors)}")
    sizes = tuple(shape[:2]) + (shape[2] * factors[0], shape[3] * factors[1])
    ctx.emit("Resize", [node.inputs[0]], {"sizes": sizes, "mode": "nearest",
                                          "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
             node=node)
