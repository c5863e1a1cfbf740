"""PyTorch converters for resampling and padding: upsample/interpolate (nearest, nearest-exact, bilinear,
bicubic, trilinear; align_corners), pad (constant, reflect, replicate, circular), pixel_shuffle.

Resize coordinate modes as PyTorch computes its source index: nearest is ``floor(dst * in / out)``
(asymmetric + floor), nearest-exact ``floor((dst + 0.5) * in / out)``, the linear and cubic modes
``(dst + 0.5) * in / out - 0.5`` (pytorch_half_pixel) or, with align_corners, ``dst * (in - 1) / (out - 1)``.
With ``scale_factor`` given PyTorch uses 1 / scale_factor as the ratio, so the scales are passed as they
are; with a size, the sizes. PyTorch's pad list runs from the last dim backwards, (left, right, top, bottom,
...); the registry's is every begin then every end. pixel_shuffle is DepthToSpace in CRD order,
pixel_unshuffle a Reshape, Transpose and Reshape.
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter

#: aten op -> (Resize mode, coordinate mode, nearest mode)
_MODES = {"upsample_nearest": ("nearest", "asymmetric", "floor"),
          "upsample_nearest_exact": ("nearest", "tf_half_pixel_for_nn", "floor"),
          "upsample_linear": ("linear", "pytorch_half_pixel", "floor"),
          "upsample_bilinear": ("linear", "pytorch_half_pixel", "floor"),
          "upsample_trilinear": ("linear", "pytorch_half_pixel", "floor"),
          "upsample_bicubic": ("cubic", "pytorch_half_pixel", "floor")}


@converter(*[f"aten::{prefix}{op}{n}d" for op in _MODES for n in (1, 2, 3) for prefix in ("", "_")])
def upsample(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args.get("input", args.get("self"))
    mode, coordinates, nearest = _MODES[node.op_type.split("::")[1].lstrip("_")[:-2]]
    if args.get("align_corners"):
        coordinates = "align_corners"
    shape = ctx.shape(x)
    n = len(shape) - 2
    sizes = args.get("output_size")
    scales = args.get("scale_factors")
    if scales is None:  # the non-.vec overloads: scales_h, scales_w (None: from the sizes)
        per_axis = [args.get(k) for k in ("scales_d", "scales_h", "scales_w", "scales")][-n:] if n else []
        scales = per_axis if per_axis and all(s is not None for s in per_axis) else None
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates, "nearest_mode": nearest,
             "cubic_coeff_a": -0.75}
    if scales is not None and not args.get("align_corners"):
        attrs["scales"] = (1.0, 1.0) + tuple(float(s) for s in (scales * n if len(scales) == 1 else scales))
    elif sizes is not None:
        attrs["sizes"] = tuple(shape[:2]) + tuple(int(s) for s in sizes)
    elif scales is not None:
        attrs["sizes"] = tuple(shape[:2]) + tuple(int(d * float(s)) for d, s in
                                                  zip(shape[2:], scales * n if len(scales) == 1 else scales))
    else:
        raise PegasusError(f"{node.describe()}: neither an output size nor a scale factor")
    ctx.emit("Resize", [x], attrs, node=node)


@converter("aten::_upsample_bilinear2d_aa", "aten::_upsample_bicubic2d_aa", "aten::_upsample_lanczos2d_aa")
def antialiased(ctx: TorchContext, node: SourceNode) -> None:
    """Anti-aliased resizing (interpolate(..., antialias=True)): refused when a model uses it; registered so that
    a scripted interpolate, whose code holds every mode in branches the shapes do not select, imports."""
    raise PegasusError(f"{node.describe()}: anti-aliased resizing is not supported")


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}
_NAMED_MODES = {"reflection": "reflect", "replication": "replicate", "circular": "circular"}


@converter("aten::pad", "aten::constant_pad_nd", "aten::reflection_pad1d", "aten::reflection_pad2d",
           "aten::reflection_pad3d", "aten::replication_pad1d", "aten::replication_pad2d",
           "aten::replication_pad3d", "aten::circular_pad1d", "aten::circular_pad2d", "aten::_pad_circular")
def pad(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    given = [int(p) for p in args.get("pad", args.get("padding"))]
    name = node.op_type.split("::")[1]
    mode = args.get("mode") or next((m for k, m in _NAMED_MODES.items() if k in name), "constant")
    if mode not in _PAD_MODES:
        raise PegasusError(f"{node.describe()}: pad mode '{mode}' is not supported")
    rank = ctx.rank(x)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(given) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = given[2 * i], given[2 * i + 1]
    value = args.get("value")
    attrs = {"pads": tuple(begins + ends), "mode": _PAD_MODES[mode],
             "constant_value": float(value) if value is not None else 0.0}
    ctx.emit("Pad", [x], attrs, node=node)


@converter("aten::pixel_shuffle")
def pixel_shuffle(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    if ctx.rank(x) != 4:
        raise PegasusError(f"{node.describe()}: pixel_shuffle of a {ctx.rank(x)}-D tensor (4-D only)")
    ctx.emit("DepthToSpace", [x], {"blocksize": int(args["upscale_factor"]), "mode": "CRD"}, node=node)


@converter("aten::pixel_unshuffle")
def pixel_unshuffle(ctx: TorchContext, node: SourceNode) -> None:
    """(N, C, H r, W r) -> (N, C r r, H, W), output channel c r r + i r + j (not SpaceToDepth's order): a Reshape
    to (N, C, H, r, W, r), a Transpose to (N, C, r, r, H, W), a Reshape."""
    args = ctx.args(node)
    x, r = args["self"], int(args["downscale_factor"])
    if ctx.rank(x) != 4:
        raise PegasusError(f"{node.describe()}: pixel_unshuffle of a rank-{ctx.rank(x)} tensor is not supported")
    n, c, h, w = ctx.shape(x)
    blocks = ctx.emit("Reshape", [x], {"shape": (n, c, h // r, r, w // r, r)}, node=node, suffix="/blocks")[0]
    moved = ctx.emit("Transpose", [blocks], {"perm": (0, 1, 3, 5, 2, 4)}, node=node, suffix="/transpose")[0]
    ctx.emit("Reshape", [moved], {"shape": (n, c * r * r, h // r, w // r)}, node=node)
