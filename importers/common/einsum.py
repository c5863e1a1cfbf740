"""Einsum with one or two operands as data movement around one MatMul, for every importer (ONNX, TensorFlow).

Letters of one operand that appear nowhere else are summed first; then, for ``A,B->O``, the batch letters (in A,
B and O), the contracted ones (in A and B only), A's free ones and B's free ones are gathered by a Transpose and
a Reshape of each operand into (batch..., rows, K) and (batch..., K, columns), multiplied, and the product is
reshaped and transposed into O's order. Ellipses stand for the leading axes; an implicit output is the ellipsis
then the letters used once, sorted; a repeated letter in one operand (a diagonal) is refused.
"""

from __future__ import annotations

import math
import string

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ImportContext, SourceNode


def _terms(node: SourceNode, ranks: list[int]) -> tuple[list[str], str]:
    """The equation's operand terms and output term with every ellipsis spelled out as letters."""
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    left, arrow, output = equation.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise PegasusError(f"{node.describe()}: equation '{equation}' has {len(terms)} operands, the node "
                           f"{len(ranks)}")
    spare = [c for c in string.ascii_letters if c not in equation]
    widths = [rank - (len(term) - 3) if "..." in term else 0 for term, rank in zip(terms, ranks)]
    batch = spare[:max(widths, default=0)]
    terms = [term.replace("...", "".join(batch[len(batch) - width:])) for term, width in zip(terms, widths)]
    if not arrow:   # implicit output: the ellipsis, then the letters used once, sorted
        letters = "".join(terms)
        output = "..." + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in batch))
    output = output.replace("...", "".join(batch))
    for term, rank in zip(terms, ranks):
        if len(term) != rank or len(set(term)) != len(term):
            raise PegasusError(f"{node.describe()}: equation '{equation}' is not a matrix product pegasus imports "
                               "(a repeated letter in one operand, or ranks that do not match)")
    return terms, output


def _sum_unused(ctx: ImportContext, node: SourceNode, x: str, term: str, keep: str, label: str) -> tuple[str, str]:
    """Sum over the letters of ``term`` that ``keep`` lacks."""
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return x, term
    x = ctx.emit("ReduceSum", [x], {"axes": axes, "keepdims": False}, node=node, suffix=f"/sum_{label}")[0]
    return x, "".join(c for c in term if c in keep)


def _arrange(ctx: ImportContext, node: SourceNode, x: str, term: str, order: str, shape: tuple[int, ...],
             label: str) -> str:
    """x (letters ``term``) transposed into ``order`` and reshaped to ``shape`` (each step only if needed)."""
    if order != term:
        x = ctx.emit("Transpose", [x], {"perm": tuple(term.index(c) for c in order)}, node=node,
                     suffix=f"/transpose_{label}")[0]
    if tuple(ctx.type_of(x).shape) != shape:
        x = ctx.emit("Reshape", [x], {"shape": shape}, node=node, suffix=f"/reshape_{label}")[0]
    return x


def einsum(ctx: ImportContext, node: SourceNode) -> None:
    """Convert an Einsum node (attribute ``equation``) of one or two operands."""
    inputs = list(node.inputs)
    terms, output = _terms(node, [ctx.type_of(x).rank for x in inputs])
    if len(inputs) == 1:
        x, term = _sum_unused(ctx, node, inputs[0], terms[0], output, "a")
        perm = tuple(term.index(c) for c in output)
        ctx.emit("Transpose" if perm != tuple(range(len(perm))) else "Identity", [x],
                 {"perm": perm} if perm != tuple(range(len(perm))) else {}, node=node, outputs=node.outputs[:1])
        return
    if len(inputs) != 2:
        raise PegasusError(f"{node.describe()}: Einsum of {len(inputs)} operands is not supported (1 or 2)")
    (a, ta), (b, tb) = (_sum_unused(ctx, node, x, t, other + output, label) for x, t, other, label in
                        ((inputs[0], terms[0], terms[1], "a"), (inputs[1], terms[1], terms[0], "b")))
    batch = "".join(c for c in output if c in ta and c in tb)
    contracted = "".join(c for c in ta if c in tb and c not in output)
    rows = "".join(c for c in ta if c not in tb)
    columns = "".join(c for c in tb if c not in ta)
    if sorted(batch + rows + columns) != sorted(output):
        raise PegasusError(f"{node.describe()}: equation '{node.attrs.get('equation')}' is not a matrix product")
    size: dict[str, int] = {}
    for x, t in ((a, ta), (b, tb)):
        for c, d in zip(t, ctx.type_of(x).shape):
            size[c] = max(size.get(c, 1), d)
    k = math.prod(size[c] for c in contracted)
    a_batch = tuple(dict(zip(ta, ctx.type_of(a).shape))[c] for c in batch)
    b_batch = tuple(dict(zip(tb, ctx.type_of(b).shape))[c] for c in batch)
    a = _arrange(ctx, node, a, ta, batch + rows + contracted,
                 a_batch + (math.prod(size[c] for c in rows), k), "a")
    b = _arrange(ctx, node, b, tb, batch + contracted + columns,
                 b_batch + (k, math.prod(size[c] for c in columns)), "b")
    product = ctx.emit("MatMul", [a, b], node=node, suffix="/matmul")[0]
    out_batch = ctx.type_of(product).shape[:len(batch)]
    unfolded = batch + rows + columns
    shape = tuple(out_batch) + tuple(size[c] for c in rows + columns)
    y = product
    if tuple(ctx.type_of(y).shape) != shape:
        y = ctx.emit("Reshape", [y], {"shape": shape}, node=node, suffix="/unflatten")[0]
    perm = tuple(unfolded.index(c) for c in output)
    ctx.emit("Transpose" if perm != tuple(range(len(perm))) else "Identity", [y],
             {"perm": perm} if perm != tuple(range(len(perm))) else {}, node=node, outputs=node.outputs[:1])
