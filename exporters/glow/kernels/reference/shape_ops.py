"""Emitters for the data-movement ops (pegasus/ops/shape_ops.py), on the copy loops of llvm/copies.py.

Data movement does no arithmetic, so every emitter here works on raw elements: a tensor is viewed as
integers of its element's width (``raw``) and copied bit for bit. One emitter then serves every dtype
(float32, float16, int64, int32, int8, uint8, bool...), and no float register ever touches the
values (an x87 load would quieten a signalling NaN).

Three loop shapes cover the family, all with constant trip counts:

- ``copy_strided``: dst[base + Σ i·dst_stride] = src[base + Σ i·src_stride] over a box. Transpose,
  Expand, Tile, Concat, Split, Slice (negative steps are negative strides), DepthToSpace and
  SpaceToDepth are each one or a few such boxes; dimensions that both sides walk contiguously are
  merged, so a Concat along channels is one contiguous copy per batch.
- ``gather_axes``: dst[o] = src[map_0[o_0], map_1[o_1], ...] with the per-axis index maps computed in
  Python and baked into the bundle as constant tables (-1 = outside: a fill value). Pad (every mode)
  and nearest Resize use it.
- ``store_array``: an output known at compile time (ConstantOfShape, Range, Shape, Size: they fold at
  import, but still have emitters): a fill loop, or a copy from a constant table.

Reshape, Flatten, Squeeze and Unsqueeze are ``alias`` ops: the memory planner usually gives the
output the input's bytes; when it cannot (graph input to graph output, constant input) the two
pointers differ and the emitter copies — decided by one pointer compare at run time.

Gather's indices are a tensor (constant or computed): negative indices count from the end, and an
index still out of range is clamped (the reference raises; a bundle must not read outside a tensor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.registry import emitter
from pegasus.exporters.glow.llvm.copies import (
    copy_all,
    copy_strided,
    fill,
    gather_axes,
    raw,
    raw_constant,
)
from pegasus.exporters.glow.llvm.lanes import broadcast_strides, vector_lanes
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.scalar import Arith
from pegasus.exporters.glow.llvm.tables import constant_table, table_load
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.ops.common import normalize_axis
from pegasus.ops.registry import get_op
from pegasus.ops.shape_ops import resolve_slice

I32 = ir.IntType(32)

# ---- raw elements and constant tables -------------------------------------------------------------


# ---- the three loop shapes -----------------------------------------------------------------------


def store_array(b: ir.IRBuilder, dst: TensorRef, array: np.ndarray) -> None:
    """dst = a value known at compile time: one fill loop when every element is equal, else a copy
    from a constant table."""
    dtype = dst.type.dtype
    bits = np.asarray(array).astype(dtype.numpy).reshape(-1).view(f"int{8 * dtype.itemsize}")
    if bits.size == 0:
        return
    if (bits == bits[0]).all():
        fill(b, dst, ir.Constant(ir.IntType(8 * dtype.itemsize), int(bits[0])))
        return
    table = constant_table(b.module, bits)
    d = raw(b, dst)
    with for_range(b, bits.size) as i:
        d.store(b, table_load(b, table, i), i)


# ---- alias ops --------------------------------------------------------------------------------------


@emitter("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def alias(k: KernelContext) -> None:
    """Nothing when the planner gave the output the input's bytes; a flat copy when it could not."""
    b, x, y = k.builder, k.inputs[0], k.outputs[0]
    with b.if_then(b.icmp_unsigned("!=", x.ptr, y.ptr), likely=False):
        copy_all(b, y, x)


# ---- rearranging copies ------------------------------------------------------------------------------


def permuted_copy(b: ir.IRBuilder, dst: TensorRef, src: TensorRef, shape: Sequence[int], perm: Sequence[int]):
    """dst = transpose(src viewed with ``shape``, perm), written contiguously."""
    src_strides = strides_of(tuple(shape))
    moved = tuple(shape[p] for p in perm)
    copy_strided(b, dst, src, moved, strides_of(moved), [src_strides[p] for p in perm])


@emitter("Transpose")
def transpose(k: KernelContext) -> None:
    x = k.inputs[0]
    perm = k.attrs.perm or tuple(reversed(range(len(x.shape))))
    permuted_copy(k.builder, k.outputs[0], x, x.shape, perm)


@emitter("DepthToSpace", "SpaceToDepth")
def block_move(k: KernelContext) -> None:
    """The op's own plan: a reshape, a transpose and a reshape, i.e. one permuted copy."""
    split, perm, _ = get_op(k.node.op).plan(k.attrs, k.inputs[0].shape)
    permuted_copy(k.builder, k.outputs[0], k.inputs[0], split, perm)


@emitter("Expand")
def expand(k: KernelContext) -> None:
    x, y = k.inputs[0], k.outputs[0]
    copy_strided(k.builder, y, x, y.shape, y.strides, broadcast_strides(y.shape, x.shape))


@emitter("Tile")
def tile(k: KernelContext) -> None:
    """Output axis a split into (repeat, a): the repeat walks the output only."""
    x, y = k.inputs[0], k.outputs[0]
    repeats = k.attrs.repeats or (1,) * len(x.shape)
    shape, dst_strides, src_strides = [], [], []
    for r, d, out_stride, in_stride in zip(repeats, x.shape, y.strides, x.strides):
        shape += [r, d]
        dst_strides += [d * out_stride, out_stride]
        src_strides += [0, in_stride]
    copy_strided(k.builder, y, x, shape, dst_strides, src_strides)


@emitter("Concat")
def concat(k: KernelContext) -> None:
    """Each input copied to its place in the output, unless the planner put it there already (memory/plan.py,
    Concat by construction): one pointer compare at run time per input."""
    b, y = k.builder, k.outputs[0]
    axis = normalize_axis(k.attrs.axis, len(y.shape))
    position = 0
    lanes = vector_lanes(k.target, llvm_type(y.type.dtype))
    for x in k.inputs:
        base = position * y.strides[axis]
        with b.if_then(b.icmp_unsigned("!=", x.ptr, y.address(b, base)), likely=False):
            copy_strided(b, y, x, x.shape, y.strides, x.strides, dst_base=base, lanes=lanes)
        position += x.shape[axis]


@emitter("Split")
def split(k: KernelContext) -> None:
    x = k.inputs[0]
    axis = normalize_axis(k.attrs.axis, len(x.shape))
    position = 0
    for y, size in zip(k.outputs, k.attrs.split):
        if y is not None:
            copy_strided(k.builder, y, x, y.shape, y.strides, x.strides, src_base=position * x.strides[axis])
        position += size


@emitter("Slice")
def slice_(k: KernelContext) -> None:
    x, y = k.inputs[0], k.outputs[0]
    starts, _, steps = resolve_slice(x.shape, k.attrs.starts, k.attrs.ends, k.attrs.axes, k.attrs.steps)
    copy_strided(k.builder, y, x, y.shape, y.strides, [step * s for step, s in zip(steps, x.strides)],
                 src_base=sum(start * s for start, s in zip(starts, x.strides)))


def pad_maps(attrs, shape: Sequence[int]) -> list[np.ndarray | None]:
    """Per-axis source index of every output position (-1: the constant), by the reference's own rule:
    crop, then ``np.pad`` — applied to the indices ``arange(dim)`` (every mode pads axes independently)."""
    rank = len(shape)
    pads = attrs.pads or (0,) * (2 * rank)
    maps: list[np.ndarray | None] = []
    for dim, begin, end in zip(shape, pads[:rank], pads[rank:]):
        if begin == end == 0:
            maps.append(None)
            continue
        kept = np.arange(dim)[max(-begin, 0):dim - max(-end, 0)]
        widths = (max(begin, 0), max(end, 0))
        if attrs.mode == "constant":
            maps.append(np.pad(kept, widths, mode="constant", constant_values=-1))
        else:
            maps.append(np.pad(kept, widths, mode=attrs.mode))
    return maps


@emitter("Pad")
def pad(k: KernelContext) -> None:
    x, y = k.inputs[0], k.outputs[0]
    value = raw_constant(x.type.dtype, k.attrs.constant_value) if k.attrs.mode == "constant" else None
    gather_axes(k.builder, y, x, pad_maps(k.attrs, x.shape), value)


# ---- Gather --------------------------------------------------------------------------------------------


def _source_index(b: ir.IRBuilder, indices: TensorRef, flat: ir.Value, dim: int) -> ir.Value:
    """indices[flat] with a negative index counted from the end and clamped into [0, dim): i32."""
    ar = Arith(b, indices.type.dtype)
    index = indices.load(b, flat)
    index = ar.select(ar.cmp("<", index, 0), ar.add(index, dim), index)
    index = ar.min(ar.max(index, 0), dim - 1)
    return b.trunc(index, I32) if index.type.width > 32 else index


@emitter("Gather")
def gather(k: KernelContext) -> None:
    """y[o, j, i] = data[o, indices[j], i] over (outer, indices, inner) blocks of the data."""
    b, (data, indices), y = k.builder, k.inputs, k.outputs[0]
    axis = normalize_axis(k.attrs.axis, len(data.shape))
    outer, dim, inner = math.prod(data.shape[:axis]), data.shape[axis], math.prod(data.shape[axis + 1:])
    count = indices.type.size
    if dim == 0 or y.type.size == 0:
        return
    d, s = raw(b, y), raw(b, data)
    with loop_nest(b, (outer, count)) as (o, j):
        source = b.add(b.mul(o, const(dim * inner)), b.mul(_source_index(b, indices, j, dim), const(inner)))
        target = b.mul(b.add(b.mul(o, const(count)), j), const(inner))
        with for_range(b, inner, name="c") as c:
            d.store(b, s.load(b, b.add(source, c)), b.add(target, c))


# ---- ops folded at import ------------------------------------------------------------------------------


@emitter("ConstantOfShape", "Range", "Shape", "Size")
def known_value(k: KernelContext) -> None:
    """The op's reference evaluated at compile time (these read attributes and shapes, never values)."""
    shapes_only = [np.broadcast_to(np.zeros((), x.type.dtype.numpy), x.shape) for x in k.inputs if x is not None]
    value = get_op(k.node.op).reference(k.attrs, shapes_only)[0]
    store_array(k.builder, k.outputs[0], value)
