"""What the channels-last frameworks (TFLite, TensorFlow, Keras) share, written once for all three.

- ``padding``: TF's SAME/VALID onto the registry's ``auto_pad`` (SAME puts the odd pixel at the end,
  ONNX's SAME_UPPER).
- ``ACTIVATIONS`` and ``emit_activated``: fused activations (TFLite's ``fused_activation_function``,
  Keras' ``activation=``) as the registry layer that follows the op, named ``<layer>/<activation>``; the
  quantized lowering fuses a ReLU/ReLU6/clip back into its producer.
- weight layouts: TFLite's OHWI convolution kernels and 1HW(C*M) depthwise kernels, TF/Keras' HWIO and
  HW C M ones, all become the registry's (M, C/group, kh, kw); the activations stay channels last
  (``channels_last=True`` on the spatial ops, see pegasus/ops/layout.py), so no transpose is added.
- TF's op semantics the registry does not hold as such: pad modes (``emit_pad``: SYMMETRIC as reversed
  slices), DepthToSpace/SpaceToDepth on NHWC (``emit_depth_to_space``), and the resize flags
  align_corners/half_pixel_centers as Resize coordinate modes (``resize_attrs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ImportContext, SourceNode

_PADDING = {"SAME": "SAME_UPPER", "VALID": "VALID"}


def padding(node: SourceNode, value: Any) -> dict[str, str]:
    """``auto_pad`` for a TF padding name (SAME/VALID, any case)."""
    key = str(value).upper()
    if key not in _PADDING:
        raise PegasusError(f"{node.describe()}: padding '{value}' is not SAME or VALID")
    return {"auto_pad": _PADDING[key]}


#: activation name (lower case; TFLite's enum names lower-cased, Keras' names) -> (registry op, attributes);
#: None for the identity
ACTIVATIONS: dict[str, tuple[str, dict[str, Any]] | None] = {
    "none": None, "linear": None,
    "relu": ("Relu", {}),
    "relu6": ("Clip", {"min": 0.0, "max": 6.0}),
    "relu_n1_to_1": ("Clip", {"min": -1.0, "max": 1.0}),
    "relu_0_to_1": ("Clip", {"min": 0.0, "max": 1.0}),
    "tanh": ("Tanh", {}),
    "sigmoid": ("Sigmoid", {}),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
    "hard_swish": ("HardSwish", {}),
    "swish": ("Swish", {}),
    "silu": ("Swish", {}),
    "gelu": ("Gelu", {"approximate": "none"}),
    "elu": ("Elu", {"alpha": 1.0}),
    "selu": ("Selu", {}),
    "softplus": ("Softplus", {}),
    "softsign": ("Softsign", {}),
    "exponential": ("Exp", {}),
    "softmax": ("Softmax", {"axis": -1}),
    "mish": ("Mish", {}),
}


def activation_layer(node: SourceNode, name: str, table: Mapping[str, Any] | None = None
                     ) -> tuple[str, dict[str, Any]] | None:
    """The registry layer of activation ``name`` in ``table`` (default: ``ACTIVATIONS``)."""
    table = ACTIVATIONS if table is None else table
    key = str(name).lower()
    if key not in table:
        raise PegasusError(f"{node.describe()}: fused activation '{name}' is not supported "
                           f"(supported: {', '.join(sorted(k for k in table if k != 'none'))})")
    return table[key]


def emit_activated(ctx: ImportContext, node: SourceNode, op: str, inputs: list[str], attrs: dict[str, Any],
                   activation: str | None, output: str | None = None, table: Mapping[str, Any] | None = None) -> str:
    """Emit ``op`` as layer ``node.name``, followed by its fused activation (if any) as layer
    ``<node.name>/<activation>``; the last of the two writes ``output`` (default: the node's first output).
    ``table`` maps activation names (default: ``ACTIVATIONS``; Keras passes its version's)."""
    output = output or node.outputs[0]
    layer = activation_layer(node, activation, table) if activation else None
    if layer is None:
        return ctx.builder.emit(op, inputs, attrs, name=node.name, outputs=[output])[0]
    pre = ctx.graph.unique_tensor_name(f"{node.name}/pre_activation")
    ctx.builder.emit(op, inputs, attrs, name=node.name, outputs=[pre])
    act_op, act_attrs = layer
    return ctx.builder.emit(act_op, [pre], act_attrs, name=f"{node.name}/{str(activation).lower()}",
                            outputs=[output])[0]


def ohwi_to_oihw(w: np.ndarray) -> np.ndarray:
    """TFLite CONV_2D kernels (out, kh, kw, in) -> (out, in, kh, kw)."""
    return np.ascontiguousarray(w.transpose(0, w.ndim - 1, *range(1, w.ndim - 1)))


def hwio_to_oihw(w: np.ndarray) -> np.ndarray:
    """TF/Keras Conv kernels (kh, [kw,] in, out) -> (out, in, kh[, kw])."""
    n = w.ndim
    return np.ascontiguousarray(w.transpose(n - 1, n - 2, *range(n - 2)))


def depthwise_to_oihw(w: np.ndarray) -> np.ndarray:
    """Depthwise kernels (*spatial, C*M) whose last axis is channel*M + m — TFLite's (1, kh, kw, C*M) with
    its leading 1 dropped, TF/Keras' (kh, kw, C, M) reshaped — -> (C*M, 1, *spatial) for a Conv with
    group = C."""
    return np.ascontiguousarray(np.moveaxis(w, -1, 0)[:, None])


# ---- TF's pad modes ---------------------------------------------------------------------------------
_PAD_MODES = {"CONSTANT": "constant", "REFLECT": "reflect"}


def emit_pad(ctx: ImportContext, node: SourceNode, x: str, paddings: np.ndarray, mode: str = "CONSTANT",
             value: float = 0.0) -> str:
    """TF's pad of ``x`` by ``paddings`` (rank, 2) as layer ``node.name`` writing the node's output. CONSTANT
    and REFLECT (the edge not repeated) are the registry's Pad; SYMMETRIC (the edge repeated), which Pad
    lacks, is per padded axis a Concat of the reversed border slices around x."""
    paddings = np.asarray(paddings, dtype=np.int64).reshape(-1, 2)
    key = str(mode).upper()
    if key in _PAD_MODES:
        attrs = {"pads": tuple(paddings[:, 0]) + tuple(paddings[:, 1]), "mode": _PAD_MODES[key],
                 "constant_value": float(value)}
        return ctx.emit("Pad", [x], attrs, node=node, outputs=node.outputs[:1])[0]
    if key != "SYMMETRIC":
        raise PegasusError(f"{node.describe()}: pad mode '{mode}' is not CONSTANT, REFLECT or SYMMETRIC")
    axes = [axis for axis in range(len(paddings)) if paddings[axis].any()]
    if not axes:
        return ctx.emit("Identity", [x], node=node, outputs=node.outputs[:1])[0]
    for k, axis in enumerate(axes):
        (before, after), dim = paddings[axis], ctx.type_of(x).shape[axis]
        if before > dim or after > dim:
            raise PegasusError(f"{node.describe()}: SYMMETRIC padding {list(paddings[axis])} exceeds axis {axis} "
                               f"of size {dim}")
        parts = [x]
        if before:   # x[before-1::-1] along axis
            parts.insert(0, ctx.emit("Slice", [x], {"starts": (int(before) - 1,), "ends": (-dim - 1,),
                                                    "axes": (axis,), "steps": (-1,)}, node=node,
                                     suffix=f"/before_{axis}")[0])
        if after:    # x[dim-1:dim-1-after:-1] along axis
            end = dim - 1 - int(after)
            parts.append(ctx.emit("Slice", [x], {"starts": (dim - 1,), "ends": (end if end >= 0 else -dim - 1,),
                                                 "axes": (axis,), "steps": (-1,)}, node=node,
                                  suffix=f"/after_{axis}")[0])
        last = k == len(axes) - 1
        x = ctx.emit("Concat", parts, {"axis": axis}, node=node, outputs=node.outputs[:1] if last else None,
                     suffix="" if last else f"/pad_{axis}")[0]
    return x


# ---- NHWC depth <-> space --------------------------------------------------------------------------
def emit_depth_to_space(ctx: ImportContext, node: SourceNode, x: str, block: int, to_depth: bool) -> str:
    """TF's DepthToSpace (``to_depth`` False) or SpaceToDepth on NHWC data, where channel
    (i * block + j) * C' + c holds pixel (h * block + i, w * block + j): Reshape, Transpose, Reshape (the
    registry's DepthToSpace/SpaceToDepth are channels first)."""
    n, h, w, c = ctx.type_of(x).shape
    if to_depth and (h % block or w % block):
        raise PegasusError(f"{node.describe()}: {h}x{w} is not a multiple of block size {block}")
    if not to_depth and c % (block * block):
        raise PegasusError(f"{node.describe()}: {c} channels are not a multiple of block size {block} squared")
    if to_depth:
        split, out = (n, h // block, block, w // block, block, c), (n, h // block, w // block, c * block * block)
    else:
        split, out = (n, h, w, block, block, c // (block * block)), (n, h * block, w * block, c // (block * block))
    blocks = ctx.emit("Reshape", [x], {"shape": split}, node=node, suffix="/blocks")[0]
    moved = ctx.emit("Transpose", [blocks], {"perm": (0, 1, 3, 2, 4, 5)}, node=node, suffix="/transpose")[0]
    return ctx.emit("Reshape", [moved], {"shape": out}, node=node, outputs=node.outputs[:1])[0]


# ---- TF's image resize flags -------------------------------------------------------------------------
#: (mode, align_corners, half_pixel_centers) -> the registry Resize's (coordinate_transformation_mode,
#: nearest_mode), as TF's and TFLite's reference kernels compute source coordinates in float32: bilinear
#: x = y * step, y * step' or (y + 0.5) * step - 0.5 with step = in/out, step' = (in-1)/(out-1); nearest
#: floor(y * step), round-half-away(y * step') or floor((y + 0.5) * step) (= floor(x + 0.5) of the
#: half-pixel x), clamped to the input.
_RESIZE = {
    ("linear", False, False): ("tf_asymmetric", "floor"),
    ("linear", True, False): ("tf_align_corners", "floor"),
    ("linear", False, True): ("tf_half_pixel", "floor"),
    ("nearest", False, False): ("tf_asymmetric", "floor"),
    ("nearest", True, False): ("tf_align_corners", "round_prefer_ceil"),
    ("nearest", False, True): ("tf_half_pixel", "round_prefer_ceil"),
}


def resize_attrs(node: SourceNode, mode: str, in_shape: tuple[int, ...], size: list[int], align_corners: bool,
                 half_pixel_centers: bool) -> dict[str, Any]:
    """Resize attributes for TF's resize of NHWC ``in_shape`` to ``size`` (height, width)."""
    key = (mode, bool(align_corners), bool(half_pixel_centers))
    if key not in _RESIZE:
        raise PegasusError(f"{node.describe()}: align_corners and half_pixel_centers cannot both be set")
    if len(in_shape) != 4 or len(size) != 2 or min(size) < 1:
        raise PegasusError(f"{node.describe()}: resizes a {list(in_shape)} tensor to {list(size)}; expected NHWC "
                           "and a positive (height, width)")
    coordinates, nearest = _RESIZE[key]
    return {"sizes": (in_shape[0], int(size[0]), int(size[1]), in_shape[3]), "mode": mode,
            "coordinate_transformation_mode": coordinates, "nearest_mode": nearest}


# ---- TF's transposed convolution -----------------------------------------------------------------------
def transposed_conv_pads(in_sizes: list[int] | tuple[int, ...], kernel: list[int] | tuple[int, ...],
                         strides: list[int] | tuple[int, ...], dilations: list[int] | tuple[int, ...],
                         out_sizes: list[int] | tuple[int, ...], same: bool) -> dict[str, tuple[int, ...]]:
    """TF's conv_transpose to ``out_sizes`` (the gradient of a SAME or VALID convolution of an ``out_sizes``
    input) as the registry ConvTranspose's explicit ``pads`` and ``output_padding``: output[i] =
    full[i + before], where full holds (in-1)*stride + extent values and zeros past them, and before is the
    forward convolution's SAME padding before (the smaller half of max((in-1)*stride + extent - out, 0);
    0 for VALID)."""
    begin, end, extra = [], [], []
    for size, k, s, d, out in zip(in_sizes, kernel, strides, dilations, out_sizes):
        full = (size - 1) * s + (k - 1) * d + 1
        before = max(full - out, 0) // 2 if same else 0
        rest = full - before - out
        begin.append(before)
        end.append(max(rest, 0))
        extra.append(max(-rest, 0))
    return {"pads": tuple(begin + end), "output_padding": tuple(extra)}
