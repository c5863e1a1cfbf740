"""Float convolutions on small channels-first planes with the output channels in the vector lanes, on
x86-64 with AVX or AVX-512.

conv.py and conv_plane.py put output positions in the lanes: a 7x7 plane is 49 positions in four 16-lane
vectors (ResNet-50's last stage, Inception's 7x7 blocks: 77 % of the FMAs useful). Here a register tile is
R positions x V vectors of output channels (AVX-512: 7 x 3, 21 accumulators; AVX: 5 x 2): per input channel
c, V vector loads of the weights and R broadcasts of X[c, p], R*V FMAs, so every lane is an output whatever
the plane's size. The weights are re-laid at export (``pack``, applied by exporters/glow/lower.py, so
NAME.weights.bin holds this layout) block by block: Wp[block][c][V vectors] for each block of V vectors of
output channels (the last block narrower, padded with zero channels to whole vectors), one sequential stream
per block, which stays in L2 while every position tile reads it. The accumulators start at the bias; each
vector of channels of the tile is then turned in registers into one vector of the tile's positions per channel
(``transposed``), which goes through the fused epilogue (kernels/reference/epilogue.py; a residual sum's operand is then
read at contiguous positions) into Y[m, p0:+R] (channels first: one position's channels are a plane apart). A
strided 1x1 convolution broadcasts the inputs it reads where they are (no gathered copy). The loops stay rolled
(``unroll=False``): unrolled, LLVM's -O3 spent twice the compile time on DenseNet-121's 1x1 layers for no speed.

Single layers, this machine (AVX-512), before -> after (onnxruntime): 2048->512@7 549 -> 424 us (453),
512->2048@7 585 -> 431 (442), 1024->352@7 180 -> 148 (160), 1024->256@14 461 -> 416 (441), 512->128@14
(DenseNet) 122 -> 107 (118); on 28x28 planes (whole vectors of positions) the plane kernel stays ahead,
512->128@28 402 against 419 here, hence ``MOST_POSITIONS``.

A layer whose block of weights passes ``CHUNK_WEIGHTS`` (3x3 512@14: 884 KB a block, re-read from L3 by each of
its 28 tiles) sums its input channels in chunks whose weights stay in L2 while every tile reads them, the tiles'
sums kept in the workspace between chunks (``partial_bytes``; they start at the bias), one copy of the code for
every chunk (the last one stores through the epilogue): 3x3 512@14 3,381 -> 3,267-3,302 us (onnxruntime
3,266-3,329), 2048->512@7 375 -> 368; 96 to 256 KB chunks measured alike, DenseNet-121's export took 2 s more
with two copies of the code.

Larger kernels (on at most ``MOST_TAP_POSITIONS`` output positions, ``MOST_STRIDED_TAP_POSITIONS`` when
strided) read their input copied once with its padding into the workspace (``padded``: C x the rows and columns
the windows reach, 0 in the padding, only the border written with zeros); a tile is then R positions of one
output row, and each tap of each input channel R broadcasts at a fixed offset, against the weights' row for that
channel and tap (Wp's rows: C * taps). Single layers, this machine, the first version (every tap's inputs gathered
first, C * taps x P) -> padded input: 3x3 512@7 1022 -> 826 us (onnxruntime 872-883); against the plane kernel:
3x3 256@14 872 -> 825 (817), 128->160@14 282 -> 263 (266), stride 2 256@28 onto 14x14 937 -> 842 (890),
stride 2 128@56 onto 28x28 921 -> 845 (854).

Used (``wanted``) for float32 convolutions of one group, 2-D, at most those positions and at least a vector of
output channels, a larger kernel only with an explicit ``kernel_shape`` (the packed weights no longer say it) and
its padded input within conv_plane's ``IM2COL_BUDGET``. Such a layer's pooling stays a layer of its own
(``pools_apart``, asked by fuse.py, when its work is large), so it is never the head of conv_pool.py's groups,
which read the weights as they are. The emitter knows the weights were re-laid from their rank: 2, (C * taps, M')
blocks, where a Conv's weights are otherwise (M, C, k...); ``geometry`` gives the layer's window from the shape
before packing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.reference import conv_plane
from pegasus.exporters.glow.kernels.reference.epilogue import layer_epilogue
from pegasus.exporters.glow.kernels.registry import packer, runtime_dims, workspace
from pegasus.exporters.glow.kernels.strategy import Choice, Query, Verdict, hook, implementation
from pegasus.exporters.glow.llvm.copies import copy_strided, fill_strided
from pegasus.exporters.glow.llvm.lanes import vector_lanes
from pegasus.exporters.glow.llvm.loops import affine, const, for_range
from pegasus.exporters.glow.llvm.numeric import Accumulators, Numeric
from pegasus.exporters.glow.llvm.simd import Simd, simd_of, vconst
from pegasus.exporters.glow.llvm.tensors import TensorRef, flat_spatial
from pegasus.exporters.glow.llvm.windows import pointwise
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Node
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv

#: output positions of a 1x1 layer at most (7x7 and 14x14 planes; 28x28 ran faster with positions in the lanes)
MOST_POSITIONS = 256
#: ... of a larger kernel's of stride 1: up to 56x56 planes (VGG-19's 3x3 256@56 at 168 GF/s here against 126 over
#: the flattened plane, 512@28 169 against 140, Inception's 64->192@56 173 against 145; on an AMD Zen 5 the plane
#: kernel had stayed ahead on 28x28 and 56x56, 808 against 820 us and 807 against 884); 112x112 gained less (128@112
#: 143 against 131) for a 6.6 MB padded copy
MOST_TAP_POSITIONS = 3136
#: ... of a strided one (the plane kernel gathers its taps first: 3x3 stride 2 128@56 onto 28x28 845 against 921;
#: ResNet's 7x7 stride-2 stem on 112x112, 965 against 887 in conv.py's gathered rows, stays there)
MOST_STRIDED_TAP_POSITIONS = 784
#: multiply-adds from which a layer that runs here leaves its pooling a layer of its own (``pools_apart``; 0.2 ms)
POOL_APART_MACS = 16 << 20
#: bytes of one block's weights a layer reads in one sweep of its positions: more input channels than that (3x3
#: 512@14: 884 KB a block) go in chunks whose weights stay in L2 while every tile reads them, the tiles' sums kept
#: between chunks (this CPU's L2: 1 MB)
CHUNK_WEIGHTS = 192 * 1024


def vectors_per_block(simd: Simd) -> int:
    """V: vectors of output channels per register tile."""
    return 3 if simd.registers >= 32 else 2


def positions_per_tile(simd: Simd) -> int:
    """R: positions of a register tile (R*V accumulators, V weight vectors and one broadcast in registers)."""
    return 7 if simd.registers >= 32 else 5


def wanted(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: DType, target) -> bool:
    """Whether channels-first float Conv ``node`` (weights of ``w_shape`` as imported) runs here on ``target``:
    x86-64 with AVX vectors, float32, one group, 2-D, at least a vector of output channels; a 1x1 kernel without
    padding on at most ``MOST_POSITIONS`` output positions, a larger one (with an explicit ``kernel_shape``,
    its padded input within conv_plane's ``IM2COL_BUDGET``) on at most ``MOST_TAP_POSITIONS``, or
    ``MOST_STRIDED_TAP_POSITIONS`` when strided."""
    if target is None or target.arch != "x86_64" or dtype is not DType.FLOAT32 or len(x_shape) != 4:
        return False
    simd = simd_of(target)
    if simd.width < 32 or node.attrs.group != 1 or getattr(node.attrs, "channels_last", False):
        return False
    win = Conv.geometry(node.attrs, x_shape, w_shape)
    positions = math.prod(win.out)
    if pointwise(win):
        fits = positions <= MOST_POSITIONS
    else:
        most = MOST_TAP_POSITIONS if all(stride == 1 for stride in win.strides) else MOST_STRIDED_TAP_POSITIONS
        fits = (positions <= most and bool(node.attrs.kernel_shape) and
                _padded_bytes(x_shape, win, dtype) <= conv_plane.IM2COL_BUDGET)
    return fits and w_shape[0] >= simd.width // dtype.itemsize


@hook("pools_apart", "conv.lanes")
def pools_apart(query: Query) -> bool:
    """Whether a layer this kernel computes should leave its pooling to a layer of its own (fuse.py asks through
    kernels/strategy.py ``prefers_pooling_apart``): with at least ``POOL_APART_MACS`` multiply-adds. The pooling
    then reads the whole output back once; in a smaller layer the faster kernel saves microseconds, and the fused
    group keeps the output out of memory (LeNet's conv2, 1.6 M: ACTIVATIONS 14,720 B fused, 35,840 apart). This
    machine, conv + Relu + 2x2 max pool fused over the flattened plane -> here and pooled apart: VGG-19's 3x3
    256@56 130 -> 162 GF/s (onnxruntime 157), 512@28 148 -> 157 (156), 512@14 147 -> 179 (149)."""
    node, graph = query.node, query.graph
    w = graph.type_of(node.inputs[1])
    return math.prod(graph.type_of(node.outputs[0]).shape) * math.prod(w.shape[1:]) >= POOL_APART_MACS


def applies(query: Query) -> Verdict:
    """A channels-first float Conv ``wanted`` here whose layer ends without a pooling."""
    node, graph = query.node, query.graph
    if getattr(node.attrs, "channels_last", False):
        return "channels last"
    x, w = graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1])
    if not graph.tensors[node.inputs[1]].is_constant:
        return "computed weights"
    if not wanted(node, x.shape, w.shape, x.dtype, query.target):
        return "not a float32 2-D AVX x86-64 layer of one group within this kernel's sizes"
    return True if query.layer.pool is None else "heads a pooling (conv_pool.py pools in registers)"


def _padded_bytes(x_shape, win, dtype: DType) -> int:
    """Bytes of the workspace: a larger kernel's input with its padding (``padded``; a 1x1 reads its input as
    it is)."""
    if pointwise(win):
        return 0
    return x_shape[0] * x_shape[1] * math.prod(_padded_shape(win)) * dtype.itemsize


def _padded_shape(win) -> tuple[int, int]:
    """(rows, columns) of the padded input the windows of ``win`` read: from the first pad to the last input
    position a window reaches."""
    return tuple((out - 1) * stride + (kernel - 1) * dilation + 1
                 for out, stride, kernel, dilation in zip(win.out, win.strides, win.kernel, win.dilations))


def packed_layout(channels: int, inputs: int, simd: Simd) -> list[tuple[int, int, int]]:
    """(first output channel, vectors, offset in Wp) of each block."""
    lanes = simd.width // 4
    vectors, most = -(-channels // lanes), vectors_per_block(simd)
    blocks, offset = [], 0
    for first_vector in range(0, vectors, most):
        count = min(most, vectors - first_vector)
        blocks.append((first_vector * lanes, count, offset))
        offset += inputs * count * lanes
    return blocks


@packer("conv.lanes")
def pack(query: Query, choice: Choice) -> dict[int, np.ndarray]:
    """W (M, C, k...) -> Wp: per block of ``packed_layout``, (C * taps, 16*V) with zero channels past M; as
    (C * taps, M')."""
    return _packed(query.graph.value_of(query.node.inputs[1]), query.target)


def _packed(w: np.ndarray, target) -> dict[int, np.ndarray]:
    """Weights 1 re-laid as ``pack`` says."""
    simd = simd_of(target)
    lanes = simd.width // 4
    channels, inputs = w.shape[0], w.size // w.shape[0]
    matrix = w.reshape(channels, inputs)
    parts = []
    for first, vectors, _ in packed_layout(channels, inputs, simd):
        block = np.zeros((inputs, vectors * lanes), w.dtype)
        taken = matrix[first:first + vectors * lanes]
        block[:, :taken.shape[0]] = taken.T
        parts.append(block)
    return {1: np.concatenate([part.reshape(-1) for part in parts]).reshape(inputs, -1)}


def geometry(k: KernelContext):
    """The layer's Window, from its attributes and the weights' shape before ``pack`` (the kernel's size from
    ``kernel_shape``, or 1x1 when the model gave none: packed weights are (C * taps, M'))."""
    x, y = k.inputs[0], k.outputs[0]
    kernel = tuple(k.attrs.kernel_shape) if k.attrs.kernel_shape else (1,) * (len(x.shape) - 2)
    return Conv.geometry(k.attrs, x.shape, (y.shape[1], x.shape[1]) + kernel)


@runtime_dims("conv.lanes")
def shared_dims(k: KernelContext) -> tuple[tuple[int, int], ...]:
    """A 1x1 layer in one chunk reads its input channels at run time (X's axis 1, the packed weights' rows):
    DenseNet-121's 1x1 layers of a block, which differ only in those, share one function (its export compiled 40
    copies of 155 KB of IR). Other Conv layers bake every size in."""
    if not pointwise(geometry(k)) or partial_bytes(k):
        return ()
    return ((0, 1), (1, 0))


@workspace("conv.lanes")
def workspace_bytes(k: KernelContext) -> int:
    """The padded input (``_padded_bytes``), then the partial sums of a chunked layer (``partial_bytes``)."""
    padded_input = _padded_bytes(k.inputs[0].shape, geometry(k), k.inputs[0].type.dtype)
    partial = partial_bytes(k)
    return piece(padded_input) + partial if partial else padded_input


@implementation("conv.lanes", "Conv", "Conv+group", family="x86", priority=50, when=applies)
def emit_layer(k: KernelContext) -> None:
    """Output channels in vector lanes, positions broadcast: a larger kernel over its input copied with its
    padding into the workspace (``padded``), every tap then a broadcast at a fixed offset; a 1x1 over the
    flattened plane, or when strided row by row over the input positions it reads."""
    k, epilogue = layer_epilogue(k)
    x, y, win = k.inputs[0], k.outputs[0], geometry(k)
    padded_input, partial = _padded_bytes(x.shape, win, x.type.dtype), partial_bytes(k)
    assert k.workspace is not None or not (padded_input or partial), \
        f"layer '{k.node.name}': its padded input or partial sums have no workspace"
    if padded_input:
        z = padded(k.builder, k.scratch(x.element, padded_input), x, win, vector_lanes(k.target, x.element))
        rows, columns = z.shape[2:]
        taps = [i * win.dilations[0] * columns + j * win.dilations[1]
                for i in range(win.kernel[0]) for j in range(win.kernel[1])]
        grid = Grid(win.out[0], win.out[1], win.strides[0] * columns, win.strides[1], tuple(taps))
        x = z
    elif all(stride == 1 for stride in win.strides):
        grid = Grid(1, math.prod(win.out), 0, 1, (0,))
    else:
        grid = Grid(win.out[0], win.out[1], win.strides[0] * x.shape[3], win.strides[1], (0,))
    emit(k, flat_spatial(x), flat_spatial(y), epilogue, grid, k.scratch(x.element, partial) if partial else None)


def padded(b: ir.IRBuilder, pointer: ir.Value, x: TensorRef, win, lanes: int) -> TensorRef:
    """X (N, C, H, W) with its padding, (N, C, ``_padded_shape``) at ``pointer``: 0 where a window reads outside
    the input (the border only is written with zeros; input rows or columns no window reaches are left out), the
    rows copied in vectors of ``lanes``."""
    (rows, columns), (top, left) = _padded_shape(win), win.pads_begin
    n, channels, height, width = x.shape
    z = TensorRef(pointer, TensorType((n, channels, rows, columns), x.type.dtype))
    zero = ir.Constant(x.element, 0.0)
    inside_rows, inside_columns = min(height, rows - top), min(width, columns - left)
    for r0, r1, c0, c1 in ((0, top, 0, columns), (top + inside_rows, rows, 0, columns),
                           (top, top + inside_rows, 0, left), (top, top + inside_rows, left + inside_columns, columns)):
        fill_strided(b, z, zero, (n, channels, r1 - r0, c1 - c0), z.strides, r0 * columns + c0)
    copy_strided(b, z, x, (n, channels, inside_rows, inside_columns), z.strides, x.strides,
                 dst_base=top * columns + left, lanes=lanes)
    return z


@dataclass(frozen=True)
class Grid:
    """Where a tile's inputs are: output ``rows`` x ``columns`` positions (1 x P for a 1x1 over the flattened
    plane), an output row ``row_step`` input elements after the last and a column ``column_step`` after the last,
    and each tap of the kernel at its offset in ``taps`` (the weights' rows: input channel major, then tap)."""

    rows: int
    columns: int
    row_step: int
    column_step: int
    taps: tuple[int, ...]


def transposed(b: ir.IRBuilder, rows: list[ir.Value], lanes: int) -> list[ir.Value]:
    """The (at most 8) ``rows`` of ``lanes`` lanes (one position's channels each) as ``lanes`` vectors of 8 lanes
    (one channel's positions each, lanes past the rows undefined): per 128-bit group, pairs of rows interleaved,
    then pairs of pairs (unpcklps/unpckhps, shufps), then each channel's two halves joined (3 * 8 + lanes
    shuffles in place of a stack buffer stored and read lane by lane: 1x1 256->1024 on 14x14 412 -> 373 us,
    onnxruntime 391; with a residual sum, 512->2048 on 7x7 404 -> 379 us, and on 14x14 390 us against the plane
    kernel's 398)."""
    assert len(rows) <= 8 and lanes % 4 == 0
    undefined = ir.Constant(rows[0].type, None)
    a = rows + [undefined] * (8 - len(rows))
    groups = range(lanes // 4)

    def shuffle(x, y, mask):
        return b.shuffle_vector(x, y, vconst(mask))

    def low(g):
        return [4 * g, lanes + 4 * g, 4 * g + 1, lanes + 4 * g + 1]

    def high(g):
        return [4 * g + 2, lanes + 4 * g + 2, 4 * g + 3, lanes + 4 * g + 3]

    pairs = [(shuffle(a[2 * i], a[2 * i + 1], [j for g in groups for j in low(g)]),
              shuffle(a[2 * i], a[2 * i + 1], [j for g in groups for j in high(g)])) for i in range(4)]
    # quads[h][j]: group g holds positions 4h..4h+3 of channel 4g + j
    quads = []
    for h in range(2):
        (lo01, hi01), (lo23, hi23) = pairs[2 * h], pairs[2 * h + 1]
        quads.append([shuffle(first, second, [j for g in groups for j in (4 * g + half, 4 * g + half + 1,
                                                                           lanes + 4 * g + half,
                                                                           lanes + 4 * g + half + 1)])
                      for first, second in ((lo01, lo23), (hi01, hi23)) for half in (0, 2)])
    return [shuffle(quads[0][m % 4], quads[1][m % 4], [*range(4 * (m // 4), 4 * (m // 4) + 4),
                                                        *range(lanes + 4 * (m // 4), lanes + 4 * (m // 4) + 4)])
            for m in range(lanes)]


def chunk_inputs(inputs: int, taps: int, simd: Simd) -> int:
    """Input channels of a chunk: those whose weights of one block fit ``CHUNK_WEIGHTS`` (all of them when
    they all do)."""
    per_channel = taps * vectors_per_block(simd) * simd.width
    return max(1, min(inputs, CHUNK_WEIGHTS // per_channel))


def partial_bytes(k: KernelContext) -> int:
    """Bytes of the partial sums a chunked layer keeps between its chunks: a block's, every output position (0
    when the layer is one chunk)."""
    simd, win = simd_of(k.target), geometry(k)
    inputs = k.inputs[0].shape[1]
    if chunk_inputs(inputs, math.prod(win.kernel), simd) >= inputs:
        return 0
    return math.prod(win.out) * vectors_per_block(simd) * simd.width


@dataclass
class _LaneConv:
    """One layer of this kernel (``emit``): blocks of 16*V output channels, tiles of ``tile`` positions of an
    output row of ``grid``, over ``inputs`` input channels (a size read at run time when the layer shares its
    function), chunk by chunk through partial ``sums`` when there is more than one chunk."""

    b: ir.IRBuilder
    num: Numeric
    lanes: int
    x: TensorRef
    y: TensorRef
    w: TensorRef
    bias: TensorRef | None
    epilogue: Any
    grid: Grid
    inputs: Any          # int, or an i32 read at run time
    chunk: int
    chunks: int
    most: int
    tile: int
    sums: TensorRef | None

    def times(self, count, factor: int):
        """count * factor, ``count`` a size known now or read at run time."""
        return count * factor if isinstance(count, int) else self.b.mul(count, const(factor), flags=("nsw",))

    def at(self, value, count) -> tuple:
        """The affine term value * count, ``count`` known now or read at run time."""
        return (value, count) if isinstance(count, int) else (self.b.mul(value, count, flags=("nsw",)), 1)

    def bias_vector(self, first, v: int, valid: list[int]):
        num, lanes, bias = self.num, self.lanes, self.bias
        if bias is None:
            return num.constant(0, lanes)
        if valid[v] == lanes:
            return num.load(bias, affine(self.b, v * lanes, (first, 1)), lanes)
        return num.load_lanes(bias, affine(self.b, v * lanes, (first, 1)), lanes, 1,
                              tuple(lane < valid[v] for lane in range(lanes)))

    def run(self, batch, first, vectors: int, offset, row, column, count: int, valid: list[int], c0=None,
            span=None, last=None) -> None:
        """Channels first:+16*vectors (``valid`` lanes of each vector are channels) at output positions
        (row, column:+count), over input channels c0:+span (all by default; a chunk's starts from the partial
        sums and goes back to them unless ``last``, an i1 known at run time)."""
        b, num, grid = self.b, self.num, self.grid
        acc = Accumulators(num, count * vectors, self.lanes)
        position = affine(b, 0, (row, grid.columns), (column, 1))
        self._start(acc, first, vectors, position, count, valid)
        self._products(acc, batch, vectors, offset, row, column, count, c0, self.inputs if span is None else span)
        if last is None:
            self.finish(acc, batch, first, vectors, row, column, count, valid)
            return
        with b.if_else(last) as (final, partial_sums):
            with final:
                self.finish(acc, batch, first, vectors, row, column, count, valid)
            with partial_sums:
                for v in range(vectors):
                    for r in range(count):
                        num.store(self.sums, self._partial(position, r, v), acc.get(r * vectors + v))

    def _partial(self, position, r: int, v: int):
        """Where partial sum (position + r, vector v) lives in ``sums``."""
        lanes = self.lanes
        return affine(self.b, (r * self.most + v) * lanes, (position, self.most * lanes))

    def _start(self, acc: Accumulators, first, vectors: int, position, count: int, valid: list[int]) -> None:
        """The accumulators start at the bias, or at the partial sums of the chunks before."""
        for v in range(vectors):
            start = self.bias_vector(first, v, valid) if self.sums is None else None
            for r in range(count):
                acc.set(r * vectors + v, start if start is not None else self.num.load(
                    self.sums, self._partial(position, r, v), self.lanes))

    def _products(self, acc: Accumulators, batch, vectors: int, offset, row, column, count: int, c0, span) -> None:
        """acc += W . X over input channels c0:+span and every tap of the grid."""
        b, num, x, grid, lanes = self.b, self.num, self.x, self.grid, self.lanes
        taps = len(grid.taps)
        x_base = affine(b, 0, self.at(batch, self.times(self.inputs, x.strides[1])), (row, grid.row_step),
                        (column, grid.column_step))
        with for_range(b, span if c0 is None else b.add(c0, span), start=0 if c0 is None else c0,
                       name="c", unroll=False) as c:
            for t, tap in enumerate(grid.taps):
                w_flat = affine(b, t * vectors * lanes, (offset, 1), (c, taps * vectors * lanes))
                weights = [num.load(self.w, affine(b, v * lanes, (w_flat, 1)), lanes) for v in range(vectors)]
                x_flat = affine(b, tap, (x_base, 1), (c, x.strides[1]))
                for r in range(count):
                    value = num.load(x, affine(b, r * grid.column_step, (x_flat, 1)), lanes, 0)
                    for v in range(vectors):
                        acc.mul_add(r * vectors + v, value, weights[v])

    def finish(self, acc, batch, first, vectors: int, row, column, count: int, valid: list[int]) -> None:
        """The tile's sums turned, a vector of channels at a time, in registers into one vector of the tile's
        positions per channel (``transposed``), through the epilogue (a residual operand read as it is stored:
        contiguous) into Y[m, p0:+count]."""
        b, num, y, grid, epilogue, lanes = self.b, self.num, self.y, self.grid, self.epilogue, self.lanes
        y_base = affine(b, 0, (batch, y.strides[0]), (first, y.strides[1]), (row, grid.columns), (column, 1))
        early = epilogue.residual is None     # no operand to read: the layers run on the fewer channel vectors
        for v in range(vectors):
            rows = [acc.get(r * vectors + v) for r in range(count)]
            if early:
                rows = [epilogue(num, row) for row in rows]
            for m, value in enumerate(transposed(b, rows, lanes)[:valid[v]]):
                flat = affine(b, (v * lanes + m) * y.strides[1], (y_base, 1))
                if not early:
                    value = epilogue(num, value, flat, count)
                num.store(y, flat, value, None if count == value.type.count else count)

    def sweep(self, batch, first, vectors: int, offset, valid: list[int], *chunking) -> None:
        b, grid, tile = self.b, self.grid, self.tile
        full, rest = divmod(grid.columns, tile)
        with for_range(b, grid.rows, name="orow", unroll=False) as row:
            if full:
                with for_range(b, full, name="ptile", unroll=False) as t:
                    self.run(batch, first, vectors, offset, row, affine(b, 0, (t, tile)), tile, valid, *chunking)
            if rest:
                self.run(batch, first, vectors, offset, row, affine(b, full * tile), rest, valid, *chunking)

    def block(self, batch, first, vectors: int, offset, valid: list[int]) -> None:
        """The block's positions, over every input channel at once, or chunk by chunk (the chunk's weights
        stay in L2 while every tile reads them) from partial sums that start at the bias."""
        b, num, grid, lanes, chunk, chunks = self.b, self.num, self.grid, self.lanes, self.chunk, self.chunks
        if self.sums is None:
            self.sweep(batch, first, vectors, offset, valid)
            return
        starts = [self.bias_vector(first, v, valid) for v in range(vectors)]
        with for_range(b, grid.rows * grid.columns, name="pinit", unroll=False) as position:
            for v in range(vectors):
                num.store(self.sums, affine(b, v * lanes, (position, self.most * lanes)), starts[v])
        with for_range(b, chunks, name="chunk", unroll=False) as index:      # one copy of the code for every chunk
            last = b.icmp_signed("==", index, const(chunks - 1))
            span = b.select(last, const(self.inputs - (chunks - 1) * chunk), const(chunk))
            self.sweep(batch, first, vectors, offset, valid, affine(b, 0, (index, chunk)), span, last)


def emit(k: KernelContext, x: TensorRef, y: TensorRef, epilogue, grid: Grid, partial: ir.Value | None = None) -> None:
    """Y (N, M, P) = bias + Wp . X (N, C, P'), through ``epilogue``: blocks of 16*V channels, tiles of R positions
    of an output row of ``grid`` (the last of a row smaller), each tile's R*V accumulators summed over the C input
    channels and the grid's taps (``_LaneConv``)."""
    b = k.builder
    simd = simd_of(k.target)
    num = Numeric(b, x.type.dtype)
    lanes = simd.lanes(num.compute)
    batches, inputs = x.shape[:2]
    channels, taps = y.shape[1], len(grid.taps)
    chunk = chunk_inputs(inputs, taps, simd)
    chunks = -(-inputs // chunk)
    rows = inputs * taps    # the packed weights' rows: read at run time when the layer shares its function
    if shared_dims(k):
        inputs, rows = k.dim(0, 1), k.dim(1, 0)
    most = vectors_per_block(simd)
    sums = None if chunks == 1 else TensorRef(b.bitcast(partial, num.storage.as_pointer()), TensorType(
        (grid.rows * grid.columns * most * lanes,), x.type.dtype))
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    layer = _LaneConv(b, num, lanes, x, y, k.inputs[1], bias, epilogue, grid, inputs, chunk, chunks, most,
                      positions_per_tile(simd), sums)
    blocks = packed_layout(channels, 1, simd)     # a block's weights start at rows x its first channel
    whole = len([1 for first, vectors, _ in blocks if vectors == most and first + most * lanes <= channels])
    with for_range(b, batches, name="n") as batch:
        if whole:     # blocks of V whole vectors of channels: a loop
            with for_range(b, whole, name="block", unroll=False) as index:
                layer.block(batch, affine(b, 0, (index, most * lanes)), most,
                            affine(b, 0, layer.at(index, layer.times(rows, most * lanes))), [lanes] * most)
        for first, vectors, _ in blocks[whole:]:
            layer.block(batch, affine(b, first), vectors, affine(b, 0, (layer.times(rows, first), 1)),
                        [max(0, min(lanes, channels - first - v * lanes)) for v in range(vectors)])

