"""TensorFlow converters for matrix products: MatMul (transpose_a/b; a Gemm, so a following BiasAdd folds into
it), BatchMatMul/V2/V3 (adj_x/adj_y as a transpose of the last two axes, folded away for a constant operand)
and Einsum in its matrix-product forms (importers/common/einsum.py, shared with the ONNX importer).
"""

from __future__ import annotations

from pegasus.importers.common.converters import SourceNode
from pegasus.importers.common.einsum import einsum
from pegasus.importers.tensorflow.context import TfContext, converter


@converter("MatMul")
def matmul(ctx: TfContext, node: SourceNode) -> None:
    attrs = {"transA": int(bool(node.attrs.get("transpose_a", False))),
             "transB": int(bool(node.attrs.get("transpose_b", False)))}
    ctx.emit("Gemm", node.inputs[:2], attrs, node=node, outputs=node.outputs[:1])


def _swap_last(ctx: TfContext, node: SourceNode, x: str, what: str) -> str:
    rank = ctx.type_of(x).rank
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    return ctx.emit("Transpose", [x], {"perm": perm}, node=node, suffix=f"/{what}")[0]


@converter("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def batch_matmul(ctx: TfContext, node: SourceNode) -> None:
    x, y = node.inputs[:2]
    if node.attrs.get("adj_x", False):
        x = _swap_last(ctx, node, x, "adjoint_x")
    if node.attrs.get("adj_y", False):
        y = _swap_last(ctx, node, y, "adjoint_y")
    ctx.emit("MatMul", [x, y], node=node, outputs=node.outputs[:1])


converter("Einsum")(einsum)
