"""Caffe converters for the element-wise layers: ReLU (with negative_slope), ReLU6, Clip, PReLU, ELU, Sigmoid,
TanH, AbsVal, BNLL, Power, Exp, Log and Dropout (the identity at inference).

Power, Exp and Log carry an affine map of their input: Power is (shift + scale * x) ^ power; Exp is
base ^ (shift + scale * x), i.e. exp(ln(base) * (shift + scale * x)) (base -1 means e); Log is
log_base(shift + scale * x) = ln(shift + scale * x) / ln(base). Each becomes the short chain of registry
ops it spells, skipping the steps that are identities.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.caffe.context import BlobSpec, CaffeContext, converter, param
from pegasus.importers.caffe.layers.common import along, emit_chain
from pegasus.importers.common.converters import SourceNode

#: layer type -> registry op with no attributes
_SIMPLE = {"Sigmoid": "Sigmoid", "TanH": "Tanh", "AbsVal": "Abs", "BNLL": "Softplus", "Dropout": "Identity"}


def _simple(ctx: CaffeContext, node: SourceNode) -> None:
    ctx.emit(_SIMPLE[node.op_type], [node.inputs[0]], node=node)


for _layer_type in _SIMPLE:
    converter(_layer_type)(_simple)


@converter("ReLU")
def relu(ctx: CaffeContext, node: SourceNode) -> None:
    slope = float(param(node, "relu_param").negative_slope)
    if slope:
        ctx.emit("LeakyRelu", [node.inputs[0]], {"alpha": slope}, node=node)
    else:
        ctx.emit("Relu", [node.inputs[0]], node=node)


@converter("ReLU6")
def relu6(ctx: CaffeContext, node: SourceNode) -> None:
    ctx.emit("Clip", [node.inputs[0]], {"min": 0.0, "max": 6.0}, node=node)


@converter("Clip")
def clip(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "clip_param")
    if not (p.HasField("min") and p.HasField("max")):
        raise PegasusError(f"{node.describe()}: clip_param needs min and max")
    ctx.emit("Clip", [node.inputs[0]], {"min": float(p.min), "max": float(p.max)}, node=node)


@converter("ELU")
def elu(ctx: CaffeContext, node: SourceNode) -> None:
    ctx.emit("Elu", [node.inputs[0]], {"alpha": float(param(node, "elu_param").alpha)}, node=node)


@converter("PReLU")
def prelu(ctx: CaffeContext, node: SourceNode) -> None:
    """One slope per channel (axis 1), or one for all with channel_shared."""
    shape = ctx.type_of(node.inputs[0]).shape
    if len(shape) < 2:
        raise PegasusError(f"{node.describe()}: needs an (N, C, ...) input, got {list(shape)}")
    shared = param(node, "prelu_param").channel_shared
    slope = ctx.blobs(node, [BlobSpec("slope", (1,) if shared else (shape[1],), "slope")])[0]
    slope = slope.reshape(()) if shared else along(slope, 1, len(shape))
    ctx.emit("PRelu", [node.inputs[0], ctx.add_constant(f"{node.name}/slope", slope)], node=node)


def _affine(scale: float, shift: float) -> list:
    steps = []
    if scale != 1:
        steps.append(("Mul", np.float32(scale), {}))
    if shift != 0:
        steps.append(("Add", np.float32(shift), {}))
    return steps


@converter("Power")
def power(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "power_param")
    steps = _affine(p.scale, p.shift)
    if p.power != 1:
        steps.append(("Pow", np.float32(p.power), {}))
    emit_chain(ctx, node, node.inputs[0], steps)


def _log_base(node: SourceNode, base: float) -> float:
    if base == -1:
        return 1.0
    if base <= 0 or base == 1:
        raise PegasusError(f"{node.describe()}: base must be positive and not 1 (or -1 for e), got {base}")
    return math.log(base)


@converter("Exp")
def exp(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "exp_param")
    ln_base = _log_base(node, p.base)
    emit_chain(ctx, node, node.inputs[0], _affine(p.scale * ln_base, p.shift * ln_base) + [("Exp", None, {})])


@converter("Log")
def log(ctx: CaffeContext, node: SourceNode) -> None:
    p = param(node, "log_param")
    ln_base = _log_base(node, p.base)
    steps = _affine(p.scale, p.shift) + [("Log", None, {})]
    if ln_base != 1:
        steps.append(("Mul", np.float32(1.0 / ln_base), {}))
    emit_chain(ctx, node, node.inputs[0], steps)
