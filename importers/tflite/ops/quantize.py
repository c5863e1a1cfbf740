"""TFLite converters for the ops that change how values are stored: DEQUANTIZE, QUANTIZE and DENSIFY.

In a float model these stand at the edges of storage formats: a float16-weight model feeds each float16
constant through DEQUANTIZE (a Cast, folded at import, so the graph holds float32 weights); a sparse
weight goes through DENSIFY (the loader has already densified the constant, sparsity.py, so it is an
identity that folds); QUANTIZE/DEQUANTIZE of activations (an int8 input or output at a float model's
edge) are the registry's QuantizeLinear/DequantizeLinear with the tensor's own scale and zero point.
Models that compute on integer activations are the pre-quantized path's, refused by the loader.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter


def _params(ctx: TfliteContext, node: SourceNode, name: str) -> tuple[list[str], dict]:
    """[scale, zero point] constants of quantized tensor ``name`` and the axis attribute."""
    tensor = ctx.tensors[name]
    if not tensor.quantized:
        raise PegasusError(f"{node.describe()}: tensor '{name}' ({tensor.dtype}) has no scale")
    per_axis = tensor.scale.size > 1
    scale = tensor.scale.astype(np.float32) if per_axis else tensor.scale.astype(np.float32).reshape(())
    zero = tensor.zero_point.astype(tensor.dtype)
    zero = zero if per_axis else zero.reshape(())
    inputs = [ctx.add_constant(f"{node.name}/scale", scale), ctx.add_constant(f"{node.name}/zero_point", zero)]
    return inputs, {"axis": tensor.axis}


@converter("DEQUANTIZE")
def dequantize(ctx: TfliteContext, node: SourceNode) -> None:
    """float16 -> float32 is a Cast; int8/uint8/int16 -> float is (q - zero_point) * scale."""
    x = node.inputs[0]
    if ctx.type_of(x).dtype.is_float:
        ctx.emit("Cast", [x], {"to": "float32"}, node=node)
        return
    params, attrs = _params(ctx, node, x)
    ctx.emit("DequantizeLinear", [x, *params], attrs, node=node)


@converter("QUANTIZE")
def quantize(ctx: TfliteContext, node: SourceNode) -> None:
    """float -> int8/uint8/int16: round(x / scale) + zero_point, saturated."""
    x, y = node.inputs[0], node.outputs[0]
    if not ctx.type_of(x).dtype.is_float:
        raise PegasusError(f"{node.describe()}: requantizes {ctx.type_of(x).dtype.value} tensor '{x}'; that "
                           "belongs to a pre-quantized model")
    params, attrs = _params(ctx, node, y)
    ctx.emit("QuantizeLinear", [x, *params], attrs, node=node)


@converter("DENSIFY")
def densify(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("Identity", [node.inputs[0]], node=node)
