"""TFLite converters for the normalizing ops: SOFTMAX (with ``beta``: softmax(beta * x)), LOG_SOFTMAX,
both over the last axis, and L2_NORMALIZATION (x / max(||x||, 1e-6) over the last axis, TFLite's
reference formula, with its fused activation)."""

from __future__ import annotations

import numpy as np

from pegasus.importers.common.channels_last import emit_activated
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

L2_EPSILON = 1e-6   # tflite/kernels/internal/reference/l2normalization.h


@converter("SOFTMAX")
def softmax(ctx: TfliteContext, node: SourceNode) -> None:
    x, beta = node.inputs[0], float(node.attrs.get("beta", 1.0))
    if beta != 1.0:
        scale = ctx.add_constant(f"{node.name}/beta", np.array(beta, np.float32))
        x = ctx.emit("Mul", [x, scale], node=node, suffix="/beta")[0]
    ctx.emit("Softmax", [x], {"axis": -1}, node=node)


@converter("LOG_SOFTMAX")
def log_softmax(ctx: TfliteContext, node: SourceNode) -> None:
    ctx.emit("LogSoftmax", [node.inputs[0]], {"axis": -1}, node=node)


@converter("L2_NORMALIZATION")
def l2_normalization(ctx: TfliteContext, node: SourceNode) -> None:
    x = node.inputs[0]
    norm = ctx.emit("ReduceL2", [x], {"axes": (-1,), "keepdims": True}, node=node, suffix="/norm")[0]
    epsilon = ctx.add_constant(f"{node.name}/epsilon", np.array(L2_EPSILON, np.float32))
    floor = ctx.emit("Max", [norm, epsilon], node=node, suffix="/at_least_epsilon")[0]
    emit_activated(ctx, node, "Div", [x, floor], {}, ctx.activation(node))
