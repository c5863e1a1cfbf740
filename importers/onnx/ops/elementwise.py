"""ONNX converters for the unary element-wise ops (pegasus/ops/elementwise.py).

Almost all map 1:1 (``direct``). Clip's bounds were attributes up to opset 6 and are inputs from
opset 11; both become the IR's ``min``/``max`` attributes. Cast's ONNX element-type number becomes a
DType name; CastLike is a Cast to the second input's dtype.
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter, direct
from pegasus.ir.dtypes import DType

direct("Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Celu",
       "ThresholdedRelu", "Shrink", "Softplus", "Softsign", "Mish", "Swish", "Gelu", "Erf", "Exp", "Log",
       "Sqrt", "Reciprocal", "Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Not", "Sin", "Cos", "Tan",
       "Atan", "IsNaN", "IsInf")


@converter("Clip", since=6)
def clip_attributes(ctx: OnnxContext, node: OnnxNode) -> None:
    """Clip-6 (opsets 6..10): bounds are the ``min``/``max`` attributes (absent = unbounded)."""
    attrs = {key: node.attrs[key] for key in ("min", "max") if key in node.attrs}
    ctx.emit("Clip", [node.inputs[0]], attrs, node=node)


@converter("Clip", since=11)
def clip_inputs(ctx: OnnxContext, node: OnnxNode) -> None:
    """Clip-11+: bounds are optional inputs 1 and 2, needed at compile time."""
    attrs = {}
    for index, key in ((1, "min"), (2, "max")):
        value = ctx.constant(node, index, f"Clip {key}")
        if value is not None:
            attrs[key] = value.reshape(()).item()
    ctx.emit("Clip", [node.inputs[0]], attrs, node=node)


def _emit_cast(ctx: OnnxContext, node: OnnxNode, to: DType) -> None:
    # saturate/round_mode only apply to float8 targets, which have no DType and fail before here.
    ctx.emit("Cast", [node.inputs[0]], {"to": to.value}, node=node)


@converter("Cast", since=6)
def cast(ctx: OnnxContext, node: OnnxNode) -> None:
    """Cast: ``to`` is an ONNX element type number."""
    try:
        dtype = DType.from_onnx(node.attrs["to"])
    except TypeError as exc:
        raise PegasusError(f"Cast node '{node.name}': cannot cast to that type ({exc})") from exc
    _emit_cast(ctx, node, dtype)


@converter("CastLike", since=15)
def cast_like(ctx: OnnxContext, node: OnnxNode) -> None:
    """CastLike(x, target): Cast x to the target tensor's dtype."""
    _emit_cast(ctx, node, ctx.type_of(node.inputs[1]).dtype)
