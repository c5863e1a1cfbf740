"""Float MaxPool and AveragePool of stride 1 whose output rows are as long as their input rows (Inception's
3x3 pad-1 pools beside the convolutions of a block) over the flattened plane, on x86-64 with AVX.

pool.py sweeps each row in vector tiles of interior positions and visits the positions next to the padding
one at a time, so a 7- or 14-wide row is mostly scalar work (MaxPool 3x3 on 1024x7x7: 225 us, onnxruntime
23 us). Here, as in conv_plane.py, a tile is any run of consecutive positions of the plane, each tap one
vector load at a fixed offset, the lanes whose tap falls outside the input masked (conv_plane ``lane_masks``):
-inf for a max (it never wins; NaN still propagates, first NaN first, as pool.py's), 0 for a sum. An
average multiplies by a constant table of 1 / (taps inside the input) per position (float16 storage: divides
by the count of the same masks), or with count_include_pad divides by the kernel's size (stride 1 without
ceil_mode overrun: every window lies inside the explicit padding).

MaxPool with a row stride of 2 or more (Inception's 3x3 stride-2 pools between blocks, the 2x2 ones of VGG)
has its own kernel here, ``emit_strided_max``: pool.py's strided tiles on 7- to 28-wide rows ran at a third
of onnxruntime's speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.planes import lane_masks, masked_load, tap_offsets, tile_lanes
from pegasus.exporters.glow.llvm.simd import Simd, vconst
from pegasus.exporters.glow.llvm.tables import constant_table
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import cover
from pegasus.exporters.glow.llvm.types import BIT, I32, Value
from pegasus.exporters.glow.llvm.windows import Axis, axes_of
from pegasus.ir.tensor import TensorType


def fits(k: KernelContext, axes, simd: Simd) -> bool:
    """x86-64 with AVX, a float channels-first 2-D pooling of stride 1, output rows as long as the input's,
    one output (no Indices)."""
    x, y = k.inputs[0], k.outputs[0]
    if k.target.arch != "x86_64" or simd.width < 32 or x.type.dtype not in FLOATS or len(axes) != 2:
        return False
    height, width = axes
    return (len([ref for ref in k.outputs if ref is not None]) == 1 and all(a.stride == 1 for a in axes)
            and width.size == width.out and x.strides[2:] == (width.size, 1) and y.strides[2:] == (width.out, 1)
            and height.out * width.out >= simd.lanes(ir.FloatType()))


def _reciprocals(b, num: Numeric, axes) -> TensorRef | None:
    """1 / (taps inside the input) of every output position of the plane, as a constant table of the
    compute type (the same for every plane: one multiply a tile instead of counting the masks and
    dividing); None when the storage type is narrower (float16: the table would be rounded)."""
    if num.storage != num.compute:
        return None
    counts = [np.array([sum(0 <= o - a.pad + t * a.dilation < a.size for t in range(a.kernel)) for o in range(a.out)])
              for a in axes]
    values = (1.0 / np.multiply.outer(counts[0], counts[1])).astype(num.dtype.numpy)
    table = constant_table(b.module, values)
    return TensorRef(b.bitcast(table, num.storage.as_pointer()), TensorType((values.size,), num.dtype))


def emit(k: KernelContext, geometry, simd: Simd, average: bool, include_pads: bool = False) -> bool:
    """The pooling over every (n, c) plane in tiles of the flattened plane; False (nothing emitted) when it
    does not ``fits``."""
    x, y = k.inputs[0], k.outputs[0]
    axes = axes_of(geometry(k.attrs, x.shape), x.shape[2:])
    if not fits(k, axes, simd):
        return False
    b = k.builder
    num = Numeric(b, x.type.dtype)
    height, width = axes
    total = height.out * width.out
    lanes = tile_lanes(simd, num, total)
    shape = SimpleNamespace(axes=axes)

    reciprocals = _reciprocals(b, num, axes) if average and not include_pads else None

    def tile(first, lanes: int) -> None:
        fill = num.constant(0, lanes) if average else num.lowest(lanes)
        masks = lane_masks(num, shape, first, lanes, True)
        x_flat = affine(b, 0, (plane, x.strides[1]), (first, 1))
        value, count = None, None
        for kh, kw, offset in tap_offsets(shape):
            mask = masks[kh, kw]
            tap = masked_load(num, x, affine(b, offset, (x_flat, 1)), lanes, mask, False, fill)
            if average:
                value = tap if value is None else num.add(value, tap)
                if not include_pads and reciprocals is None:
                    one = num.constant(1, lanes) if mask is None else b.select(mask, num.constant(1, lanes), fill)
                    count = one if count is None else num.add(count, one)
            else:
                value = tap if value is None else num.maximum(tap, value)
        if reciprocals is not None:
            value = num.mul(value, num.load(reciprocals, first, lanes))
        elif average:
            value = num.div(value, count if count is not None else
                            num.constant(math.prod(a.kernel for a in axes), lanes))
        num.store(y, affine(b, 0, (plane, y.strides[1]), (first, 1)), value)

    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        cover(b, 0, total, lanes, tile)
    return True


def _covered(axis) -> bool:
    """Every window of ``axis`` holds at least one input position."""
    return all(any(0 <= o * axis.stride - axis.pad + t < axis.size for t in range(axis.kernel))
               for o in range(axis.out))


def strided_fits(k: KernelContext, axes, simd: Simd) -> bool:
    """x86-64 with AVX, a float channels-first 2-D max pooling of stride 2 or more along the rows, no
    dilation, every window holding an input position, one output (no Indices)."""
    x, y = k.inputs[0], k.outputs[0]
    if k.target.arch != "x86_64" or simd.width < 32 or x.type.dtype not in FLOATS or len(axes) != 2:
        return False
    height, width = axes
    return (len([ref for ref in k.outputs if ref is not None]) == 1 and width.stride >= 2
            and all(a.dilation == 1 and _covered(a) for a in axes)
            and x.strides[2:] == (width.size, 1) and y.strides[2:] == (width.out, 1))


@dataclass
class _StridedMax:
    """One strided MaxPool layer (``emit_strided_max``): ``lanes`` outputs of one output row a tile, whose
    windows' columns are read as runs of ``span`` = stride * lanes inputs (``fill`` off the input)."""

    b: ir.IRBuilder
    num: Numeric
    x: TensorRef
    y: TensorRef
    height: Axis
    width: Axis
    lanes: int
    fill: Value

    @property
    def span(self) -> int:
        return self.width.stride * self.lanes

    def column_mask(self, base, count: int):
        b = self.b
        start = b.insert_element(ir.Constant(ir.VectorType(I32, count), None), base, const(0))
        columns = b.add(b.shuffle_vector(start, start, vconst([0] * count)), vconst(list(range(count))))
        return b.icmp_unsigned("<", columns, vconst([self.width.size] * count))

    def window_rows(self, row, visit) -> None:
        """visit(flat index of input row ih of the plane, kh) for each row the output row's windows span,
        clamped into the input."""
        b, height = self.b, self.height
        for kh in range(height.kernel):
            ih = affine(b, kh - height.pad, (row, height.stride))
            ih = b.select(b.icmp_signed("<", ih, const(0)), const(0), ih)
            ih = b.select(b.icmp_signed(">", ih, const(height.size - 1)), const(height.size - 1), ih)
            visit(ih)

    def tile(self, first, count: int, plane) -> None:
        if self.width.kernel <= 2 * self.width.stride:
            self.shifted_tile(first, count, plane)
            return
        b, num, x, width, s, lanes = self.b, self.num, self.x, self.width, self.width.stride, self.lanes
        runs = -(-width.kernel // s)
        masks = []
        for q in range(runs):
            base = affine(b, q * s - width.pad, (first, s))
            masks.append((base, self.column_mask(base, self.span)))
        with for_range(b, self.height.out, name="orow") as row:
            best = [None] * runs

            def visit(ih) -> None:
                for q, (base, mask) in enumerate(masks):
                    flat = affine(b, 0, (plane, x.strides[1]), (ih, width.size), (base, 1))
                    value = masked_load(num, x, flat, self.span, mask, False, self.fill)
                    best[q] = value if best[q] is None else num.maximum(value, best[q])

            self.window_rows(row, visit)
            result = None
            for q in range(runs):
                for r in range(min(s, width.kernel - q * s)):
                    tap = b.shuffle_vector(best[q], best[q], vconst([r + s * j for j in range(lanes)]))
                    result = tap if result is None else num.maximum(tap, result)
            num.store(self.y, affine(b, 0, (plane, self.y.strides[1]), (row, width.out), (first, 1)), result,
                      None if count == lanes else count)

    def shifted_tile(self, first, count: int, plane) -> None:
        """A window no wider than two strides: the run of s*L columns from the first window's start (the max
        over the window's rows) gives taps 0..s-1 as its lanes r, r+s, ...; tap s + r is tap r one output on,
        its last lane from the k - s columns after the run (a vector load of its own)."""
        b, num, x, width, s, lanes = self.b, self.num, self.x, self.width, self.width.stride, self.lanes
        base = affine(b, -width.pad, (first, s))
        after = affine(b, s * lanes - width.pad, (first, s))
        mask = self.column_mask(base, self.span)
        extra = b.and_(self.column_mask(after, lanes),
                       vconst([lane < width.kernel - s for lane in range(lanes)], BIT))
        lowest = num.lowest(lanes)
        with for_range(b, self.height.out, name="orow") as row:
            best = []

            def visit(ih) -> None:
                row_flat = affine(b, 0, (plane, x.strides[1]), (ih, width.size))
                run = masked_load(num, x, affine(b, 0, (row_flat, 1), (base, 1)), self.span, mask, False, self.fill)
                values = [run]
                if width.kernel > s:
                    after_flat = affine(b, 0, (row_flat, 1), (after, 1))
                    values.append(masked_load(num, x, after_flat, lanes, extra, False, lowest))
                best[:] = values if not best else [num.maximum(value, old) for value, old in zip(values, best)]

            self.window_rows(row, visit)
            taps = [b.shuffle_vector(best[0], best[0], vconst([r + s * j for j in range(lanes)]))
                    for r in range(min(s, width.kernel))]
            taps += [b.shuffle_vector(taps[r], best[1], vconst([*range(1, lanes), lanes + r]))
                     for r in range(width.kernel - s)]
            result = taps[0]
            for tap in taps[1:]:
                result = num.maximum(tap, result)
            num.store(self.y, affine(b, 0, (plane, self.y.strides[1]), (row, width.out), (first, 1)), result,
                      None if count == lanes else count)


def emit_strided_max(k: KernelContext, geometry, simd: Simd) -> bool:
    """MaxPool with a row stride s >= 2 over every (n, c) plane: a tile of L outputs of one output row reads
    its window's columns as runs of s*L consecutive inputs, each the max over the window's rows, then tap
    q*s + r is lanes r, r+s, ... of run q (a shuffle). A window no wider than 2s (3x3 stride 2) reads one run
    and the k - s columns after it (``shifted_tile``: 9 loads a tile instead of 12; 64x112x112 onto 56x56
    105 -> 89 us, 256x27x27 onto 13x13 21 -> 15); wider ones ceil(k / s) runs from column s*q. The rows are
    clamped into the input (a repeated row changes no max) and the columns outside it masked to -inf; False
    (nothing emitted) when it does not ``strided_fits``."""
    x, y = k.inputs[0], k.outputs[0]
    axes = axes_of(geometry(k.attrs, x.shape), x.shape[2:])
    if not strided_fits(k, axes, simd):
        return False
    b = k.builder
    num = Numeric(b, x.type.dtype)
    height, width = axes
    lanes = min(simd.lanes(num.compute), 1 << max(0, (width.out - 1).bit_length()))
    pool = _StridedMax(b, num, x, y, height, width, lanes, num.lowest(width.stride * lanes))
    with for_range(b, x.shape[0] * x.shape[1], name="plane") as plane:
        if width.out <= lanes:
            pool.tile(0, width.out, plane)
        else:
            cover(b, 0, width.out, lanes, lambda first, size: pool.tile(first, size, plane))
    return True
