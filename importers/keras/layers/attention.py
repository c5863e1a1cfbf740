"""Keras converter for MultiHeadAttention (the transformer block of ViT, audio and text models) over sequences:
query (B, Tq, D), value (B, Tv, D) and key (default: value), attention over the sequence axis.

Each projection is Keras' EinsumDense, kernel (D, heads, dim) and bias (heads, dim): a MatMul on the kernel
viewed as (D, heads * dim) plus the bias, then (B, T, heads, dim) transposed to heads first. Scores are
``(q / sqrt(key_dim)) @ k^T`` per head, softmax over the keys, ``@ v``, and the heads are joined by the output
projection, kernel (heads, value_dim, D') as (heads * value_dim, D'). The weights come as query, key, value,
output (reader.py orders a .keras file's groups so). Masks (``use_causal_mask``, ``attention_mask``), other
``attention_axes``, ``return_attention_scores`` and Keras 3's ``use_gate``/``sliding_window`` are refused by name.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode

_ROLES = ("query", "key", "value", "output")


def _refuse(node: KerasNode, what: str) -> None:
    raise PegasusError(f"{node.describe()}: MultiHeadAttention with {what} is not supported")


def _project(ctx: KerasContext, node: KerasNode, x: str, role: str, w: dict[str, np.ndarray], perm) -> str:
    """x (B, T, D) projected to (B, heads, T, dim) (perm (0, 2, 1, 3)) or (B, heads, dim, T) (perm (0, 2, 3, 1))."""
    kernel = w[f"{role}/kernel"]
    batch, steps, depth = ctx.type_of(x).shape
    if kernel.ndim != 3 or kernel.shape[0] != depth:
        raise PegasusError(f"{node.describe()}: {role} kernel {list(kernel.shape)} does not fit input "
                           f"{[batch, steps, depth]}")
    heads, dim = kernel.shape[1:]
    y = ctx.emit("MatMul", [x, ctx.param(node, f"{role}/kernel", kernel.reshape(depth, heads * dim))], node=node,
                 suffix=f"/{role}/matmul")[0]
    if f"{role}/bias" in w:
        y = ctx.emit("Add", [y, ctx.param(node, f"{role}/bias", w[f"{role}/bias"].reshape(-1))], node=node,
                     suffix=f"/{role}/bias")[0]
    y = ctx.emit("Reshape", [y], {"shape": (batch, steps, heads, dim)}, node=node, suffix=f"/{role}/heads")[0]
    return ctx.emit("Transpose", [y], {"perm": perm}, node=node, suffix=f"/{role}/transpose")[0]


@converter("MultiHeadAttention")
def multi_head_attention(ctx: KerasContext, node: KerasNode) -> None:
    cfg, options = node.attrs, node.attrs.get("call_options", {})
    for key, what in (("use_causal_mask", "a causal mask"), ("return_attention_scores", "attention scores returned")):
        if options.get(key):
            _refuse(node, what)
    if cfg.get("use_gate") or cfg.get("sliding_window"):
        _refuse(node, "use_gate or sliding_window")
    if len(node.inputs) not in (2, 3):
        _refuse(node, f"{len(node.inputs)} inputs (an attention_mask, or no value)")
    query, value = node.inputs[:2]
    key = node.inputs[2] if len(node.inputs) == 3 else value
    if any(ctx.type_of(t).rank != 3 for t in (query, value, key)):
        _refuse(node, "inputs other than (batch, steps, features)")
    if cfg.get("attention_axes") not in (None, [1], (1,), 1):
        _refuse(node, f"attention_axes {cfg.get('attention_axes')}")
    bias = cfg.get("use_bias", True)
    roles = [f"{r}/{p}" for r in _ROLES for p in (("kernel", "bias") if bias else ("kernel",))]
    w = ctx.weights(node, roles)
    q = _project(ctx, node, query, "query", w, (0, 2, 1, 3))
    q = ctx.emit("Mul", [q, ctx.scalar(node, "scale", 1.0 / np.sqrt(float(w["query/kernel"].shape[2])))], node=node,
                 suffix="/query/scaled")[0]
    k = _project(ctx, node, key, "key", w, (0, 2, 3, 1))
    v = _project(ctx, node, value, "value", w, (0, 2, 1, 3))
    scores = ctx.emit("MatMul", [q, k], node=node, suffix="/scores")[0]
    probs = ctx.emit("Softmax", [scores], {"axis": -1}, node=node, suffix="/softmax")[0]
    attended = ctx.emit("MatMul", [probs, v], node=node, suffix="/attend")[0]
    attended = ctx.emit("Transpose", [attended], {"perm": (0, 2, 1, 3)}, node=node, suffix="/join")[0]
    batch, steps, heads, dim = ctx.type_of(attended).shape
    attended = ctx.emit("Reshape", [attended], {"shape": (batch, steps, heads * dim)}, node=node,
                        suffix="/joined")[0]
    kernel = w["output/kernel"]
    if kernel.ndim != 3 or kernel.shape[:2] != (heads, dim):
        raise PegasusError(f"{node.describe()}: output kernel {list(kernel.shape)} does not fit {heads} heads of {dim}")
    kernel = ctx.param(node, "output/kernel", kernel.reshape(heads * dim, -1))
    if bias:
        y = ctx.emit("MatMul", [attended, kernel], node=node, suffix="/output/matmul")[0]
        ctx.emit("Add", [y, ctx.param(node, "output/bias", w["output/bias"])], node=node, outputs=node.outputs[:1])
    else:
        ctx.emit("MatMul", [attended, kernel], node=node, outputs=node.outputs[:1])
