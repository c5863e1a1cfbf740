"""Register tiles over a flattened 2-D plane (the x86 "plane" kernels, conv_plane.py and pool_plane.py): how many
positions a tile takes, each tap's flat offset, the per-tap lane masks of positions whose input lies inside, and
loads of the lanes under a mask."""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import const
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.simd import Simd, masked_intrinsic, vconst
from pegasus.exporters.glow.llvm.tiles import power_of_two_below
from pegasus.exporters.glow.llvm.types import I32, Value


def tile_lanes(simd: Simd, num: Numeric, total: int) -> int:
    """Positions of a register tile: two vectors (or the power of two below a smaller plane)."""
    return min(2 * simd.lanes(num.compute), power_of_two_below(total))


def tap_offsets(cr) -> list[tuple[int, int, int]]:
    """(kh, kw, flat input offset) of every tap."""
    height, width = cr.axes
    return [(kh, kw, (kh * height.dilation - height.pad) * width.size + kw * width.dilation - width.pad)
            for kh in range(height.kernel) for kw in range(width.kernel)]


def lane_masks(num: Numeric, cr, first: Value, lanes: int, rows: bool) -> dict[tuple[int, int], Value | None]:
    """Per tap, the <lanes x i1> mask of the tile's lanes whose input lies inside (None: all of them,
    statically). Column masks always; row masks only when ``rows``."""
    b = num.b
    height, width = cr.axes
    vector = ir.VectorType(I32, lanes)
    start = b.insert_element(ir.Constant(vector, None), first, const(0))
    position = b.add(b.shuffle_vector(start, start, vconst([0] * lanes)), vconst(list(range(lanes))))
    row, column = b.udiv(position, vconst([width.size] * lanes)), b.urem(position, vconst([width.size] * lanes))

    def inside(index: Value, shift: int, size: int) -> Value:
        return b.icmp_unsigned("<", b.add(index, vconst([shift] * lanes)), vconst([size] * lanes))

    columns = {kw: None if kw * width.dilation == width.pad else
               inside(column, kw * width.dilation - width.pad, width.size) for kw in range(width.kernel)}
    masks = {}
    for kh in range(height.kernel):
        row_mask = inside(row, kh * height.dilation - height.pad, height.size) if rows else None
        for kw in range(width.kernel):
            parts = [m for m in (row_mask, columns[kw]) if m is not None]
            masks[kh, kw] = None if not parts else parts[0] if len(parts) == 1 else b.and_(*parts)
    return masks


def masked_load(num: Numeric, ref, flat: Value, lanes: int, mask: Value | None, inside: bool,
          fill: Value | None = None) -> Value:
    """``lanes`` consecutive elements of ``ref`` from ``flat``, the lanes off ``mask`` ``fill`` (default 0).
    ``inside``: every lane lies in the tensor, so a plain load and a select (LLVM may still fold the pair
    into a masked load); else a masked load, whose lanes off the mask are not read."""
    if mask is None:
        return num.load(ref, flat, lanes)
    b = num.b
    if inside:
        return b.select(mask, num.load(ref, flat, lanes), num.constant(0, lanes) if fill is None else fill)
    vector = ir.VectorType(num.storage, lanes)
    pointer = b.bitcast(b.gep(ref.ptr, [flat]), vector.as_pointer())     # not inbounds: may start outside
    value = num._widen(b.call(masked_intrinsic(b.module, "load", vector),
                              [pointer, const(num.dtype.itemsize), mask, ir.Constant(vector, None)]))
    return value if fill is None else b.select(mask, value, fill)
