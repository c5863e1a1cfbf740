"""PyTorch converters for the normalizations and softmax: batch_norm (inference: running statistics; the
import passes fold it into the convolution or linear layer before it), layer_norm, group_norm,
instance_norm, softmax, log_softmax.

A missing affine weight or bias is 1 or 0. group_norm has no registry op of its own: it is an
InstanceNormalization over (N, groups, C/groups * spatial), reshaped back, then the per-channel weight and
bias (a Mul and an Add, which fold into a following convolution's neighbour passes like any other).
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter, dim


def _param(ctx: TorchContext, node: SourceNode, value, fill: float, size: int, like: str, what: str) -> str:
    if value is not None:
        return value
    return ctx.add_constant(f"{node.name}/{what}", np.full(size, fill, ctx.type_of(like).dtype.numpy))


@converter("aten::batch_norm", "aten::_native_batch_norm_legit_no_training")
def batch_norm(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["input"]
    if args.get("training"):
        raise PegasusError(f"{node.describe()}: batch_norm in training mode; call model.eval() before saving")
    channels = ctx.shape(x)[1]
    inputs = [x, _param(ctx, node, args["weight"], 1.0, channels, x, "weight"),
              _param(ctx, node, args["bias"], 0.0, channels, x, "bias"), args["running_mean"], args["running_var"]]
    outputs = ctx.output_names(node, 3)[:1] if node.op_type.startswith("aten::_native") else None
    ctx.emit("BatchNormalization", inputs, {"epsilon": float(args["eps"])}, node=node, outputs=outputs)


@converter("aten::layer_norm", "aten::native_layer_norm")
def layer_norm(ctx: TorchContext, node: SourceNode) -> None:
    """layer_norm; native_layer_norm (a core-ATen program's) also returns mean and rstd, which no layer reads."""
    args = ctx.args(node)
    x, normalized = args["input"], list(args["normalized_shape"])
    size = int(np.prod(normalized))
    weight = _param(ctx, node, args.get("weight"), 1.0, size, x, "weight")
    bias = _param(ctx, node, args.get("bias"), 0.0, size, x, "bias")
    if len(normalized) > 1:
        weight, bias = (ctx.add_constant(f"{node.name}/{w}", ctx.builder.constant(v, node=node.name, op=node.op_type,
                                                                                   what=w).reshape(normalized))
                        for w, v in (("weight", weight), ("bias", bias)))
    attrs = {"axis": -len(normalized), "epsilon": float(args.get("eps", 1e-5))}
    outputs = ctx.output_names(node, 3)[:1] if node.op_type == "aten::native_layer_norm" else None
    ctx.emit("LayerNormalization", [x, weight, bias], attrs, node=node, outputs=outputs)


@converter("aten::instance_norm")
def instance_norm(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["input"]
    channels = ctx.shape(x)[1]
    weight = _param(ctx, node, args.get("weight"), 1.0, channels, x, "weight")
    bias = _param(ctx, node, args.get("bias"), 0.0, channels, x, "bias")
    if not args.get("use_input_stats", True):
        inputs = [x, weight, bias, args["running_mean"], args["running_var"]]
        ctx.emit("BatchNormalization", inputs, {"epsilon": float(args["eps"])}, node=node)
        return
    ctx.emit("InstanceNormalization", [x, weight, bias], {"epsilon": float(args.get("eps", 1e-5))}, node=node)


@converter("aten::group_norm", "aten::native_group_norm")
def group_norm(ctx: TorchContext, node: SourceNode) -> None:
    """group_norm; native_group_norm (a core-ATen program's) also returns mean and rstd, which no layer reads."""
    args = ctx.args(node)
    x, groups = args["input"], int(args.get("num_groups", args.get("group")))
    final = ctx.output_names(node, 3)[:1] if node.op_type == "aten::native_group_norm" else node.outputs
    shape = ctx.shape(x)
    dtype = ctx.type_of(x).dtype.numpy
    grouped_shape = (shape[0], groups, int(np.prod(shape[1:])) // groups)
    grouped = ctx.emit("Reshape", [x], {"shape": grouped_shape}, node=node, suffix="/group")[0]
    ones = ctx.add_constant(f"{node.name}/ones", np.ones(groups, dtype))
    zeros = ctx.add_constant(f"{node.name}/zeros", np.zeros(groups, dtype))
    normed = ctx.emit("InstanceNormalization", [grouped, ones, zeros], {"epsilon": float(args.get("eps", 1e-5))},
                      node=node, suffix="/normalize")[0]
    weight, bias = args.get("weight"), args.get("bias")
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    steps = [(op, v) for op, v in (("Mul", weight), ("Add", bias)) if v is not None]
    y = ctx.emit("Reshape", [normed], {"shape": shape}, node=node, suffix="/ungroup" if steps else "",
                 outputs=None if steps else final)[0]
    for index, (op, value) in enumerate(steps):
        param = ctx.emit("Reshape", [value], {"shape": channel}, node=node, suffix=f"/{op.lower()}_shape")[0]
        last = index == len(steps) - 1
        y = ctx.emit(op, [y, param], node=node, suffix="" if last else f"/{op.lower()}",
                     outputs=final if last else None)[0]


@converter("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax")
def softmax(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    op = "LogSoftmax" if "log" in node.op_type else "Softmax"
    ctx.emit(op, [x], {"axis": dim(int(args["dim"]), ctx.rank(x))}, node=node)
