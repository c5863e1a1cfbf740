"""Float 2-D convolutions of stride 1 whose output rows are as long as their input rows ("same" padding
along the row: ResNet's, VGG's, Inception's and SqueezeNet's 3x3 layers), computed over the flattened
plane rather than row by row, on x86-64 with AVX or AVX-512.

conv.py's row tiles cover each output row with whole vectors, so a row of 56, 28 or 14 positions under
16-lane vectors computes 64, 32 or 16 (12-14 % of the FMAs wasted; 27 of SqueezeNet's 32). Here output
position q = r*W + c of the plane reads input q + (kh*dh - ph)*W + (kw*dw - pw) for tap (kh, kw): one
offset per tap for the whole plane, so a register tile is any run of consecutive positions, crossing row
ends. The lanes whose tap falls off the row (column c + kw*dw - pw outside [0, W)) or off the plane (row
r + kh*dh - ph outside [0, H)) read zero: masked loads (AVX-512 zeroing masks, AVX VMASKMOVPS), with masks
computed once per tile from the lanes' (r, c) and kept across the input-channel loop. Tiles whose rows
all have every kh tap inside need only the column masks (a 3x3 kernel: two per vector); the few tiles at
the top and bottom of the plane also test rows. The plane's tail tile overlaps its neighbour (conv.py's
``cover``; a tail of one vector when that covers it). Each tile is as conv.py's: a block of output
channels x the tile's positions in registers, bias first, one broadcast weight per channel times one input
vector per tap, the fused epilogue before the store, and runs of channel blocks sharing each tile's inputs
(``WEIGHT_BUDGET``); each input channel's step asks the rows of the channel two ahead into L1
(``prefetch_rows``). Summing the input channels in chunks that keep a block's weights in L1, with partial
sums in Y, bought nothing (3x3 256@14 and 512@7 within 1 %): the tiles run at this CPU's FMA peak
(~255 GF/s on 56x56 and 28x28 planes), and what remains on small planes is the tail tile's idle lanes.

A Conv fused with a pooling (kernels/fused/conv_pool.py) that runs here stages a run of channels at a time
(``STAGE_BUDGET``: the staged outputs stay in L2) in its workspace and pools from there with the pooling's
own kernel (``emit_staged``): VGG's 3x3 + 2x2 max pool blocks reduced register tiles of rows of 32 instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS
from pegasus.exporters.glow.kernels.reference.conv import PREFETCH_CHANNELS, WEIGHT_BUDGET, Correlation, block_channels
from pegasus.exporters.glow.kernels.registry import Emitter
from pegasus.exporters.glow.llvm.copies import copy_strided, fill_strided
from pegasus.exporters.glow.llvm.loops import affine, const, for_range, loop_nest
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.planes import lane_masks, masked_load, tap_offsets, tile_lanes
from pegasus.exporters.glow.llvm.simd import Simd, prefetch_span
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.tiles import for_tiles
from pegasus.exporters.glow.llvm.types import Value
from pegasus.exporters.glow.llvm.windows import Axis, axes_of
from pegasus.ir.graph import Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv

#: taps unrolled in the input-channel loop at most (7x7); larger kernels stay row by row
MOST_TAPS = 49
#: output positions of a plane at most (64x64; ImageNet's 56x56 stages)
MOST_POSITIONS = 4096


def fits(cr, simd: Simd, num: Numeric, target) -> bool:
    """Whether Correlation ``cr`` (conv.py) runs over the flattened plane: x86-64 with AVX vectors
    (runtime lane masks are one instruction there), 2-D, stride 1, rows as long as the input's and not a
    whole number of tiles (those waste no lanes row by row, and 3x3 64@224 ran at 186 GF/s here, 235 row by
    row), a plain Conv's output placement, at most ``MOST_TAPS`` taps, and at most ``MOST_POSITIONS`` (on
    larger planes the row kernel wins, its rows of 112 ending in a tile of one vector (conv.py ``narrow_tail``):
    in VGG-19, alternated and timed in thread CPU time, 3x3 64->128@112 7.4 ms by rows, 9.8 here; 128@112 +
    2x2 max pool 15.6 ms by rows, 67 staged from here, whose stages of 8 channels read the 6.4 MB input 16
    times)."""
    if target.arch != "x86_64" or simd.width < 32 or len(cr.axes) != 2:
        return False
    height, width = cr.axes
    if width.out % tile_lanes(simd, num, height.out * width.out) == 0 or height.out * width.out > MOST_POSITIONS:
        return False
    return (all(a.stride == 1 for a in cr.axes) and width.size == width.out and not cr.y_steps and
            cr.y_offset == 0 and cr.w_offset == 0 and height.kernel * width.kernel <= MOST_TAPS and
            cr.x.strides[2:] == (width.size, 1) and cr.y.strides[2:] == (width.out, 1))


#: where a block's outputs go: local0 (the group's first channel of the block) -> (tensor, flat index of that
#: channel's position 0, flat step per channel)
Placement = Callable[[Value], tuple[TensorRef, Value, int]]


#: bytes of a tile's inputs over all its input channels that stay in L1 without prefetches (``prefetch_rows``)
L1_INPUTS = 32 * 1024


def prefetch_rows(b: ir.IRBuilder, cr, x_flat: Value, lanes: int) -> None:
    """The inputs the tile of ``lanes`` positions from ``x_flat`` (input channel ci's) will read at channel ci +
    ``PREFETCH_CHANNELS``, asked into L1: the tile reads every channel's plane, which the hardware prefetchers
    do not follow (hundreds of streams a plane apart). 3x3 256@56 in VGG-19, alternated: 15.3 -> 14.7 ms,
    512@14 4.15 -> 3.98, 512@28 14.9 -> 14.7 (under load; on a quieter machine about 1 %). Left without:
    pointwise and gathered (im2col) planes, one tap (not measured to gain), and tiles whose inputs over all
    their channels stay within ``L1_INPUTS`` (SqueezeNet's 3x3 expands on 16 to 64 channels lost 1 % with
    prefetches)."""
    height, width = cr.axes
    columns = [kw * width.dilation - width.pad for kw in range(width.kernel)]
    span = lanes + max(columns) - min(columns)
    if height.kernel * width.kernel == 1 or cr.in_group * height.kernel * span * cr.x.type.dtype.itemsize <= L1_INPUTS:
        return
    ahead = affine(b, PREFETCH_CHANNELS * cr.x.strides[1], (x_flat, 1))
    for kh in range(height.kernel):
        row = (kh * height.dilation - height.pad) * width.size
        prefetch_span(b, cr.x, ahead, row + min(columns), row + lanes - 1 + max(columns))


def _tile(num: Numeric, cr, batch: Value, group: Value, local0: Value, channels: int, first: Value, lanes: int,
          masks: dict, inside: bool, out: Placement) -> None:
    """Output channels local0:+channels of the group, positions first:+lanes of the plane, placed by
    ``out``: the bias, plus the sum over the group's input channels and taps, through the epilogue."""
    b = num.b
    plane = cr.x.strides[1]
    channel0 = affine(b, 0, (group, cr.out_group), (local0, 1))
    acc = Accumulators(num, channels, lanes)
    for j in range(channels):
        acc.set(j, num.load(cr.bias, affine(b, j, (channel0, 1)), lanes, 0) if cr.bias is not None
                else num.constant(0, lanes))
    ref, base, step = out(local0)
    y_flat = affine(b, 0, (base, 1), (first, 1))
    for j in range(channels):
        cr.epilogue.prefetch(num, affine(b, j * step, (y_flat, 1)), lanes)
    with for_range(b, cr.in_group, name="ci", unroll=len(tap_offsets(cr)) < 4) as ci:
        x_flat = affine(b, 0, (batch, cr.x.strides[0]), (group, cr.in_group * plane), (ci, plane), (first, 1))
        w_flat = affine(b, 0, (group, cr.w_group), (local0, cr.w_channel), (ci, cr.w_input))
        prefetch_rows(b, cr, x_flat, lanes)
        for kh, kw, offset in tap_offsets(cr):
            inputs = masked_load(num, cr.x, affine(b, offset, (x_flat, 1)), lanes, masks[kh, kw], inside)
            w_tap = affine(b, kh * cr.w_taps[0] + kw * cr.w_taps[1], (w_flat, 1))
            for j in range(channels):
                acc.mul_add(j, num.load(cr.w, affine(b, j * cr.w_channel, (w_tap, 1)), lanes, 0), inputs)
    for j in range(channels):
        flat = affine(b, j * step, (y_flat, 1))
        num.store(ref, flat, cr.epilogue(num, acc.get(j), flat))


def _runs(cr, total: int, lanes: int, tail: int) -> list[tuple[int, int, bool]]:
    """(first tile, tiles, inside) covering the plane's ``total`` positions in tiles of ``lanes``: whole
    tiles, then one static tail tile of ``tail`` lanes ending at the plane's end (-1 as its index).
    ``inside``: every tap of every lane reads within the input plane, so only the columns need masks (a
    lane whose column is inside then reads a row inside too)."""
    height, width = cr.axes
    offsets = [offset for _, _, offset in tap_offsets(cr)]
    size = height.size * width.size

    def inside(first: int, lanes: int = lanes) -> bool:
        return first + min(offsets) >= 0 and first + lanes - 1 + max(offsets) < size

    full = total // lanes
    inner = [t for t in range(full) if inside(t * lanes)]
    lo, hi = (inner[0], inner[-1] + 1) if inner else (full, full)
    runs = [(0, lo, False), (lo, hi - lo, True), (hi, full - hi, False)]
    runs = [run for run in runs if run[1] > 0]
    if total % lanes:
        runs.append((-1, 1, inside(total - tail, tail)))
    return runs


def plane_blocks(simd: Simd, num: Numeric, cr) -> tuple[int, int]:
    """(channels of a block, channels of a run): blocks fill the accumulator registers for a tile of
    ``tile_lanes``; a run holds the blocks whose weights fit ``WEIGHT_BUDGET`` (each tile's inputs are read
    from memory once per run)."""
    height, width = cr.axes
    block = block_channels(simd, num, cr.out_group, tile_lanes(simd, num, height.out * width.out))
    weights = block * cr.in_group * height.kernel * width.kernel * num.dtype.itemsize
    return block, min(cr.out_group, block * max(1, WEIGHT_BUDGET // max(1, weights)))


def plane_run(num: Numeric, cr, simd: Simd, batch: Value, group: Value, start: Value, count: int,
              out: Placement) -> None:
    """Output channels start:+count of the group (a run), placed by ``out``: the plane's tiles, each block
    of the run on each tile (blocks of ``plane_blocks``; the tail tile's of its own width)."""
    b = num.b
    height, width = cr.axes
    total = height.out * width.out
    lanes = tile_lanes(simd, num, total)
    vector = simd.lanes(num.compute)
    tail = min(lanes, max(vector, 1 << (total % lanes - 1).bit_length())) if total % lanes else lanes
    for first_tile, tiles, inside in _runs(cr, total, lanes, tail):
        def tile(first: Value, inside: bool = inside, lanes: int = lanes) -> None:
            masks = lane_masks(num, cr, first, lanes, not inside)
            for_tiles(b, 0, count, block_channels(simd, num, cr.out_group, lanes), lambda local, channels: _tile(
                num, cr, batch, group, affine(b, 0, (start, 1), (local, 1)), channels, first, lanes, masks, inside,
                out))

        if first_tile < 0:
            tile(const(total - tail), lanes=tail)
        elif tiles == 1:
            tile(const(first_tile * lanes))
        else:
            with for_range(b, tiles, name="tile") as t:
                tile(affine(b, first_tile * lanes, (t, lanes)))


def emit_plane(k: KernelContext, num: Numeric, cr, simd: Simd) -> None:
    """Loops over batch, group and runs of channel blocks (``plane_blocks``), each run over the plane."""
    b = k.builder
    _, run = plane_blocks(simd, num, cr)

    def into_y(batch: Value, group: Value) -> Placement:
        return lambda local0: (cr.y, affine(b, 0, (batch, cr.y.strides[0]), (group, cr.out_group * cr.y.strides[1]),
                                            (local0, cr.y.strides[1])), cr.y.strides[1])

    with loop_nest(b, [cr.x.shape[0], cr.group]) as (batch, group):
        for_tiles(b, 0, cr.out_group, run, lambda start, count: plane_run(
            num, cr, simd, batch, group, start, count, into_y(batch, group)))


# ----------------------------------------------------------------------------------------------------
# Pointwise and strided convolutions as 1 x P planes


def as_plane(cr):
    """A Correlation over one flattened axis of P positions (conv.py's pointwise ones) as a 1 x P plane."""
    (axis,) = cr.axes

    def view(ref: TensorRef) -> TensorRef:
        return TensorRef(ref.ptr, TensorType((*ref.shape[:2], 1, ref.shape[2]), ref.type.dtype))

    return replace(cr, x=view(cr.x), y=view(cr.y), axes=[Axis(1, 1, 1, 1, 1, 0), axis], w_taps=(0, *cr.w_taps))


def pointwise_fits(cr, simd: Simd, num: Numeric) -> bool:
    """Whether a pointwise Conv (``as_plane``) runs here rather than in conv.py's flattened tiles: on planes
    of four tiles or more (1x1 256->1024 on 14x14: 232 GF/s, 219 there; on 7x7, 171 against 188)."""
    return cr.axes[1].out >= 4 * tile_lanes(simd, num, cr.axes[1].out)


#: bytes of the gathered inputs (every tap of every input channel at every output position) a strided Conv
#: may take to run over the flattened plane
IM2COL_BUDGET = 4 << 20


def im2col_bytes(k: KernelContext, simd: Simd) -> int:
    """Workspace of a strided 2-D float Conv of one group on x86-64 with AVX whose output rows are not whole
    tiles (ResNet-50's 3x3 stride 2 onto 28, 14 and 7 positions ran at 145, 120 and 90 GF/s by rows): the
    inputs of every tap gathered as a (C * taps) x P matrix, when within ``IM2COL_BUDGET`` (0: not so)."""
    x, w = k.inputs[0], k.inputs[1]
    if (k.attrs.channels_last or k.target.arch != "x86_64" or simd.width < 32 or x.type.dtype not in FLOATS
            or len(x.shape) != 4 or k.attrs.group != 1):
        return 0
    win = Conv.geometry(k.attrs, x.shape, w.shape)
    positions = win.out[0] * win.out[1]
    if all(s == 1 for s in win.strides) or all(size == 1 for size in win.kernel) or \
            win.out[1] % tile_lanes(simd, Numeric(None, x.type.dtype), positions) == 0:
        return 0
    size = x.shape[0] * x.shape[1] * math.prod(win.kernel) * positions * x.type.dtype.itemsize
    return size if size <= IM2COL_BUDGET else 0


def im2col_correlation(k: KernelContext, epilogue, win, simd: Simd):
    """Gathers Z[n, c*taps + tap, p] = X[n, c, tap's input of output position p] (0 in the padding) into the
    workspace, and returns the 1 x P pointwise Correlation of Z with W seen as (M, C*taps) (its own layout)."""
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    z = gather_taps(k.builder, k.scratch(x.element, im2col_bytes(k, simd)), x, win)
    positions = z.shape[-1]
    flat_y = TensorRef(y.ptr, TensorType((*y.shape[:2], 1, positions), y.type.dtype))
    return Correlation(z, w, bias, flat_y, [Axis(1, 1, 1, 1, 1, 0), Axis(positions, positions, 1, 1, 1, 0)], 1,
                       w.strides[0], 1, 0, (0, 0), epilogue=epilogue)


def gather_taps(b: ir.IRBuilder, pointer: ir.Value, x: TensorRef, win) -> TensorRef:
    """Z[n, c*taps + tap, 0, p] = X[n, c, tap's input of output position p] (0 in the padding), written at
    ``pointer`` (N * C * taps * P elements)."""
    (kh, kw), (out_h, out_w), taps = win.kernel, win.out, math.prod(win.kernel)
    n, channels, height, width = x.shape
    positions = out_h * out_w
    z = TensorRef(pointer, TensorType((n, channels * taps, 1, positions), x.type.dtype))
    zero = ir.Constant(x.element, 0.0)
    rows, columns = axes_of(win, x.shape[2:])
    z_strides = (z.strides[0], taps * positions, out_w, 1)
    for i, j in itertools.product(range(kh), range(kw)):
        (h0, h1), (w0, w1) = _inside(rows, i), _inside(columns, j)
        base = (i * kw + j) * positions
        for r0, r1, c0, c1 in ((0, h0, 0, out_w), (h1, out_h, 0, out_w), (h0, h1, 0, w0), (h0, h1, w1, out_w)):
            fill_strided(b, z, zero, (n, channels, r1 - r0, c1 - c0), z_strides, base + r0 * out_w + c0)
        if h1 > h0 and w1 > w0:
            copy_strided(b, z, x, (n, channels, h1 - h0, w1 - w0), z_strides,
                         (*x.strides[:2], rows.stride * width, columns.stride),
                         dst_base=base + h0 * out_w + w0,
                         src_base=(h0 * rows.stride - rows.pad + i * rows.dilation) * width
                         + w0 * columns.stride - columns.pad + j * columns.dilation)
    return z


def _inside(axis: Axis, tap: int) -> tuple[int, int]:
    """[first, end) of the outputs whose tap ``tap`` reads inside the input along ``axis``."""
    shift = tap * axis.dilation - axis.pad
    first = min(axis.out, max(0, -(shift // axis.stride)))
    return first, max(first, min(axis.out, (axis.size - 1 - shift) // axis.stride + 1))


# ----------------------------------------------------------------------------------------------------
# Staged pooling


#: bytes of convolution outputs a Conv fused with its pooling stages at most (a run of channels at a time)
STAGE_BUDGET = 256 * 1024


def stage_channels(simd: Simd, num: Numeric, cr) -> int:
    """Channels a fused pooling stages at a time: a run (``plane_blocks``), fewer (whole blocks) when their
    outputs would pass ``STAGE_BUDGET``."""
    block, run = plane_blocks(simd, num, cr)
    plane = cr.axes[0].out * cr.axes[1].out * num.dtype.itemsize
    return min(run, max(block, STAGE_BUDGET // plane // block * block))


def stage_bytes(simd: Simd, num: Numeric, cr) -> int:
    return stage_channels(simd, num, cr) * cr.axes[0].out * cr.axes[1].out * num.dtype.itemsize


def emit_staged(k: KernelContext, num: Numeric, cr, simd: Simd, pool: Node, pool_emitter: Emitter) -> None:
    """A Conv fused with the pooling ``pool`` (kernels/fused/conv_pool.py): per run of channels, the plane's tiles
    through the epilogue into the workspace, then ``pool_emitter`` (the pooling's own) from there into those
    channels of Y (``cr.y``, the pooled output)."""
    b = k.builder
    height, width = cr.axes
    total, y = height.out * width.out, cr.y
    stage_ptr = k.scratch(cr.x.element, stage_bytes(simd, num, cr))

    def stage_run(batch: Value, group: Value, start: Value, count: int) -> None:
        stage = TensorRef(stage_ptr, TensorType((1, count, height.out, width.out), cr.x.type.dtype))
        plane_run(num, cr, simd, batch, group, start, count,
                  lambda local0: (stage, affine(b, 0, (local0, total), (start, -total)), total))
        channel0 = affine(b, 0, (group, cr.out_group), (start, 1))
        first = b.gep(y.ptr, [affine(b, 0, (batch, y.strides[0]), (channel0, y.strides[1]))], inbounds=True)
        pooled = TensorRef(first, TensorType((1, count, *y.shape[2:]), y.type.dtype))
        pool_emitter(KernelContext(pool, pool.attrs, b, [stage], [pooled], k.math, k.target))

    with loop_nest(b, [cr.x.shape[0], cr.group]) as (batch, group):
        for_tiles(b, 0, cr.out_group, stage_channels(simd, num, cr),
                  lambda start, count: stage_run(batch, group, start, count))
