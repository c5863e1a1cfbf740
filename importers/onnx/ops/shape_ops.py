"""ONNX converters for the data-movement family (Reshape, Slice, Pad, Split, Gather, Shape...).

ONNX passes many of these ops' parameters as tensors (and moved them from attributes to inputs
over the opsets); they become attributes of the registry op here, read with ``ctx.constant`` and
resolved to the canonical explicit form by the rules in ``pegasus.ops.shape_ops``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter, direct
from pegasus.ir.dtypes import DType
from pegasus.ops.common import normalize_axes
from pegasus.ops.shape_ops import resolve_reshape, resolve_slice, resolve_squeeze_axes, resolve_unsqueeze_axes

direct("Flatten", "Transpose", "Concat", "DepthToSpace", "SpaceToDepth", "Gather", "Shape", "Size")


def ints(ctx: OnnxContext, node: OnnxNode, index: int, what: str) -> list[int] | None:
    """Input ``index`` as a list of ints known at compile time; None when the input is omitted."""
    value = ctx.constant(node, index, what)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def scalar(ctx: OnnxContext, node: OnnxNode, index: int, what: str) -> Any:
    """Input ``index`` as a Python scalar known at compile time, or None when omitted."""
    value = ctx.constant(node, index, what)
    return None if value is None else np.asarray(value).reshape(-1)[0].item()


def _shape(ctx: OnnxContext, node: OnnxNode) -> tuple[int, ...]:
    return ctx.type_of(node.inputs[0]).shape


# ---- Reshape and friends ---------------------------------------------------------------------------
@converter("Reshape", since=5)
def reshape(ctx: OnnxContext, node: OnnxNode) -> None:
    """Reshape-5+ (opset 7 is the oldest we import): the target shape is input 1; allowzero
    (opset 14) keeps 0 as a real size instead of copying the input's dimension."""
    target = ints(ctx, node, 1, "target shape")
    shape = resolve_reshape(_shape(ctx, node), target, bool(node.attrs.get("allowzero", 0)))
    ctx.emit("Reshape", [node.inputs[0]], {"shape": shape}, node=node)


def _squeeze(ctx: OnnxContext, node: OnnxNode, axes: list[int] | None) -> None:
    axes = resolve_squeeze_axes(_shape(ctx, node), axes or [])
    ctx.emit("Squeeze", [node.inputs[0]], {"axes": axes}, node=node)


def _unsqueeze(ctx: OnnxContext, node: OnnxNode, axes: list[int]) -> None:
    axes = resolve_unsqueeze_axes(len(_shape(ctx, node)), axes)
    ctx.emit("Unsqueeze", [node.inputs[0]], {"axes": axes}, node=node)


@converter("Squeeze", since=1)
def squeeze_v1(ctx: OnnxContext, node: OnnxNode) -> None:
    _squeeze(ctx, node, node.attrs.get("axes"))


@converter("Squeeze", since=13)
def squeeze_v13(ctx: OnnxContext, node: OnnxNode) -> None:
    _squeeze(ctx, node, ints(ctx, node, 1, "axes"))


@converter("Unsqueeze", since=1)
def unsqueeze_v1(ctx: OnnxContext, node: OnnxNode) -> None:
    _unsqueeze(ctx, node, list(node.attrs["axes"]))


@converter("Unsqueeze", since=13)
def unsqueeze_v13(ctx: OnnxContext, node: OnnxNode) -> None:
    _unsqueeze(ctx, node, ints(ctx, node, 1, "axes"))


# ---- parameters that became inputs ----------------------------------------------------------------
@converter("Expand", since=8)
def expand(ctx: OnnxContext, node: OnnxNode) -> None:
    ctx.emit("Expand", [node.inputs[0]], {"shape": ints(ctx, node, 1, "target shape")}, node=node)


@converter("Tile", since=6)
def tile(ctx: OnnxContext, node: OnnxNode) -> None:
    ctx.emit("Tile", [node.inputs[0]], {"repeats": ints(ctx, node, 1, "repeats")}, node=node)


def _split(ctx: OnnxContext, node: OnnxNode, sizes: list[int] | None, count: int | None = None) -> None:
    """Explicit split sizes; without them, ``count`` (or one per output) chunks of ceil(dim / count)."""
    shape = _shape(ctx, node)
    axis = normalize_axes([node.attrs.get("axis", 0)], len(shape))[0]
    if not sizes:
        count = count or len(node.outputs)
        chunk = -(-shape[axis] // count)
        sizes = [chunk] * (count - 1) + [shape[axis] - chunk * (count - 1)]
        if sizes[-1] < 0 or (ctx.opset < 18 and sizes[-1] != chunk):
            raise PegasusError(f"Split node '{node.name}': dimension {shape[axis]} cannot be split "
                               f"into {count} parts")
    if len(sizes) != len(node.outputs):
        raise PegasusError(f"Split node '{node.name}': {len(sizes)} split sizes for {len(node.outputs)} outputs")
    ctx.emit("Split", [node.inputs[0]], {"split": sizes, "axis": axis}, node=node)


@converter("Split", since=2)
def split_v2(ctx: OnnxContext, node: OnnxNode) -> None:
    """Split-2/11: sizes in the ``split`` attribute, else equal parts, one per output."""
    _split(ctx, node, node.attrs.get("split"))


@converter("Split", since=13)
def split_v13(ctx: OnnxContext, node: OnnxNode) -> None:
    """Split-13: sizes in input 1; Split-18 adds ``num_outputs`` (last chunk may be smaller)."""
    _split(ctx, node, ints(ctx, node, 1, "split sizes"), node.attrs.get("num_outputs"))


def _slice(ctx: OnnxContext, node: OnnxNode, starts: list[int], ends: list[int],
           axes: list[int] | None, steps: list[int] | None) -> None:
    shape = _shape(ctx, node)
    starts, ends, steps = resolve_slice(shape, starts, ends, axes or (), steps or ())
    attrs = {"starts": starts, "ends": ends, "axes": tuple(range(len(shape))), "steps": steps}
    ctx.emit("Slice", [node.inputs[0]], attrs, node=node)


@converter("Slice", since=1)
def slice_v1(ctx: OnnxContext, node: OnnxNode) -> None:
    """Slice-1: starts, ends and axes are attributes."""
    _slice(ctx, node, node.attrs["starts"], node.attrs["ends"], node.attrs.get("axes"), None)


@converter("Slice", since=10)
def slice_v10(ctx: OnnxContext, node: OnnxNode) -> None:
    """Slice-10+: starts, ends, axes and steps are inputs 1..4."""
    _slice(ctx, node, ints(ctx, node, 1, "starts"), ints(ctx, node, 2, "ends"),
           ints(ctx, node, 3, "axes"), ints(ctx, node, 4, "steps"))


def _pad(ctx: OnnxContext, node: OnnxNode, pads: list[int], value: Any, axes: list[int] | None) -> None:
    """Emit Pad with full-rank pads: pads given on ``axes`` are spread over all dimensions."""
    rank = len(_shape(ctx, node))
    axes = normalize_axes(axes, rank) if axes else tuple(range(rank))
    if len(pads) != 2 * len(axes):
        raise PegasusError(f"Pad node '{node.name}': {len(pads)} pads for {len(axes)} axes")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    attrs = {"pads": full, "mode": node.attrs.get("mode", "constant"), "constant_value": value or 0}
    ctx.emit("Pad", [node.inputs[0]], attrs, node=node)


@converter("Pad", since=2)
def pad_v2(ctx: OnnxContext, node: OnnxNode) -> None:
    """Pad-2: pads and value are attributes."""
    _pad(ctx, node, list(node.attrs["pads"]), node.attrs.get("value", 0.0), None)


@converter("Pad", since=11)
def pad_v11(ctx: OnnxContext, node: OnnxNode) -> None:
    """Pad-11+: pads, constant_value and (opset 18) axes are inputs 1..3."""
    _pad(ctx, node, ints(ctx, node, 1, "pads"), scalar(ctx, node, 2, "constant value"),
         ints(ctx, node, 3, "axes"))


# ---- generators: fully known at compile time --------------------------------------------------------
@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx: OnnxContext, node: OnnxNode) -> None:
    value = np.asarray(node.attrs.get("value", np.zeros(1, np.float32)))
    attrs = {"shape": ints(ctx, node, 0, "output shape"), "value": value.reshape(-1)[0].item(),
             "dtype": DType.from_numpy(value.dtype).value}
    ctx.emit("ConstantOfShape", [], attrs, node=node)


@converter("Range", since=11)
def range_(ctx: OnnxContext, node: OnnxNode) -> None:
    dtype = DType.from_numpy(ctx.constant(node, 0, "start").dtype).value
    attrs = {"start": scalar(ctx, node, 0, "start"), "limit": scalar(ctx, node, 1, "limit"),
             "delta": scalar(ctx, node, 2, "delta"), "dtype": dtype}
    ctx.emit("Range", [], attrs, node=node)
