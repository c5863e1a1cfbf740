"""Copies that do no arithmetic, on raw elements (a tensor viewed as integers of its element's width, so one loop
serves every dtype and no float register touches the values): ``copy_strided`` (a box of one tensor into a box of
another), ``fill_strided``/``fill``, ``copy_all``, and ``gather_axes`` (per-axis index maps baked in as tables)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.llvm.lanes import lane_loop, load_lanes, store_lanes
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.llvm.tables import constant_table, table_load
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.ir.dtypes import DType


def raw(b: ir.IRBuilder, ref: TensorRef) -> TensorRef:
    """``ref`` viewed as integers of its element's width (same shape, same bytes)."""
    bits = ir.IntType(8 * ref.type.dtype.itemsize)
    return ref if ref.ptr.type.pointee == bits else TensorRef(b.bitcast(ref.ptr, bits.as_pointer()), ref.type)


def raw_constant(dtype: DType, value) -> ir.Constant:
    """``value`` converted to ``dtype`` (NumPy astype) as an integer constant holding its bits."""
    bits = np.asarray(value).astype(dtype.numpy).view(f"int{8 * dtype.itemsize}")
    return ir.Constant(ir.IntType(8 * dtype.itemsize), int(bits))


def copy_strided(b: ir.IRBuilder, dst: TensorRef, src: TensorRef, shape: Sequence[int],
                 dst_strides: Sequence[int], src_strides: Sequence[int], dst_base: int = 0,
                 src_base: int = 0, lanes: int = 1) -> None:
    """dst[dst_base + Σ i·dst_strides] = src[src_base + Σ i·src_strides] for every i in ``shape``; ``lanes`` > 1
    copies the contiguous innermost runs in vectors of that many elements (binary.py ``lane_loop``)."""
    if math.prod(shape) == 0:
        return
    d, s = raw(b, dst), raw(b, src)

    def body(flats: list[ir.Value], width: int) -> None:
        out, inp = flats
        store_lanes(b, d, out, load_lanes(b, s, inp, width, 1))

    lane_loop(b, shape, [dst_strides, src_strides], lanes, body, [const(dst_base), const(src_base)])


def fill_strided(b: ir.IRBuilder, dst: TensorRef, value: ir.Constant, shape: Sequence[int], strides: Sequence[int],
                 base: int = 0) -> None:
    """dst[base + Σ i·strides] = value for every i in ``shape`` (a region of dst: a padding border, a run of
    columns), element by element; nothing for an empty one."""
    if any(size <= 0 for size in shape):
        return
    lane_loop(b, shape, [strides], 1, lambda flats, _: dst.store(b, value, flats[0]), [const(base)])


def copy_all(b: ir.IRBuilder, dst: TensorRef, src: TensorRef) -> None:
    """dst = src element by element (same number of elements, any shapes)."""
    copy_strided(b, dst, src, (dst.type.size,), (1,), (1,))


def fill(b: ir.IRBuilder, dst: TensorRef, value: ir.Constant) -> None:
    """Every element of dst = value (a raw constant of dst's element width)."""
    d = raw(b, dst)
    with for_range(b, dst.type.size) as i:
        d.store(b, value, i)


def gather_axes(b: ir.IRBuilder, dst: TensorRef, src: TensorRef, maps: Sequence[np.ndarray | None],
                outside: ir.Constant | None = None) -> None:
    """dst[o] = src[maps[0][o_0], maps[1][o_1], ...]: per-axis source indices (None = the identity),
    baked as constant tables; index -1 marks a position outside src, which gets ``outside`` (raw)."""
    if src.type.size == 0:
        if dst.type.size and outside is not None:
            fill(b, dst, outside)
        return
    d, s = raw(b, dst), raw(b, src)
    tables = [None if m is None else constant_table(b.module, np.where(m < 0, -1, m * stride).astype(np.int32))
              for m, stride in zip(maps, s.strides)]
    with loop_nest(b, dst.shape) as index:
        offset, inside = const(0), None
        for i, stride, table, m in zip(index, s.strides, tables, maps):
            if table is None:
                term = b.mul(i, const(stride), flags=("nsw",))
            else:
                term = table_load(b, table, i)
                if outside is not None and (m < 0).any():
                    ok = b.icmp_signed(">=", term, const(0))
                    inside = ok if inside is None else b.and_(inside, ok)
                    term = b.select(ok, term, const(0))
            offset = b.add(offset, term, flags=("nsw",))
        value = s.load(b, offset)
        d.store(b, value if inside is None else b.select(inside, value, outside), d.flat(b, index))
