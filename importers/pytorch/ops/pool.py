"""PyTorch converters for pooling: max_pool and avg_pool (1-D/2-D/3-D, padding, ceil_mode, dilation,
count_include_pad) and the adaptive pools.

A stride left empty is the kernel size. An adaptive pool is a GlobalAveragePool/GlobalMaxPool when every
output size is 1, and a plain pool of kernel = stride = in / out when each input size is a multiple of its
output size (PyTorch's windows are then exactly those); other sizes (overlapping windows of unequal length)
are pooled one axis at a time, each window a Slice and a ReduceMean/ReduceMax, the windows concatenated.
``*_with_indices`` forms give only the values (indices are refused if a layer reads them).
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
        _uneven_windows(ctx, node, x, sizes, wanted, "ReduceMax" if maximum else "ReduceMean", outputs)
        return
    kernel = tuple(s // o for s, o in zip(sizes, wanted))
    ctx.emit("MaxPool" if maximum else "AveragePool", [x], {"kernel_shape": kernel, "strides": kernel}, node=node,
             outputs=outputs)


def _uneven_windows(ctx: TorchContext, node: SourceNode, x: str, sizes, wanted: list[int], reduce: str,
                    outputs: list[str] | None) -> None:
    """An adaptive pool whose windows differ in length (PyTorch's window i of an axis spans
    [floor(i * in / out), ceil((i + 1) * in / out))): a window is a product of one interval per axis, and its
    mean (or max) is the mean (max) over one axis of the means over the next, so the axes are pooled one after
    another, each window a Slice reduced and the windows concatenated."""
    changed = [axis for axis, (s, o) in enumerate(zip(sizes, wanted)) if s != o]
    for axis in changed:
        s, o, dim = sizes[axis], wanted[axis], axis + 2
        windows = []
        for i in range(o):
            start, end = i * s // o, -(-(i + 1) * s // o)
            part = ctx.emit("Slice", [x], {"starts": (start,), "ends": (end,), "axes": (dim,)}, node=node,
                            suffix=f"/axis{dim}_window{i}")[0]
            windows.append(ctx.emit(reduce, [part], {"axes": (dim,), "keepdims": 1}, node=node,
                                    suffix=f"/axis{dim}_{reduce[6:].lower()}{i}")[0])
        last = axis == changed[-1]
        x = ctx.emit("Concat", windows, {"axis": dim}, node=node, outputs=outputs if last else None,
                     suffix="" if last else f"/axis{dim}")[0]
