"""ONNX converters for the operator-form quantized ops (onnxruntime's ``QuantFormat.QOperator``, older
quantization tools): QLinearConv and QLinearMatMul (opset 10) and onnxruntime's com.microsoft QLinearAdd,
QLinearMul, QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat and
QGemm.

Each becomes the QDQ form of the same computation: every quantized input goes through a DequantizeLinear with
its scale and zero point, the float registry op runs, and a QuantizeLinear with the output's scale and zero point
makes the node's integer output. An int32 bias (QLinearConv's B, QGemm's C) is dequantized at the product of
the input and weight scales with zero point 0, as the ops define it. The float graph is what the integer one
computes up to float rounding (onnxruntime accumulates in int32 and rounds once: a value on a rounding tie may
land one step apart).
"""

from __future__ import annotations

from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter


def _dequantize(ctx: OnnxContext, node: OnnxNode, index: int, axis: int = 1, label: str = "") -> str:
    """Input ``index`` (with its scale and zero point at index + 1, + 2) as a float tensor."""
    x, scale, zero_point = node.input(index), node.input(index + 1), node.input(index + 2)
    if ctx.type_of(scale).size == 1:
        axis = 1 if ctx.type_of(x).rank > 1 else 0
    axis %= max(ctx.type_of(x).rank, 1)
    inputs = [x, scale] + ([zero_point] if zero_point else [])
    return ctx.emit("DequantizeLinear", inputs, {"axis": axis}, node=node, suffix=f"/dequantize_{label or index}")[0]


def _bias(ctx: OnnxContext, node: OnnxNode, index: int, x_scale: str, w_scale: str) -> str:
    """An int32 bias at scale x_scale * w_scale (per output channel when the weights are), zero point 0."""
    scale = ctx.emit("Mul", [x_scale, w_scale], node=node, suffix="/bias_scale")[0]
    if ctx.type_of(scale).size == 1 and ctx.type_of(scale).rank > 0:
        scale = ctx.emit("Reshape", [scale], {"shape": ()}, node=node, suffix="/bias_scale_scalar")[0]
    return ctx.emit("DequantizeLinear", [node.input(index), scale], {"axis": 0}, node=node,
                    suffix="/dequantize_bias")[0]


def _quantize(ctx: OnnxContext, node: OnnxNode, y: str, scale_index: int) -> None:
    """The float result ``y`` onto the output's grid (scale and zero point at scale_index, + 1): the node's output."""
    scale, zero_point = node.input(scale_index), node.input(scale_index + 1)
    if ctx.type_of(scale).size != 1:
        raise PegasusError(f"{node.describe()}: a per-channel output scale is not supported")
    inputs = [y, scale] + ([zero_point] if zero_point else [])
    ctx.emit("QuantizeLinear", inputs, {"axis": 0 if ctx.type_of(y).rank < 2 else 1}, node=node,
             outputs=node.outputs[:1])


def _float_attrs(node: OnnxNode, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in node.attrs.items() if k not in drop}


@converter("QLinearConv", since=10)
def qlinear_conv(ctx: OnnxContext, node: OnnxNode) -> None:
    """QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B): Conv's attributes."""
    x = _dequantize(ctx, node, 0, label="x")
    w = _dequantize(ctx, node, 3, axis=0, label="w")
    inputs = [x, w] + ([_bias(ctx, node, 8, node.input(1), node.input(4))] if node.input(8) else [])
    y = ctx.emit("Conv", inputs, _float_attrs(node), node=node, suffix="/float")[0]
    _quantize(ctx, node, y, 6)


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx: OnnxContext, node: OnnxNode) -> None:
    """QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp); b may be per column (its last axis)."""
    a = _dequantize(ctx, node, 0, label="a")
    b = _dequantize(ctx, node, 3, axis=-1, label="b")
    _quantize(ctx, node, ctx.emit("MatMul", [a, b], node=node, suffix="/float")[0], 6)


@converter("QGemm", since=1, domain="com.microsoft")
def qgemm(ctx: OnnxContext, node: OnnxNode) -> None:
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp): Gemm's attributes, C int32 at
    a_scale * b_scale; without y_scale the output stays float."""
    if node.input(6) and float(node.attrs.get("alpha", 1.0)) != 1.0:
        raise PegasusError(f"{node.describe()}: alpha other than 1 with a bias C is not supported")
    a = _dequantize(ctx, node, 0, label="a")
    b = _dequantize(ctx, node, 3, axis=0 if node.attrs.get("transB", 0) else 1, label="b")
    inputs = [a, b] + ([_bias(ctx, node, 6, node.input(1), node.input(4))] if node.input(6) else [])
    if not node.input(7):
        ctx.emit("Gemm", inputs, _float_attrs(node), node=node, outputs=node.outputs[:1])
        return
    _quantize(ctx, node, ctx.emit("Gemm", inputs, _float_attrs(node), node=node, suffix="/float")[0], 7)


def _binary(op: str):
    def convert(ctx: OnnxContext, node: OnnxNode) -> None:
        """(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
        a, b = _dequantize(ctx, node, 0, label="a"), _dequantize(ctx, node, 3, label="b")
        _quantize(ctx, node, ctx.emit(op, [a, b], node=node, suffix="/float")[0], 6)
    return convert


def _unary(op: str, drop: tuple[str, ...] = ()):
    def convert(ctx: OnnxContext, node: OnnxNode) -> None:
        """(X, X_scale, X_zp, Y_scale, Y_zp) and the float op's attributes."""
        if node.attrs.get("channels_last", 0):
            raise PegasusError(f"{node.describe()}: channels_last=1 is not supported")
        x = _dequantize(ctx, node, 0, label="x")
        y = ctx.emit(op, [x], _float_attrs(node, ("channels_last",) + drop), node=node, suffix="/float")[0]
        _quantize(ctx, node, y, 3)
    return convert


for _name, _op in (("QLinearAdd", "Add"), ("QLinearMul", "Mul")):
    converter(_name, since=1, domain="com.microsoft")(_binary(_op))
for _name, _op in (("QLinearGlobalAveragePool", "GlobalAveragePool"), ("QLinearAveragePool", "AveragePool"),
                   ("QLinearSigmoid", "Sigmoid"), ("QLinearLeakyRelu", "LeakyRelu")):
    converter(_name, since=1, domain="com.microsoft")(_unary(_op))


@converter("QLinearConcat", since=1, domain="com.microsoft")
def qlinear_concat(ctx: OnnxContext, node: OnnxNode) -> None:
    """QLinearConcat(Y_scale, Y_zp, x0, x0_scale, x0_zp, x1, ...): Concat's ``axis``."""
    parts = [_dequantize(ctx, node, i, label=str(k)) for k, i in enumerate(range(2, len(node.inputs), 3))]
    _quantize(ctx, node, ctx.emit("Concat", parts, _float_attrs(node), node=node, suffix="/float")[0], 0)
