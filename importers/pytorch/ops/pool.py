"""PyTorch converters for pooling: max_pool and avg_pool (1-D/2-D/3-D, padding, ceil_mode, dilation,
count_include_pad) and the adaptive pools.

A stride left empty is the kernel size. An adaptive pool is a GlobalAveragePool/GlobalMaxPool when every
output size is 1, and a plain pool of kernel = stride = in / out when each input size is a multiple of its
output size (PyTorch's windows are then exactly those); other sizes have overlapping windows of unequal
length, which no registry op expresses, and are refused naming the sizes. ``*_with_indices`` forms give
only the values (indices are refused if a layer reads them).
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter
from pegasus.importers.pytorch.ops.conv import spatial


def _outputs(ctx: TorchContext, node: SourceNode) -> list[str] | None:
    """The values output of an op that also returns indices."""
    return ctx.output_names(node, 2)[:1] if "indices" in node.op_type or "adaptive_max" in node.op_type else None


def _window(args: dict, n: int) -> dict:
    kernel = spatial(args["kernel_size"], n)
    stride = args.get("stride")
    pads = spatial(args.get("padding", 0), n)
    return {"kernel_shape": kernel, "strides": spatial(stride, n) if stride else kernel, "pads": pads + pads,
            "ceil_mode": int(bool(args.get("ceil_mode", False)))}


@converter("aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::max_pool2d_with_indices",
           "aten::max_pool1d_with_indices", "aten::max_pool3d_with_indices")
def max_pool(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    n = ctx.rank(x) - 2
    attrs = {**_window(args, n), "dilations": spatial(args.get("dilation", 1), n)}
    ctx.emit("MaxPool", [x], attrs, node=node, outputs=_outputs(ctx, node))


@converter("aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d")
def avg_pool(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    if args.get("divisor_override") is not None:
        raise PegasusError(f"{node.describe()}: avg_pool with divisor_override is not supported")
    attrs = {**_window(args, ctx.rank(x) - 2), "count_include_pad": int(bool(args.get("count_include_pad", True)))}
    ctx.emit("AveragePool", [x], attrs, node=node)


@converter("aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d",
           "aten::adaptive_max_pool1d", "aten::adaptive_max_pool2d", "aten::adaptive_max_pool3d",
           "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d")
def adaptive_pool(ctx: TorchContext, node: SourceNode) -> None:
    args = ctx.args(node)
    x = args["self"]
    sizes = ctx.shape(x)[2:]
    out = args["output_size"]
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    wanted = [s if o is None else int(o) for o, s in zip(out * len(sizes) if len(out) == 1 else out, sizes)]
    maximum = "max" in node.op_type
    outputs = _outputs(ctx, node) if maximum else None
    if all(o == 1 for o in wanted):
        ctx.emit("GlobalMaxPool" if maximum else "GlobalAveragePool", [x], node=node, outputs=outputs)
        return
    if any(s % o for s, o in zip(sizes, wanted)):
        raise PegasusError(f"{node.describe()}: adaptive pool from {list(sizes)} to {wanted}: only output sizes "
                           "that divide the input sizes (equal windows) can be expressed")
    kernel = tuple(s // o for s, o in zip(sizes, wanted))
    ctx.emit("MaxPool" if maximum else "AveragePool", [x], {"kernel_shape": kernel, "strides": kernel}, node=node,
             outputs=outputs)
