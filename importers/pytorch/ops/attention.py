"""PyTorch converters for the fused transformer kernels that ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` call in eval mode when gradients are off (their "fast path", which a model
traced under ``torch.no_grad()`` records): ``_native_multi_head_attention`` and
``_transformer_encoder_layer_fwd``, written out in registry ops.

Attention is batch first, (B, L, E): q, k and v are the rows of ``qkv_weight`` (3E, E) applied to query, key
and value, split into H heads of E / H; softmax(q k^T / sqrt(E / H) + mask) v, heads joined, then the output
projection. A boolean mask is True where attention is not allowed (float32's lowest value is added there), a
float mask is added; ``mask_type`` 0 is an (L, S) attention mask, 1 a (B, S) key padding mask, 2 a mask of
(B, H, L, S). With ``need_weights`` the second result is the attention weights, averaged over the heads with
``average_attn_weights``. The encoder layer is norm_first ``x + attn(ln1(x))``, ``x + ffn(ln2(x))`` or
post-norm ``ln1(x + attn(x))``, ``ln2(x + ffn(x))``, its feed-forward ``linear2(gelu or relu(linear1(x)))``.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter


def _weight(ctx: TorchContext, node: SourceNode, name, what: str) -> np.ndarray:
    value = ctx.value(name) if ctx.is_tensor(name) else None
    if value is None:
        raise PegasusError(f"{node.describe()}: {what} is computed at run time; pegasus needs it constant")
    return value


def _dense(ctx: TorchContext, node: SourceNode, x: str, weight: np.ndarray, bias: np.ndarray | None,
           suffix: str, outputs: list[str] | None = None) -> str:
    """x W^T + b over the last axis."""
    wt = ctx.add_constant(f"{node.name}{suffix}/weight_t", np.ascontiguousarray(weight.T))
    if bias is None:
        return ctx.emit("MatMul", [x, wt], node=node, suffix=suffix, outputs=outputs)[0]
    y = ctx.emit("MatMul", [x, wt], node=node, suffix=f"{suffix}/matmul")[0]
    return ctx.emit("Add", [y, ctx.add_constant(f"{node.name}{suffix}/bias", bias)], node=node, suffix=suffix,
                    outputs=outputs)[0]


def _mask(ctx: TorchContext, node: SourceNode, mask, mask_type, batch: int, like: str) -> str | None:
    """The mask as a tensor to add to the (B, H, L, S) scores."""
    if mask is None:
        return None
    if mask_type == 1:
        mask = ctx.emit("Reshape", [mask], {"shape": (batch, 1, 1, ctx.shape(mask)[-1])}, node=node,
                        suffix="/key_padding")[0]
    elif mask_type not in (0, 2, None):
        raise PegasusError(f"{node.describe()}: mask_type {mask_type} is not supported")
    if ctx.type_of(mask).dtype.value != "bool":
        return mask
    lowest = float(np.finfo(ctx.type_of(like).dtype.numpy).min)
    return ctx.emit("Where", [mask, ctx.tensor(node, lowest, like, "masked"), ctx.tensor(node, 0.0, like, "allowed")],
                    node=node, suffix="/mask")[0]


def multi_head_attention(ctx: TorchContext, node: SourceNode, query: str, key: str, value: str, heads: int,
                         weights: tuple, mask: str | None, suffix: str = "", outputs: list[str] | None = None,
                         need_weights: bool = False, average: bool = True) -> tuple[str, str | None]:
    """(attention output, attention weights or None) of batch-first query/key/value."""
    qkv_weight, qkv_bias, proj_weight, proj_bias = weights
    embed = qkv_weight.shape[1]
    depth = embed // heads
    batch, length = ctx.shape(query)[:2]
    split = []
    for index, (x, tag) in enumerate(((query, "q"), (key, "k"), (value, "v"))):
        rows = slice(index * embed, (index + 1) * embed)
        y = _dense(ctx, node, x, qkv_weight[rows], None if qkv_bias is None else qkv_bias[rows], f"{suffix}/{tag}")
        y = ctx.emit("Reshape", [y], {"shape": (batch, ctx.shape(x)[1], heads, depth)}, node=node,
                     suffix=f"{suffix}/{tag}_heads")[0]
        perm = (0, 2, 3, 1) if tag == "k" else (0, 2, 1, 3)   # k^T: (B, H, D, S)
        split.append(ctx.emit("Transpose", [y], {"perm": perm}, node=node, suffix=f"{suffix}/{tag}_t")[0])
    q, kt, v = split
    scale = ctx.tensor(node, float(1 / np.sqrt(depth)), query, "scale")
    q = ctx.emit("Mul", [q, scale], node=node, suffix=f"{suffix}/q_scaled")[0]
    scores = ctx.emit("MatMul", [q, kt], node=node, suffix=f"{suffix}/scores")[0]
    if mask is not None:
        scores = ctx.emit("Add", [scores, mask], node=node, suffix=f"{suffix}/masked")[0]
    probs = ctx.emit("Softmax", [scores], {"axis": 3}, node=node, suffix=f"{suffix}/softmax")[0]
    context = ctx.emit("MatMul", [probs, v], node=node, suffix=f"{suffix}/context")[0]
    context = ctx.emit("Transpose", [context], {"perm": (0, 2, 1, 3)}, node=node, suffix=f"{suffix}/context_t")[0]
    context = ctx.emit("Reshape", [context], {"shape": (batch, length, embed)}, node=node,
                       suffix=f"{suffix}/context_joined")[0]
    out = _dense(ctx, node, context, proj_weight, proj_bias, f"{suffix}/out_proj" if outputs is None else "",
                 outputs=None if outputs is None else outputs[:1])
    if not need_weights:
        return out, None
    if not average:
        return out, ctx.emit("Identity", [probs], node=node, outputs=outputs[1:2] if outputs else None,
                             suffix="" if outputs else f"{suffix}/weights")[0]
    return out, ctx.emit("ReduceMean", [probs], {"axes": (1,), "keepdims": 0}, node=node,
                         outputs=outputs[1:2] if outputs else None, suffix="" if outputs else f"{suffix}/weights")[0]


@converter("aten::_native_multi_head_attention")
def native_multi_head_attention(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    query = args["query"]
    weights = tuple(None if args[n] is None else _weight(ctx, node, args[n], n)
                    for n in ("qkv_weight", "qkv_bias", "proj_weight", "proj_bias"))
    mask = _mask(ctx, node, args.get("mask"), args.get("mask_type"), ctx.shape(query)[0], query)
    need = bool(args.get("need_weights", True))
    outputs = ctx.output_names(node, 2)
    _, probs = multi_head_attention(ctx, node, query, args["key"], args["value"], int(args["num_head"]), weights,
                                    mask, outputs=outputs, need_weights=need,
                                    average=bool(args.get("average_attn_weights", True)))
    if probs is None:  # no weights asked for: torch returns an empty tensor
        ctx.builder.set_constant(outputs[1], np.zeros((0,), ctx.type_of(query).dtype.numpy))


@converter("aten::_transformer_encoder_layer_fwd")
def transformer_encoder_layer(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["src"]
    params = {n: None if args[n] is None else _weight(ctx, node, args[n], n)
              for n in ("qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "norm_weight_1", "norm_bias_1",
                        "norm_weight_2", "norm_bias_2", "ffn_weight_1", "ffn_bias_1", "ffn_weight_2", "ffn_bias_2")}
    mask = _mask(ctx, node, args.get("mask"), args.get("mask_type"), ctx.shape(x)[0], x)
    eps, norm_first = float(args["eps"]), bool(args["norm_first"])

    def norm(t: str, index: int, last: bool = False) -> str:
        scale, shift = (ctx.add_constant(f"{node.name}/norm{index}/{w}", params[f"norm_{w}_{index}"])
                        for w in ("weight", "bias"))
        return ctx.emit("LayerNormalization", [t, scale, shift], {"axis": -1, "epsilon": eps}, node=node,
                        suffix="" if last else f"/norm{index}")[0]

    def residual(t: str, branch: str, index: int, last: bool) -> str:
        return ctx.emit("Add", [t, branch], node=node, suffix="" if last else f"/residual{index}")[0]

    attention_in = norm(x, 1) if norm_first else x
    weights = tuple(params[n] for n in ("qkv_weight", "qkv_bias", "proj_weight", "proj_bias"))
    attended, _ = multi_head_attention(ctx, node, attention_in, attention_in, attention_in, int(args["num_heads"]),
                                       weights, mask, suffix="/self_attn")
    x = residual(x, attended, 1, False) if norm_first else norm(residual(x, attended, 1, False), 1)
    hidden = _dense(ctx, node, norm(x, 2) if norm_first else x, params["ffn_weight_1"], params["ffn_bias_1"],
                    "/linear1")
    hidden = ctx.emit("Gelu" if args["use_gelu"] else "Relu", [hidden], node=node, suffix="/activation")[0]
    hidden = _dense(ctx, node, hidden, params["ffn_weight_2"], params["ffn_bias_2"], "/linear2")
    if norm_first:
        residual(x, hidden, 2, True)
    else:
        norm(residual(x, hidden, 2, False), 2, True)
