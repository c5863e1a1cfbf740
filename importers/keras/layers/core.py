"""Keras converters for the core layers: Dense, the activation layers (Activation, ReLU, LeakyReLU, PReLU,
ELU, ThresholdedReLU, Softmax), Embedding, the layers inference leaves out (Dropout, SpatialDropout*,
GaussianNoise, GaussianDropout, AlphaDropout, ActivityRegularization, Identity), and Lambda.

Dense maps over the last axis of any rank: a Gemm on (N, K) inputs, else MatMul then Add of the bias. The
activation layers take their registry form from the version's activation table (context.py), so
``Activation('relu6')`` and ``Conv2D(activation='relu6')`` are the same layer.

A Lambda holds Python code: it is refused unless ``--allow-unsafe`` (loader.py), and even then its code is
never run: only a Lambda whose function Keras 3 saved by name and that names a Keras activation (``relu``,
``sigmoid``...) converts, as Keras itself resolves that name without custom objects.
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode

#: layers that compute nothing at inference
PASS_THROUGH = ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
                "GaussianDropout", "AlphaDropout", "ActivityRegularization", "Identity")


@converter(*PASS_THROUGH)
def pass_through(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=node.outputs[:1])


@converter("Dense")
def dense(ctx: KerasContext, node: KerasNode) -> None:
    cfg = node.attrs
    if cfg.get("lora_rank"):
        raise PegasusError(f"{node.describe()}: LoRA-adapted Dense layers are not supported")
    w = ctx.weights(node, ["kernel", "bias"] if cfg.get("use_bias", True) else ["kernel"])
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    if w["kernel"].ndim != 2 or shape[-1] != w["kernel"].shape[0]:
        raise PegasusError(f"{node.describe()}: kernel {list(w['kernel'].shape)} does not fit input {list(shape)}")
    kernel = ctx.param(node, "kernel", w["kernel"])
    bias = [ctx.param(node, "bias", w["bias"])] if "bias" in w else []
    if len(shape) == 2:
        ctx.activated(node, "Gemm", [x, kernel, *bias])
    elif bias:
        product = ctx.emit("MatMul", [x, kernel], node=node, suffix="/matmul")[0]
        ctx.activated(node, "Add", [product, bias[0]])
    else:
        ctx.activated(node, "MatMul", [x, kernel])


@converter("Activation")
def activation(ctx: KerasContext, node: KerasNode) -> None:
    ctx.apply_activation(node, node.inputs[0], ctx.activation_name(node), output=node.outputs[0])


@converter("ReLU")
def relu(ctx: KerasContext, node: KerasNode) -> None:
    """x for threshold <= x < max_value, max_value above, negative_slope * (x - threshold) below."""
    cfg, x = node.attrs, node.inputs[0]
    top = cfg.get("max_value")
    slope = float(cfg.get("negative_slope", 0.0) or 0.0)
    threshold = float(cfg.get("threshold", 0.0) or 0.0)
    clip = {"max": float(top)} if top is not None else {}
    if threshold == 0.0 and slope == 0.0:
        op, attrs = ("Clip", {"min": 0.0, **clip}) if clip else ("Relu", {})
        ctx.emit(op, [x], attrs, node=node, outputs=node.outputs[:1])
        return
    if threshold == 0.0:
        y = ctx.emit("LeakyRelu", [x], {"alpha": slope}, node=node, outputs=None if clip else node.outputs[:1],
                     suffix="/leaky" if clip else "")[0]
    else:
        t = ctx.scalar(node, "threshold", threshold)
        above = ctx.emit("GreaterOrEqual", [x, t], node=node, suffix="/above")[0]
        below = ctx.emit("Mul", [ctx.emit("Sub", [x, t], node=node, suffix="/shifted")[0],
                                 ctx.scalar(node, "negative_slope", slope)], node=node, suffix="/below")[0]
        y = ctx.emit("Where", [above, x, below], node=node, outputs=None if clip else node.outputs[:1],
                     suffix="/select" if clip else "")[0]
    if clip:
        ctx.emit("Clip", [y], clip, node=node, outputs=node.outputs[:1])


@converter("LeakyReLU")
def leaky_relu(ctx: KerasContext, node: KerasNode) -> None:
    cfg = node.attrs
    slope = cfg.get("negative_slope", cfg.get("alpha", 0.3))   # Keras 3 / Keras 2 spelling
    ctx.emit("LeakyRelu", [node.inputs[0]], {"alpha": float(slope)}, node=node, outputs=node.outputs[:1])


@converter("ELU")
def elu(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("Elu", [node.inputs[0]], {"alpha": float(node.attrs.get("alpha", 1.0))}, node=node,
             outputs=node.outputs[:1])


@converter("ThresholdedReLU")
def thresholded_relu(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("ThresholdedRelu", [node.inputs[0]], {"alpha": float(node.attrs.get("theta", 1.0))}, node=node,
             outputs=node.outputs[:1])


@converter("PReLU")
def prelu(ctx: KerasContext, node: KerasNode) -> None:
    """alpha has the input's shape without the batch axis, 1 along ``shared_axes``: it broadcasts to x."""
    alpha = ctx.weights(node, ["alpha"])["alpha"]
    ctx.emit("PRelu", [node.inputs[0], ctx.param(node, "alpha", alpha)], node=node, outputs=node.outputs[:1])


@converter("Softmax")
def softmax(ctx: KerasContext, node: KerasNode) -> None:
    axis = node.attrs.get("axis", -1)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise PegasusError(f"{node.describe()}: softmax over several axes {list(axis)} is not supported")
        axis = axis[0]
    ctx.emit("Softmax", [node.inputs[0]], {"axis": int(axis)}, node=node, outputs=node.outputs[:1])


@converter("Embedding")
def embedding(ctx: KerasContext, node: KerasNode) -> None:
    """A Gather of rows of the (vocabulary, dimension) table; float indices are cast to integers as Keras
    does (truncated)."""
    if node.attrs.get("mask_zero"):
        raise PegasusError(f"{node.describe()}: mask_zero=True (masking the layers after it) is not supported")
    table = ctx.weights(node, ["embeddings"])["embeddings"]
    x = node.inputs[0]
    if not ctx.type_of(x).dtype.is_integer:
        x = ctx.emit("Cast", [x], {"to": "int64"}, node=node, suffix="/indices")[0]
    ctx.emit("Gather", [ctx.param(node, "embeddings", table), x], {"axis": 0}, node=node, outputs=node.outputs[:1])


@converter("Lambda")
def lambda_layer(ctx: KerasContext, node: KerasNode) -> None:
    function = node.attrs.get("function")
    named = isinstance(function, dict) and function.get("class_name") == "function" and \
        isinstance(function.get("config"), str)
    if not named:
        raise PegasusError(f"{node.describe()}: the Lambda holds Python bytecode, which pegasus never runs and "
                           "cannot translate (only a Lambda of a Keras activation saved by name maps onto registry "
                           "ops)")
    name = str(function["config"]).lower()
    if name not in ctx.activations or node.attrs.get("arguments"):
        raise PegasusError(f"{node.describe()}: the Lambda calls '{function['config']}'"
                           f"{' with arguments' if node.attrs.get('arguments') else ''}, which is not a Keras "
                           "activation pegasus can map (the function is never run)")
    ctx.apply_activation(node, node.inputs[0], None if ctx.activations[name] is None else name,
                         output=node.outputs[0])

