"""Darknet layer converters (one per cfg section type) and their context: the shared converter mechanism
(importers/common/converters.py) plus the weights file, read in cfg order.

Darknet's arithmetic, as the converters reproduce it:
- [convolutional]: padding is size // 2 when ``pad=1`` (else ``padding``, default 0), times the dilation (which a
  1 x 1 kernel ignores); the weights file holds
  biases, then with ``batch_normalize`` scales, rolling mean and rolling variance, then the (filters, C/groups,
  size, size) kernel. Batch normalisation is y = scale * (x - mean) / sqrt(var + 1e-6) + bias, folded into the
  convolution by the import passes.
- activations: leaky is LeakyRelu with slope 0.1; logistic is Sigmoid; swish x * sigmoid(x); mish
  x * tanh(softplus(x)); relu6 and hardswish (x * relu6(x + 3) / 6) as their names say.
- [maxpool]: ``padding`` (in total, default size - 1): windows start padding // 2 before the input and there
  are (in + padding - size) // stride + 1 of them, so stride 1 keeps the size; padded taps never win.
- [avgpool] averages each channel over the whole map; [upsample] repeats pixels ``stride`` times (times
  ``scale``); [route] concatenates the channels of earlier layers (with ``groups``, group ``group_id`` of
  each); [shortcut] adds an earlier layer to the previous one, then its activation.
- [connected]: biases, the (outputs, inputs) matrix ((inputs, outputs) in old transposed files), then the
  batch-norm values; the input is flattened in C, H, W order. [softmax] works on the flattened values of
  each of ``groups`` groups; [dropout] is the identity at inference.
- [yolo], [region] and [cost] compute nothing here: the loader makes a head's input a graph output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pegasus.importers.common.channels_last import ACTIVATIONS
from pegasus.importers.common.converters import ConverterTable, ImportContext, SourceNode
from pegasus.importers.darknet.cfg import Section
from pegasus.importers.darknet.weights import WeightsFile
from pegasus.ir.builder import GraphBuilder

TABLE = ConverterTable("Darknet")
BN_EPSILON = 1e-6
LEAKY_SLOPE = 0.1

#: Darknet activation name -> registry layer (None: linear)
DARKNET_ACTIVATIONS: dict[str, tuple[str, dict[str, Any]] | None] = {
    "linear": None,
    "leaky": ("LeakyRelu", {"alpha": LEAKY_SLOPE}),
    "relu": ACTIVATIONS["relu"],
    "relu6": ACTIVATIONS["relu6"],
    "logistic": ACTIVATIONS["sigmoid"],
    "tanh": ACTIVATIONS["tanh"],
    "elu": ACTIVATIONS["elu"],
    "swish": ACTIVATIONS["swish"],
    "mish": ACTIVATIONS["mish"],
    "hardswish": ACTIVATIONS["hard_swish"],
    "hard_swish": ACTIVATIONS["hard_swish"],
}

#: options that change what a layer computes in ways pegasus does not reproduce: refused when set
_REFUSED = {
    "convolutional": ("binary", "xnor", "flipped", "deform", "share_index", "antialiasing", "coordconv"),
    "maxpool": ("maxpool_depth", "antialiasing"),
    "softmax": ("tree", "spatial"),
}


converter = TABLE.converter


class DarknetContext(ImportContext):
    """The shared context plus the weights file, consumed in cfg order."""

    def __init__(self, builder: GraphBuilder, weights: WeightsFile):
        super().__init__(builder)
        self.weights = weights

    def floats(self, node: SourceNode, count: int) -> np.ndarray:
        return self.weights.take(count, node.name, section(node).line)


def section(node: SourceNode) -> Section:
    section_ = node.attrs["section"]
    for key in _REFUSED.get(section_.kind, ()):
        if section_.has(key) and section_.text(key) not in ("0", "none"):
            raise section_.error("is not supported", key)
    return section_


def _activation(s: Section, default: str) -> tuple[str, tuple[str, dict[str, Any]] | None]:
    name = s.text("activation", default).lower()
    if name not in DARKNET_ACTIVATIONS:
        raise s.error(f"is not a supported activation ({', '.join(sorted(DARKNET_ACTIVATIONS))})", "activation")
    return name, DARKNET_ACTIVATIONS[name]


Layer = tuple[str, list[str], dict[str, Any], str]   # (op, inputs, attributes, layer-name suffix)


def _emit_layers(ctx: DarknetContext, node: SourceNode, layers: list[Layer]) -> str:
    """Emit a chain of (op, inputs, attrs, layer-name suffix): each layer after the first takes the previous
    one's output as its first input; the last one writes the node's output tensor."""
    x = None
    for index, (op, inputs, attrs, suffix) in enumerate(layers):
        last = index == len(layers) - 1
        out = node.outputs[0] if last else ctx.graph.unique_tensor_name(f"{node.name}{suffix or '/out'}")
        args = inputs if x is None else [x, *inputs]
        x = ctx.builder.emit(op, args, attrs, name=node.name + suffix, outputs=[out])[0]
    return x


def _batch_norm(ctx: DarknetContext, node: SourceNode, channels: int, bias: np.ndarray) -> tuple:
    scales, mean, var = (ctx.floats(node, channels) for _ in range(3))
    names = [ctx.add_constant(f"{node.name}/bn_{what}", value) for what, value in
             (("scale", scales), ("bias", bias), ("mean", mean), ("var", var))]
    return ("BatchNormalization", names, {"epsilon": BN_EPSILON}, "/bn")


def _with_activation(layers: list, activation: tuple[str, tuple | None]) -> list:
    name, layer = activation
    return layers if layer is None else layers + [(layer[0], [], layer[1], f"/{name}")]


def _as_image(ctx: DarknetContext, node: SourceNode, x: str) -> str:
    """A [connected] layer's (N, K) output as the (N, K, 1, 1) map Darknet sees."""
    shape = ctx.type_of(x).shape
    if len(shape) == 4:
        return x
    return ctx.emit("Reshape", [x], {"shape": (shape[0], math.prod(shape[1:]), 1, 1)}, node=node,
                    suffix="/as_map")[0]


@converter("convolutional")
def convolutional(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    x = _as_image(ctx, node, node.inputs[0])
    channels = ctx.type_of(x).shape[1]
    filters, size = s.int("filters", 1, minimum=1), s.int("size", 1, minimum=1)
    stride = s.int("stride", 1, minimum=1)
    strides = (s.int("stride_y", stride, minimum=1), s.int("stride_x", stride, minimum=1))
    groups, dilation = s.int("groups", 1, minimum=1), s.int("dilation", 1, minimum=1) if size > 1 else 1
    padding = size // 2 if s.int("pad", 0) else s.int("padding", 0, minimum=0)
    for axis, (extent, step) in enumerate(zip(ctx.type_of(x).shape[2:], strides)):
        darknet = (extent + 2 * padding - size) // step + 1   # Darknet sizes the output without the dilation
        if (extent + 2 * padding * dilation - (size - 1) * dilation - 1) // step + 1 != darknet:
            raise s.error(f"with size {size} and padding {padding} gives a {'height' if axis == 0 else 'width'} "
                          "Darknet computes inconsistently (use an odd size with pad=1)", "dilation")
    if channels % groups or filters % groups:
        raise s.error(f"does not divide the {channels} input channels and {filters} filters", "groups")
    normalize = bool(s.int("batch_normalize", 0))
    activation = _activation(s, "logistic")
    bias = ctx.floats(node, filters)
    bn = _batch_norm(ctx, node, filters, bias) if normalize else None
    kernel_shape = (filters, channels // groups, size, size)
    kernel = ctx.floats(node, math.prod(kernel_shape)).reshape(kernel_shape)
    inputs = [x, ctx.add_constant(f"{node.name}/weights", kernel)]
    if not normalize:
        inputs.append(ctx.add_constant(f"{node.name}/bias", bias))
    attrs = {"kernel_shape": (size, size), "strides": strides, "pads": (padding * dilation,) * 4,
             "dilations": (dilation,) * 2, "group": groups}
    _emit_layers(ctx, node, _with_activation([("Conv", inputs, attrs, "")] + ([bn] if bn else []), activation))


@converter("connected")
def connected(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    depth = math.prod(shape[1:])
    outputs = s.int("output", 1, minimum=1)
    activation = _activation(s, "logistic")
    bias = ctx.floats(node, outputs)
    matrix = ctx.floats(node, outputs * depth)
    matrix = matrix.reshape(depth, outputs).T if ctx.weights.transposed else matrix.reshape(outputs, depth)
    normalize = bool(s.int("batch_normalize", 0))
    bn = _batch_norm(ctx, node, outputs, bias) if normalize else None
    if len(shape) != 2:
        x = ctx.emit("Flatten", [x], {"axis": 1}, node=node, suffix="/flatten")[0]
    inputs = [x, ctx.add_constant(f"{node.name}/weights", np.ascontiguousarray(matrix))]
    if not normalize:
        inputs.append(ctx.add_constant(f"{node.name}/bias", bias))
    _emit_layers(ctx, node, _with_activation([("Gemm", inputs, {"transB": 1}, "")] + ([bn] if bn else []),
                                             activation))


@converter("maxpool")
def maxpool(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    x = _as_image(ctx, node, node.inputs[0])
    stride = s.int("stride", 1, minimum=1)
    strides = (s.int("stride_y", stride, minimum=1), s.int("stride_x", stride, minimum=1))
    size = s.int("size", stride, minimum=1)
    padding = s.int("padding", size - 1, minimum=0)
    begin = padding // 2
    attrs = {"kernel_shape": (size, size), "strides": strides,
             "pads": (begin, begin, padding - begin, padding - begin)}
    ctx.emit("MaxPool", [x], attrs, node=node, outputs=node.outputs[:1])


@converter("avgpool")
def avgpool(ctx: DarknetContext, node: SourceNode) -> None:
    section(node)
    ctx.emit("GlobalAveragePool", [_as_image(ctx, node, node.inputs[0])], node=node)


@converter("upsample")
def upsample(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    x = _as_image(ctx, node, node.inputs[0])
    stride = s.int("stride", 2)
    if stride < 1:
        raise s.error("must be positive (a negative stride, downsampling, is not supported)", "stride")
    scale = s.float("scale", 1.0)
    n, c, h, w = ctx.type_of(x).shape
    layers = [("Resize", [x], {"sizes": (n, c, h * stride, w * stride), "mode": "nearest",
                               "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, "")]
    if scale != 1:
        layers.append(("Mul", [ctx.add_constant(f"{node.name}/scale", np.float32(scale))], {}, "/scale"))
    _emit_layers(ctx, node, layers)


@converter("route")
def route(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    groups = s.int("groups", 1, minimum=1)
    group_id = s.int("group_id", 0, minimum=0)
    if group_id >= groups:
        raise s.error(f"must be below groups ({groups})", "group_id")
    shapes = [ctx.type_of(name).shape for name in node.inputs]
    if any(len(shape) != 4 or shape[2:] != shapes[0][2:] for shape in shapes):
        raise s.error(f"joins maps of different sizes ({', '.join(str(list(sh)) for sh in shapes)})", "layers")
    parts = []
    for index, (name, shape) in enumerate(zip(node.inputs, shapes)):
        if shape[1] % groups:
            raise s.error(f"does not divide the {shape[1]} channels of input {index}", "groups")
        width = shape[1] // groups
        if groups == 1:
            parts.append(name)
            continue
        parts.append(ctx.emit("Slice", [name], {"starts": (group_id * width,), "ends": ((group_id + 1) * width,),
                                                "axes": (1,)}, node=node,
                              outputs=node.outputs[:1] if len(node.inputs) == 1 else None, suffix=f"/group_{index}")[0])
    if len(parts) > 1:
        ctx.emit("Concat", parts, {"axis": 1}, node=node)
    elif groups == 1:
        ctx.emit("Identity", parts, node=node)


@converter("shortcut")
def shortcut(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    if s.text("weights_type", "none") != "none":
        raise s.error("is not supported (only unweighted shortcuts are)", "weights_type")
    for key in ("alpha", "beta"):
        if s.float(key, 1.0) != 1:
            raise s.error("is not supported (only 1)", key)
    shapes = [ctx.type_of(name).shape for name in node.inputs]
    if any(shape != shapes[0] for shape in shapes):
        raise s.error(f"adds maps of different shapes ({', '.join(str(list(sh)) for sh in shapes)})", "from")
    activation = _activation(s, "linear")
    op = "Add" if len(node.inputs) == 2 else "Sum"
    _emit_layers(ctx, node, _with_activation([(op, list(node.inputs), {}, "")], activation))


@converter("dropout")
def dropout(ctx: DarknetContext, node: SourceNode) -> None:
    section(node)
    ctx.emit("Identity", node.inputs[:1], node=node)


@converter("softmax")
def softmax(ctx: DarknetContext, node: SourceNode) -> None:
    s = section(node)
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    groups = s.int("groups", 1, minimum=1)
    temperature = s.float("temperature", 1.0)
    total = math.prod(shape[1:])
    if total % groups or temperature <= 0:
        raise s.error(f"must divide the {total} values per image (and temperature be positive)", "groups")
    layers = []
    if temperature != 1:
        layers.append(("Mul", [ctx.add_constant(f"{node.name}/temperature", np.float32(1 / temperature))], {},
                       "/temperature"))
    grouped = (shape[0], groups, total // groups)
    if tuple(shape) != (shape[0], total) or groups > 1:   # softmax over each group of the flattened values
        layers += [("Reshape", [], {"shape": grouped}, "/groups"), ("Softmax", [], {"axis": -1}, "/softmax"),
                   ("Reshape", [], {"shape": tuple(shape)}, "")]
    else:
        layers.append(("Softmax", [], {"axis": -1}, ""))
    op, inputs, attrs, suffix = layers[0]
    _emit_layers(ctx, node, [(op, [x, *inputs], attrs, suffix), *layers[1:]])


@converter("yolo", "region", "cost")
def head(ctx: DarknetContext, node: SourceNode) -> None:
    """Decoding boxes (and the training cost) is post-processing: the loader outputs the head's input."""
