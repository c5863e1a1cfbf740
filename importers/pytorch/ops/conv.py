"""PyTorch converters for the MAC-heavy ops: convolutions (1-D/2-D/3-D, groups, dilation, transposed), linear,
addmm, baddbmm, matmul/mm/bmm, einsum (one or two operands), scaled_dot_product_attention.

PyTorch's layouts are the registry's: activations channels first, Conv weights (M, C/group, k...),
ConvTranspose weights (C, M/group, k...); so weights pass as they are. A padding of ``n`` is ``n`` at both
ends of each spatial axis; ``padding='same'`` puts the odd pixel at the end, as PyTorch does. ``linear`` is
a Gemm (transB) on a 2-D input, else a MatMul with the transposed weight plus the bias.
scaled_dot_product_attention is written out: softmax(q k^T * scale + mask) v, a boolean mask (or
``is_causal``) adding float32's lowest value where attention is not allowed.
"""

from __future__ import annotations

import math

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter


def spatial(values, count: int) -> tuple[int, ...]:
    """A per-axis int list (one value stands for every axis)."""
    values = [int(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    return tuple(values * count) if len(values) == 1 else tuple(values)


def _pads(node: SourceNode, padding, kernel: tuple[int, ...], dilations: tuple[int, ...]) -> tuple[int, ...]:
    if padding == "valid":
        return (0,) * (2 * len(kernel))
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilations)]
        return tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    if isinstance(padding, str):
        raise PegasusError(f"{node.describe()}: padding '{padding}' is not supported")
    pads = spatial(padding, len(kernel))
    return pads + pads


@converter("aten::_convolution", "aten::_convolution_mode", "aten::convolution", "aten::conv1d", "aten::conv2d",
           "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d")
def convolution(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x, w, bias = args["input"], args["weight"], args.get("bias")
    kernel = tuple(ctx.shape(w)[2:])
    n = len(kernel)
    transposed = bool(args.get("transposed", "transpose" in node.op_type))
    strides, dilations = spatial(args.get("stride", 1), n), spatial(args.get("dilation", 1), n)
    attrs = {"strides": strides, "dilations": dilations, "group": int(args.get("groups", 1)),
             "pads": _pads(node, args.get("padding", 0), kernel, dilations), "kernel_shape": kernel}
    if transposed:
        attrs["output_padding"] = spatial(args.get("output_padding", 0), n)
    inputs = [x, w]
    if bias is not None:
        inputs.append(bias)
    ctx.emit("ConvTranspose" if transposed else "Conv", inputs, attrs, node=node)


@converter("aten::linear")
def linear(ctx: TorchContext, node: SourceNode) -> None:
    """y = x W^T + b: a Gemm for a 2-D x, else MatMul(x, W^T) + b."""
    args = ctx.args(node)
    x, w, bias = args["input"], args["weight"], args.get("bias")
    if ctx.rank(x) == 2:
        ctx.emit("Gemm", [x, w] + ([bias] if bias is not None else []), {"transB": 1}, node=node)
        return
    weight = ctx.value(w)
    wt = (ctx.add_constant(f"{node.name}/weight_t", np.ascontiguousarray(weight.T)) if weight is not None
          else ctx.emit("Transpose", [w], {"perm": (1, 0)}, node=node, suffix="/weight_t")[0])
    if bias is None:
        ctx.emit("MatMul", [x, wt], node=node)
        return
    y = ctx.emit("MatMul", [x, wt], node=node, suffix="/matmul")[0]
    ctx.emit("Add", [y, bias], node=node)


@converter("aten::addmm")
def addmm(ctx: TorchContext, node: SourceNode) -> None:
    """beta * self + alpha * (mat1 @ mat2)."""
    args = ctx.args(node)
    attrs = {"alpha": float(args.get("alpha", 1)), "beta": float(args.get("beta", 1))}
    ctx.emit("Gemm", [args["mat1"], args["mat2"], args["self"]], attrs, node=node)


@converter("aten::baddbmm")
def baddbmm(ctx: TorchContext, node: SourceNode) -> None:
    """beta * self + alpha * (batch1 @ batch2) (nn.MultiheadAttention's scores plus a float mask)."""
    args = ctx.args(node)
    product = ctx.emit("MatMul", [args["batch1"], args["batch2"]], node=node, suffix="/matmul")[0]
    alpha, beta = (float(ctx.number(node, args.get(k, 1), k)) for k in ("alpha", "beta"))
    if alpha != 1:
        product = ctx.emit("Mul", [product, ctx.tensor(node, alpha, product, "alpha")], node=node, suffix="/alpha")[0]
    added = args["self"]
    if beta != 1:
        added = ctx.emit("Mul", [added, ctx.tensor(node, beta, added, "beta")], node=node, suffix="/beta")[0]
    ctx.emit("Add", [product, added], node=node)


@converter("aten::matmul", "aten::mm", "aten::bmm")
def matmul(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    other = args.get("other", args.get("mat2"))
    ctx.emit("MatMul", [args["self"], other], node=node)


@converter("aten::scaled_dot_product_attention")
def attention(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    q, k, v, mask = args["query"], args["key"], args["value"], args.get("attn_mask")
    if args.get("enable_gqa"):
        raise PegasusError(f"{node.describe()}: grouped-query attention (enable_gqa) is not supported")
    rank, dtype = ctx.rank(q), ctx.type_of(q).dtype.numpy
    scale = args.get("scale") or 1 / np.sqrt(ctx.shape(q)[-1])
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    kt = ctx.emit("Transpose", [k], {"perm": perm}, node=node, suffix="/key_t")[0]
    scores = ctx.emit("MatMul", [q, kt], node=node, suffix="/scores")[0]
    scores = ctx.emit("Mul", [scores, ctx.tensor(node, float(scale), q, "scale")], node=node, suffix="/scaled")[0]
    lowest = np.finfo(dtype).min
    if args.get("is_causal"):
        length, source = ctx.shape(q)[-2], ctx.shape(k)[-2]
        causal = np.where(np.tril(np.ones((length, source), bool)), 0, lowest).astype(dtype)
        scores = ctx.emit("Add", [scores, ctx.add_constant(f"{node.name}/causal", causal)], node=node,
                          suffix="/causal")[0]
    if mask is not None:
        if ctx.type_of(mask).dtype.value == "bool":
            additive = ctx.emit("Where", [mask, ctx.tensor(node, 0.0, q, "allowed"),
                                         ctx.tensor(node, float(lowest), q, "masked")], node=node, suffix="/mask")[0]
        else:
            additive = mask
        scores = ctx.emit("Add", [scores, additive], node=node, suffix="/masked")[0]
    weights = ctx.emit("Softmax", [scores], {"axis": rank - 1}, node=node, suffix="/softmax")[0]
    ctx.emit("MatMul", [weights, v], node=node)


@converter("aten::einsum")
def einsum(ctx: TorchContext, node: SourceNode) -> None:
    """A product of two operands written as einsum (``bhqd,bhkd->bhqk``): letters only one operand has and the
    output lacks are summed first; then the operands are put in (batch, free, summed) and (batch, summed, free)
    order, flattened to three axes, multiplied (MatMul) and put in the output's order. One operand (a
    transpose, a sum) is a ReduceSum and a Transpose."""
    args = ctx.args(node)
    equation, tensors = str(args["equation"]).replace(" ", ""), list(args["tensors"])
    if "..." in equation or "->" not in equation or len(tensors) not in (1, 2):
        raise PegasusError(f"{node.describe()}: einsum '{equation}' is not supported (one or two operands with "
                           "explicit letters and '->')")
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if any(len(set(t)) != len(t) for t in terms + [output]):
        raise PegasusError(f"{node.describe()}: einsum '{equation}' repeats a letter in one operand (a diagonal)")
    operands = []
    for index, (term, x) in enumerate(zip(terms, tensors)):
        elsewhere = set(output).union(*[t for i, t in enumerate(terms) if i != index])
        alone = [i for i, letter in enumerate(term) if letter not in elsewhere]
        if alone:
            x = ctx.emit("ReduceSum", [x], {"axes": tuple(alone), "keepdims": False}, node=node,
                         suffix=f"/sum{index}")[0]
            term = "".join(letter for letter in term if letter in elsewhere)
        operands.append((term, x))
    if len(operands) == 1:
        term, x = operands[0]
        ctx.emit("Transpose", [x], {"perm": tuple(term.index(letter) for letter in output)}, node=node)
        return
    (ta, a), (tb, b) = operands
    batch = [c for c in output if c in ta and c in tb]
    summed = [c for c in ta if c in tb and c not in output]
    left, right = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    sizes = {c: ctx.shape(a)[ta.index(c)] for c in ta} | {c: ctx.shape(b)[tb.index(c)] for c in tb}

    def arrange(x: str, term: str, order: list[str], shape: tuple[int, ...], tag: str) -> str:
        x = ctx.emit("Transpose", [x], {"perm": tuple(term.index(c) for c in order)}, node=node,
                     suffix=f"/{tag}_t")[0]
        return ctx.emit("Reshape", [x], {"shape": shape}, node=node, suffix=f"/{tag}_3d")[0]

    count = [math.prod(sizes[c] for c in group) for group in (batch, left, summed, right)]
    a = arrange(a, ta, batch + left + summed, (count[0], count[1], count[2]), "a")
    b = arrange(b, tb, batch + summed + right, (count[0], count[2], count[3]), "b")
    product = ctx.emit("MatMul", [a, b], node=node, suffix="/matmul")[0]
    grouped = batch + left + right
    product = ctx.emit("Reshape", [product], {"shape": tuple(sizes[c] for c in grouped)}, node=node,
                       suffix="/unflatten")[0]
    ctx.emit("Transpose", [product], {"perm": tuple(grouped.index(c) for c in output)}, node=node)
