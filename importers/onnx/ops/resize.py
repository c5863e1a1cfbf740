"""ONNX converters for Resize (opsets 10..19) and Upsample (7, 9), all onto the registry's Resize.

Scales/sizes/roi are read at compile time and turned into explicit output sizes + scales by
``resize_plan``. Resize-10 and Upsample have no coordinate attributes: they map output index y to
y / scale ("asymmetric"), and nearest picks floor(x) when enlarging (what onnxruntime does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.onnx.ops.shape_ops import ints
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter
from pegasus.ops.resize import resize_plan

# ONNX attributes copied as they are (with their ONNX defaults applied by the registry op)
_COPIED = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "extrapolation_value")
_FLAGS = ("exclude_outside", "antialias")


#: the largest resize factor taken (ONNX asks only for scales > 0): 2^20 on one axis is far past any real model
MAX_SCALE = 2.0**20


def _floats(ctx: OnnxContext, node: OnnxNode, index: int, what: str) -> list[float] | None:
    """A float input known at compile time; None when omitted or empty (opset 11 passes empty scales)."""
    value = ctx.constant(node, index, what)
    if value is None or np.asarray(value).size == 0:
        return None
    values = [float(v) for v in np.asarray(value).reshape(-1)]
    if not all(np.isfinite(values)) or what == "scales" and not all(0 < v <= MAX_SCALE for v in values):
        raise PegasusError(f"{node.describe()}: {what} must be finite numbers{' in (0, 2^20]' * (what == 'scales')}, "
                           f"not {values}")
    return values


def _emit(ctx: OnnxContext, node: OnnxNode, attrs: dict[str, Any], x: str = "", suffix: str = "",
          **plan: Any) -> list[str]:
    """Emit one Resize of ``x`` (the node's input by default) with sizes/scales/roi from ``plan``."""
    x = x or node.inputs[0]
    sizes, scales, roi = resize_plan(ctx.type_of(x).shape, **plan)
    attrs = dict(attrs, sizes=sizes, scales=scales)
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        attrs["roi"] = roi
    return ctx.emit("Resize", [x], attrs, node=node, suffix=suffix)


def _legacy(ctx: OnnxContext, node: OnnxNode, scales: list[float]) -> None:
    """Resize-10 / Upsample: asymmetric coordinates; nearest takes floor(x) on the axes it enlarges and
    ceil(x) on those it shrinks (onnxruntime's rule). Mixed scales become two Resize ops, one per rule:
    nearest sampling is separable, so this is exact."""
    mode = {"bilinear": "linear"}.get(node.attrs.get("mode", "nearest"), node.attrs.get("mode", "nearest"))
    if mode not in ("nearest", "linear"):
        raise PegasusError(f"{node.op_type} node '{node.name}': mode '{mode}' is not supported")
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "linear" or min(scales) >= 1 or max(scales) <= 1:
        _emit(ctx, node, dict(attrs, nearest_mode="ceil" if min(scales) < 1 else "floor"), scales=scales)
        return
    enlarged = _emit(ctx, node, dict(attrs, nearest_mode="floor"), suffix="_enlarge",
                     scales=[max(s, 1.0) for s in scales])
    _emit(ctx, node, dict(attrs, nearest_mode="ceil"), x=enlarged[0], scales=[min(s, 1.0) for s in scales])


@converter("Upsample", since=7)
def upsample_v7(ctx: OnnxContext, node: OnnxNode) -> None:
    """Upsample-7: scales is an attribute."""
    _legacy(ctx, node, [float(s) for s in node.attrs["scales"]])


@converter("Upsample", since=9)
def upsample_v9(ctx: OnnxContext, node: OnnxNode) -> None:
    """Upsample-9: scales is input 1."""
    _legacy(ctx, node, _floats(ctx, node, 1, "scales"))


@converter("Resize", since=10)
def resize_v10(ctx: OnnxContext, node: OnnxNode) -> None:
    """Resize-10: inputs X, scales; only a ``mode`` attribute (Upsample semantics)."""
    _legacy(ctx, node, _floats(ctx, node, 1, "scales"))


@converter("Resize", since=11)
def resize_v11(ctx: OnnxContext, node: OnnxNode) -> None:
    """Resize-11..19: inputs X, roi, scales, sizes; opset 18 adds axes, antialias, keep_aspect_ratio_policy."""
    attrs = {key: node.attrs[key] for key in _COPIED if key in node.attrs}
    attrs.update({key: bool(node.attrs[key]) for key in _FLAGS if key in node.attrs})
    crop = attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    roi = _floats(ctx, node, 1, "roi") if crop else None
    sizes = ints(ctx, node, 3, "output sizes")
    scales = None if sizes else _floats(ctx, node, 2, "scales")
    _emit(ctx, node, attrs, scales=scales, sizes=sizes, roi=roi or (), axes=node.attrs.get("axes", ()),
          keep_aspect_ratio_policy=node.attrs.get("keep_aspect_ratio_policy", "stretch"))
