"""Keras converters for BatchNormalization and LayerNormalization.

BatchNormalization at inference is a per-channel affine map y = x * k + (beta - mean * k), k = gamma /
sqrt(var + epsilon), on any ``axis`` (Keras 2 writes it as a list). On the last axis, the channels-last
case, it is emitted as that Mul and Add, which the import pass fold_channel_affine folds into a preceding
channels-last Conv, ConvTranspose or Dense (Gemm); on axis 1 of a channels-first tensor it is the registry's
BatchNormalization, which fold_batchnorm folds into a channels-first Conv; on other axes a Mul and an Add
broadcast along them. LayerNormalization normalizes the trailing axes it names with the registry's
LayerNormalization (Keras 3's rms_scaling is refused).
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode
from pegasus.limits import check_tensor


def axes(node: KerasNode, rank: int, default: int = -1) -> list[int]:
    """The config's ``axis`` (int or list) as sorted non-negative axes of a rank-``rank`` tensor."""
    value = node.attrs.get("axis", default)
    values = value if isinstance(value, (list, tuple)) else [value]
    found = sorted({int(a) % rank for a in values})
    if not found or any(not -rank <= int(a) < rank for a in values):
        raise PegasusError(f"{node.describe()}: axis {value} does not fit a rank-{rank} input")
    return found


def emit_affine(ctx: KerasContext, node: KerasNode, x: str, slope: np.ndarray, offset: np.ndarray,
                on: list[int]) -> str:
    """y = x * slope + offset with slope/offset varying along axes ``on`` of x (the layer writes y)."""
    shape = ctx.type_of(x).shape
    broadcast = [shape[a] if a in on else 1 for a in range(len(shape))]
    if on == [len(shape) - 1]:
        broadcast = broadcast[-1:]
    k = ctx.param(node, "scale", slope.reshape(broadcast))
    scaled = ctx.emit("Mul", [x, k], node=node, suffix="/scale")[0]
    return ctx.emit("Add", [scaled, ctx.param(node, "offset", offset.reshape(broadcast))], node=node,
                    outputs=node.outputs[:1])[0]


@converter("BatchNormalization")
def batch_normalization(ctx: KerasContext, node: KerasNode) -> None:
    cfg, x = node.attrs, node.inputs[0]
    shape = ctx.type_of(x).shape
    on = axes(node, len(shape))
    roles = (["gamma"] if cfg.get("scale", True) else []) + (["beta"] if cfg.get("center", True) else []) + \
        ["moving_mean", "moving_variance"]
    w = {k: v.astype(np.float64) for k, v in ctx.weights(node, roles).items()}
    size = math.prod(shape[a] for a in on)
    if any(v.size != size for v in w.values()):
        raise PegasusError(f"{node.describe()}: parameters of {w['moving_mean'].size} values do not fit axis {on} "
                           f"of {list(shape)}")
    epsilon = float(cfg.get("epsilon", 1e-3))
    gamma, beta = w.get("gamma", np.ones(size)), w.get("beta", np.zeros(size))
    if on == [1] and len(shape) > 2:
        params = [ctx.param(node, name, v.reshape(-1))
                  for name, v in (("gamma", gamma), ("beta", beta), ("moving_mean", w["moving_mean"]),
                                  ("moving_variance", w["moving_variance"]))]
        ctx.emit("BatchNormalization", [x, *params], {"epsilon": epsilon}, node=node, outputs=node.outputs[:1])
        return
    if not np.all(w["moving_variance"] + epsilon > 0):
        raise PegasusError(f"{node.describe()}: moving_variance + epsilon ({epsilon}) is not positive everywhere")
    slope = gamma.reshape(-1) / np.sqrt(w["moving_variance"].reshape(-1) + epsilon)
    emit_affine(ctx, node, x, slope, beta.reshape(-1) - w["moving_mean"].reshape(-1) * slope, on)


@converter("LayerNormalization")
def layer_normalization(ctx: KerasContext, node: KerasNode) -> None:
    cfg, x = node.attrs, node.inputs[0]
    shape = ctx.type_of(x).shape
    on = axes(node, len(shape))
    if on != list(range(on[0], len(shape))):
        raise PegasusError(f"{node.describe()}: normalizing axes {on} of a rank-{len(shape)} input is not supported "
                           "(only trailing axes)")
    if cfg.get("rms_scaling"):
        raise PegasusError(f"{node.describe()}: rms_scaling=True is not supported")
    roles = (["gamma"] if cfg.get("scale", True) else []) + (["beta"] if cfg.get("center", True) else [])
    w = ctx.weights(node, roles)
    normalized = tuple(shape[on[0]:])
    check_tensor(normalized, 4, f"{node.describe()}: gamma")   # made from the declared shape when not stored
    gamma = w.get("gamma", np.ones(normalized, np.float32)).reshape(normalized)
    params = [ctx.param(node, "gamma", gamma)]
    if "beta" in w:
        params.append(ctx.param(node, "beta", w["beta"].reshape(normalized)))
    ctx.emit("LayerNormalization", [x, *params], {"axis": on[0], "epsilon": float(cfg.get("epsilon", 1e-3))},
             node=node, outputs=node.outputs[:1] + ["", ""])
