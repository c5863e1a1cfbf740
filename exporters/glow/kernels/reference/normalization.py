"""Emitters for the normalizations (pegasus/ops/normalization.py): BatchNormalization (inference),
InstanceNormalization, LayerNormalization (with its optional Mean/InvStdDev outputs) and LRN.

Statistics are computed as the reference does, in float32 (float64 for float64 tensors, LayerNorm's
stash_type otherwise), two passes: the mean, then the mean squared deviation. Sums carry the
``reassoc`` flag so LLVM vectorises them into several partial sums (closer to NumPy's pairwise sums
than one running total). BatchNormalization with training_mode=1 is not emitted (a bundle runs
inference; export the model with training_mode=0). A float BatchNormalization heads a fused layer
(exporters/glow/fuse.py) with the unary element-wise layers after it (the pre-activation BN -> Relu of
DenseNet): their formulas are applied to each normalised value before it is stored, one pass instead of two.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.reference.elementwise import apply_unary
from pegasus.exporters.glow.kernels.registry import emitter, group_emitter
from pegasus.exporters.glow.llvm.convert import load_as, store_as
from pegasus.exporters.glow.llvm.lanes import (
    broadcast_strides,
    float_lanes,
    lane_loop,
    load_lanes,
    splat,
    store_lanes,
    strided_loop,
)
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.exporters.glow.llvm.scalar import Arith, LaneArith, compute_dtype
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.ir.dtypes import DType
from pegasus.ops.common import normalize_axis

SUM_FLAGS = ("reassoc", "contract")


def statistics_dtype(dtype: DType) -> DType:
    return DType.FLOAT64 if dtype is DType.FLOAT64 else DType.FLOAT32


def accumulate(ar: Arith, count: int, term: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """Σ term(i) for i < count (a stack slot that LLVM promotes to a register and vectorises)."""
    b = ar.b
    with b.goto_entry_block():
        slot = b.alloca(ar.type)
    b.store(ar.const(0), slot)
    with for_range(b, count, name="r") as i:
        b.store(b.fadd(b.load(slot), term(i), flags=SUM_FLAGS), slot)
    return b.load(slot)


def mean_and_inv_std(ar: Arith, x: TensorRef, base: ir.Value, count: int, epsilon: float) -> tuple[ir.Value, ir.Value]:
    """Mean and 1 / sqrt(variance + epsilon) of ``count`` contiguous elements of x from ``base``."""
    def element(i: ir.Value) -> ir.Value:
        return load_as(ar.b, x, ar.b.add(base, i, flags=("nsw",)), ar.dtype)

    mean = ar.div(accumulate(ar, count, element), count)

    def square(i: ir.Value) -> ir.Value:
        deviation = ar.sub(element(i), mean)
        return ar.b.fmul(deviation, deviation, flags=("contract",))

    variance = ar.div(accumulate(ar, count, square), count)
    return mean, ar.div(1, ar.fn("sqrt", ar.add(variance, epsilon)))


@emitter("BatchNormalization")
def batch_normalization(k: KernelContext, epilogue: tuple = ()) -> None:
    """y = (x - mean) * (scale / sqrt(var + epsilon)) + B; parameters may be (C, d2, ...) aligned with x.
    ``epilogue``: (op, attrs) of fused unary layers applied to each value before the store."""
    if k.attrs.training_mode:
        raise PegasusError(f"layer '{k.node.name}': BatchNormalization with training_mode=1 is not exported "
                           "(bundles run inference; set training_mode=0)")
    x, scale, bias, mean, var = k.inputs
    y, b = k.outputs[0], k.builder
    ar = Arith(b, statistics_dtype(x.type.dtype), k.math)
    channels, inner = scale.type.size, math.prod(x.shape[1 + scale.type.rank:])
    lanes = float_lanes(k.target, ar.dtype, [x, y])
    with for_range(b, x.shape[0], name="n") as n:
        with for_range(b, channels, name="c") as c:
            inv = ar.div(load_as(b, scale, c, ar.dtype), ar.fn("sqrt", ar.add(load_as(b, var, c, ar.dtype),
                                                                                 k.attrs.epsilon)))
            shift, offset = load_as(b, mean, c, ar.dtype), load_as(b, bias, c, ar.dtype)
            base = b.mul(b.add(b.mul(n, const(channels)), c), const(inner))

            def finish(value: ir.Value) -> ir.Value:
                for op, attrs in epilogue:
                    value = apply_unary(b, k.math, op, attrs, value, y.type.dtype)
                return value

            def normalize(flats: list[ir.Value], width: int, shift=shift, inv=inv, offset=offset) -> None:
                flat = flats[0]
                if width == 1:
                    value = ar.add(ar.mul(ar.sub(load_as(b, x, flat, ar.dtype), shift), inv), offset)
                    store_as(b, y, flat, finish(value), ar.dtype)
                    return
                vector = LaneArith(b, ar.dtype, k.math, width)
                value = vector.sub(load_lanes(b, x, flat, width, 1), splat(b, shift, width))
                value = vector.add(vector.mul(value, splat(b, inv, width)), splat(b, offset, width))
                store_lanes(b, y, flat, finish(value))

            lane_loop(b, (inner,), [(1,)], lanes, normalize, [base])


@group_emitter("BatchNormalization")
def batch_normalization_group(k: KernelContext, layer) -> None:
    """A BatchNormalization with the unary layers fused after it (fuse.Layer ``layer``): k's output is the
    last one's."""
    batch_normalization(k, tuple((node.op, node.attrs) for node in layer.epilogue))


@emitter("InstanceNormalization")
def instance_normalization(k: KernelContext) -> None:
    """Per (n, c): y = (x - mean) / sqrt(var + epsilon) * scale + B over the spatial elements."""
    x, scale, bias = k.inputs
    y, b = k.outputs[0], k.builder
    ar = Arith(b, statistics_dtype(x.type.dtype), k.math)
    channels, spatial = x.shape[1], math.prod(x.shape[2:])
    with for_range(b, x.shape[0], name="n") as n:
        with for_range(b, channels, name="c") as c:
            base = b.mul(b.add(b.mul(n, const(channels)), c), const(spatial))
            mean, inv = mean_and_inv_std(ar, x, base, spatial, k.attrs.epsilon)
            gain = ar.mul(inv, load_as(b, scale, c, ar.dtype))
            offset = load_as(b, bias, c, ar.dtype)
            with for_range(b, spatial) as i:
                flat = b.add(base, i, flags=("nsw",))
                store_as(b, y, flat, ar.add(ar.mul(ar.sub(load_as(b, x, flat, ar.dtype), mean), gain), offset),
                         ar.dtype)


@emitter("LayerNormalization")
def layer_normalization(k: KernelContext) -> None:
    """Per outer index (axes before ``axis``): y = (x - mean) * inv_std * Scale + B, Scale and B
    broadcast against x; Mean and InvStdDev are written when the layer has them."""
    x, scale = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y, mean_out, inv_out = (list(k.outputs) + [None, None])[:3]
    b = k.builder
    ar = Arith(b, compute_dtype(DType.from_onnx(k.attrs.stash_type)), k.math)
    axis = normalize_axis(k.attrs.axis, len(x.shape))
    outer, inner = x.shape[:axis], x.shape[axis:]
    params = [p for p in (scale, bias) if p is not None]
    strides = [x.strides] + [broadcast_strides(x.shape, p.shape) for p in params]
    outer_strides = [list(s[:axis]) for s in strides] + [list(strides_of(tuple(outer)))]
    with strided_loop(b, outer, outer_strides) as (*bases, row):
        mean, inv = mean_and_inv_std(ar, x, bases[0], math.prod(inner), k.attrs.epsilon)
        for ref, value in ((mean_out, mean), (inv_out, inv)):
            if ref is not None:
                store_as(b, ref, row, value, ar.dtype)
        with strided_loop(b, inner, [list(s[axis:]) for s in strides], bases) as (flat, *at):
            value = ar.mul(ar.mul(ar.sub(load_as(b, x, flat, ar.dtype), mean), inv),
                           load_as(b, scale, at[0], ar.dtype))
            if bias is not None:
                value = ar.add(value, load_as(b, bias, at[1], ar.dtype))
            store_as(b, y, flat, value, ar.dtype)


@emitter("LRN")
def lrn(k: KernelContext) -> None:
    """y = x / (bias + alpha / size * Σ x² over the ``size`` channels around c) ** beta; the window is
    unrolled (channels outside [0, C) count as zero) so the spatial loop vectorises."""
    x, y, b, attrs = k.inputs[0], k.outputs[0], k.builder, k.attrs
    ar = Arith(b, statistics_dtype(x.type.dtype), k.math)
    channels, spatial = x.shape[1], math.prod(x.shape[2:])
    before = (attrs.size - 1) // 2
    with for_range(b, x.shape[0], name="n") as n:
        with for_range(b, channels, name="c") as c:
            window = [b.add(c, const(offset - before)) for offset in range(attrs.size)]
            inside = [b.icmp_unsigned("<", channel, const(channels)) for channel in window]  # 0 <= channel < C
            rows = [b.mul(b.add(b.mul(n, const(channels)), b.select(ok, channel, c)), const(spatial))
                    for channel, ok in zip(window, inside)]
            base = b.mul(b.add(b.mul(n, const(channels)), c), const(spatial))
            with for_range(b, spatial) as i:
                squares = []
                for row, ok in zip(rows, inside):
                    value = load_as(b, x, b.add(row, i, flags=("nsw",)), ar.dtype)
                    squares.append(ar.select(ok, ar.mul(value, value), 0))
                total = functools.reduce(ar.add, squares)
                flat = b.add(base, i, flags=("nsw",))
                scaled = ar.add(attrs.bias, ar.mul(attrs.alpha / attrs.size, total))
                denominator = ar.fn("pow", scaled, ar.const(attrs.beta))
                store_as(b, y, flat, ar.div(load_as(b, x, flat, ar.dtype), denominator), ar.dtype)
