"""ONNX converters for QuantizeLinear and DequantizeLinear (pegasus/ops/quantize_linear.py).

Scale and zero point stay inputs. ``axis`` is normalised to be non-negative (0 for a 1-D input);
ONNX element-type numbers (``output_dtype``, ``precision``) become DType names; ``saturate`` only
concerns float8 outputs, which pegasus does not support, so it is dropped.
"""

from __future__ import annotations

from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter
from pegasus.ir.dtypes import DType


def _dtype_name(node: OnnxNode, key: str) -> str | None:
    elem_type = node.attrs.get(key, 0)
    if not elem_type:  # 0 = UNDEFINED: not given
        return None
    try:
        return DType.from_onnx(elem_type).value
    except TypeError as exc:
        raise PegasusError(f"{node.op_type} node '{node.name}': {key} {exc}") from exc


def _attrs(ctx: OnnxContext, node: OnnxNode, *keys: str) -> dict[str, Any]:
    rank = ctx.type_of(node.inputs[0]).rank
    axis = node.attrs.get("axis", 1)
    if rank == 1:  # ONNX: the axis does not matter for a 1-D input (its default 1 would be out of range)
        axis = 0
    elif -rank <= axis < rank:
        axis %= rank
    attrs: dict[str, Any] = {"axis": axis, "block_size": node.attrs.get("block_size", 0)}
    attrs.update({key: _dtype_name(node, key) for key in keys})
    return attrs


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx: OnnxContext, node: OnnxNode) -> None:
    ctx.emit("QuantizeLinear", node.inputs, _attrs(ctx, node, "output_dtype", "precision"), node=node)


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx: OnnxContext, node: OnnxNode) -> None:
    ctx.emit("DequantizeLinear", node.inputs, _attrs(ctx, node, "output_dtype"), node=node)
