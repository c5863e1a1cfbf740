"""Helpers the integer lowering rules share: fused activations (ReLU/ReLU6/Clip folded into a producer's
clamp) and their bounds on a grid. Requantisation attributes are pegasus.quantized.requant's."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Node
from pegasus.ops.facts import has_fact
from pegasus.ops.registry import get_op
from pegasus.quantized.context import LoweringContext, same_grid
from pegasus.quantized.params import TensorQuant


def clamp_of(node: Node) -> tuple[float | None, float | None] | None:
    """Real bounds of an activation a producer can apply in its requantisation clamp (the ``clamp`` op fact:
    ReLU, Clip), or None for any other op."""
    if not has_fact(node.op, "clamp"):
        return None
    return get_op(node.op).activation_bounds(node.attrs)


def quantized_bounds(q: TensorQuant, lo: float | None, hi: float | None,
                     rounding: str = "half_up") -> tuple[int | None, int | None]:
    """Real clamp bounds on ``q``'s grid (None = unbounded): the levels inside [lo, hi]; with the tflite rounding
    TFLite's CalculateActivationRangeQuantized, zero_point + round(bound / scale) in float32, ties away from 0."""
    scale, zero = float(q.scale[0]), int(q.zero_point[0])
    if rounding == "tflite":
        def level(bound: float) -> int:
            return zero + int(round_half_away(float(np.float32(bound) / np.float32(scale))))
        return (None if lo is None else level(lo)), (None if hi is None else level(hi))
    qlo = None if lo is None else int(np.ceil(lo / scale - 1e-9)) + zero
    qhi = None if hi is None else int(np.floor(hi / scale + 1e-9)) + zero
    return qlo, qhi


def round_half_away(x):
    """C's round(): to nearest, ties away from zero (TFLite's TfLiteRound); scalars or arrays."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def fused_output(ctx: LoweringContext, node: Node) -> tuple[str, int | None, int | None]:
    """The tensor ``node`` should write, with clamp bounds: its own output, or the output of a ReLU/Clip
    that is its only reader (that layer is then skipped), so the activation costs nothing. Under the tflite
    rounding only when the two tensors share a grid: TFLite's own RELU between two grids rounds a second time
    (a TRANSPOSE_CONV the converter left unfused)."""
    out = node.outputs[0]
    reader = ctx.single_consumer(out)
    if reader is not None and clamp_of(reader) is not None and reader.name not in ctx.table.customized_layers \
            and ctx.is_integer(reader.outputs[0]) and (ctx.table.rounding != "tflite" or
                                                       same_grid(ctx.quant(out), ctx.quant(reader.outputs[0]))):
        lo, hi = clamp_of(reader)
        ctx.skipped.add(reader.name)
        target = reader.outputs[0]
        qlo, qhi = quantized_bounds(ctx.quant(target), lo, hi, ctx.table.rounding)
        return target, qlo, qhi
    return out, None, None
