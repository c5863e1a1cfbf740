"""Float 1x1 convolutions of stride 1 on small planes (ResNet-50's and Inception's 7x7 stages) on x86-64 with
AVX or AVX-512, as dot products over the input channels.

conv.py and conv_plane.py put consecutive positions of the plane in the vector lanes: 49 positions take four
16-lane vectors (64 lanes, 15 of them idle: 23 % of the FMAs wasted). Here the lanes run over the input
channels instead, which every 1x1 layer of these models has in multiples of 16: Y[m, p] = bias[m] + sum over
c of W[m, c] X[c, p], where W's rows are already contiguous over c (its own layout: nothing re-laid at
export, so no packer) and X is transposed once per inference into the workspace (XT[p, c], by 16x16 blocks of
shuffles). A register tile is four output channels x five or six positions of vector partial sums: per
vector of input channels, one vector of W per channel and one of XT per position, every pair multiplied into
its accumulator. After the loop, the tile's accumulators are reduced across their lanes ``lanes`` at a time by
a shuffle tree that leaves one vector of ``lanes`` sums (``_sums``: about two instructions per output), whose
runs of one channel's consecutive positions get the bias and the fused epilogue and are stored as vectors.
Positions are split into tiles of nearly equal size (49 = 4 x 6 + 5 x 5), so no tile idles; more than
``CHUNK`` input channels are summed in passes (partial sums in Y).

Measured here (Zen 5, AVX-512, single layers against onnxruntime, 1 thread, other jobs running): 1x1
512->2048 on 7x7 515 -> 465 us (onnxruntime 425), 2048->512 505 -> 480 us (425), Inception-v2's 1024->352,
192, 160, 128 on 7x7 174, 95, 80, 63 -> 159, 89, 77, 59 us (150, 88, 74, 59). On 14x14 planes (196
positions: four whole vectors) the position lanes stay faster (1024->256: 446 against 536 us here), so
``MOST_POSITIONS`` keeps this to the 7x7 stage.
"""

from __future__ import annotations

from pegasus.exporters.glow.kernels.linear import Accumulators, Numeric, Simd, Value, affine, for_tiles, vconst
from pegasus.exporters.glow.kernels.registry import KernelContext, TensorRef
from pegasus.exporters.glow.llvm.loops import const, for_range
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.conv import Conv

#: output positions of a plane at most (7x7; 14x14 fills whole vectors of positions, which ran faster there)
MOST_POSITIONS = 49
#: input channels summed per pass at most: a tile's weight rows and input columns (4 + 6 of them) then stay in
#: L1 across the pass (2048->512 on 7x7 summed at once: 600 us, in passes of 512: 480, of 256 or 1024: 510, 490)
CHUNK = 512


def fits(k: KernelContext, simd: Simd) -> bool:
    """Whether the layer of ``k`` runs here: a channels-first float32 Conv of one group on x86-64 with AVX,
    1x1 without padding, stride 1, 2-D, on at most ``MOST_POSITIONS`` positions and with input channels a
    whole number of vectors (and positions at least a vector)."""
    x, w = k.inputs[0], k.inputs[1]
    if (k.attrs.channels_last or k.target.arch != "x86_64" or simd.width < 32 or x.type.dtype is not DType.FLOAT32
            or len(x.shape) != 4 or k.attrs.group != 1):
        return False
    win = Conv.geometry(k.attrs, x.shape, w.shape)
    return (all(s == 1 for s in win.kernel) and all(s == 1 for s in win.strides) and not any(win.pads_begin)
            and not any(win.pads_end) and win.out[0] * win.out[1] <= MOST_POSITIONS
            and x.shape[1] % (simd.width // 4) == 0 and win.out[0] * win.out[1] >= simd.width // 4)


def workspace_bytes(k: KernelContext, simd: Simd) -> int:
    """The transposed input XT[n, p, c] (0 when the layer does not run here), its rows a vector longer than
    the channels: rows of 512 or 2048 floats would all fall in the same L1 sets as the weight rows."""
    if not fits(k, simd):
        return 0
    n, channels, height, width = k.inputs[0].shape
    return n * height * width * (channels + simd.width // 4) * 4


def tile_shape(simd: Simd, channels: int) -> tuple[int, int]:
    """(output channels, positions at most) of a register tile: four channels (fewer when they do not divide
    the layer's), as many positions as leave registers for the channels' weight vectors and one input."""
    rows = next(r for r in (4, 3, 2, 1) if channels % r == 0)
    return rows, max(1, (simd.registers - 1 - rows) // rows)


def _balanced(total: int, most: int) -> list[tuple[int, int, int]]:
    """(first, tiles, size) runs covering ``total`` in tiles of at most ``most``, sizes differing by one."""
    count = -(-total // most)
    small, big = divmod(total, count)
    runs = [(0, big, small + 1), (big * (small + 1), count - big, small)]
    return [run for run in runs if run[1] > 0 and run[2] > 0]


def _sums(num: Numeric, vectors: list[Value]) -> Value:
    """One vector whose lane i is the sum of the lanes of ``vectors[i]`` (at most ``lanes`` of them; the
    missing ones sum to 0): pairs of vectors holding k segments of s lanes each are shuffled into their
    segments' low and high halves and added, giving 2k segments of s/2, until segments are single lanes."""
    b = num.b
    lanes = vectors[0].type.count
    zero = num.constant(0, lanes)
    items = [(v, [i]) for i, v in enumerate(vectors)] + [(zero, [-1])] * (lanes - len(vectors))
    size = lanes
    while size > 1:
        half = size // 2
        merged = []
        for (x, xl), (y, yl) in zip(items[0::2], items[1::2]):
            low, high = [], []
            for seg in range(len(xl)):
                low += [seg * size + t for t in range(half)] + [lanes + seg * size + t for t in range(half)]
                high += [seg * size + half + t for t in range(half)] + [lanes + seg * size + half + t
                                                                        for t in range(half)]
            labels = [label for pair in zip(xl, yl) for label in pair]
            merged.append((num.add(b.shuffle_vector(x, y, vconst(low)), b.shuffle_vector(x, y, vconst(high))), labels))
        items, size = merged, half
    (value, labels), = items
    order = [labels.index(i) for i in range(len(vectors))]
    order += [order[0]] * (lanes - len(order))
    return value if order == list(range(lanes)) else b.shuffle_vector(value, value, vconst(order))


def _tile(num: Numeric, xt: TensorRef, w: TensorRef, bias: TensorRef | None, y: TensorRef, epilogue, batch: Value,
          m0: Value, rows: int, p0: Value, cols: int, lanes: int, part: tuple[int, int, bool, bool]) -> None:
    """Y[batch, m0:+rows, p0:+cols] over input channels part = (first, count, first part, last part): vector
    partial sums, reduced, then biased (first part) or added to what Y holds (others), through the epilogue
    (last part), stored."""
    b = num.b
    channels, row, positions = w.shape[1], xt.shape[2], y.shape[2]
    c_first, c_count, first_part, last_part = part
    acc = Accumulators(num, rows * cols, lanes)
    for i in range(rows * cols):
        acc.set(i, num.constant(0, lanes))
    with for_range(b, c_count // lanes, name="c") as chunk:
        c = affine(b, c_first, (chunk, lanes))
        weights = [num.load(w, affine(b, r * channels, (m0, channels), (c, 1)), lanes) for r in range(rows)]
        for q in range(cols):
            inputs = num.load(xt, affine(b, q * row, (batch, positions * row), (p0, row), (c, 1)), lanes)
            for r in range(rows):
                acc.mul_add(r * cols + q, weights[r], inputs)
    outputs = [(r, q) for r in range(rows) for q in range(cols)]
    for first in range(0, len(outputs), lanes):
        group = outputs[first:first + lanes]
        value = _sums(num, [acc.get(r * cols + q) for r, q in group])
        for r, q0, lane0, count in _segments(group):
            flat = affine(b, r * positions + q0, (batch, y.shape[1] * positions), (m0, positions), (p0, 1))
            run = b.shuffle_vector(value, value, vconst(list(range(lane0, lane0 + count))))
            if not first_part:
                run = num.add(run, num.load(y, flat, count))
            elif bias is not None:
                run = num.add(run, num.load(bias, affine(b, r, (m0, 1)), count, 0))
            num.store(y, flat, epilogue(num, run) if last_part else run)


def _segments(group: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(row, first position, first lane, lanes) of the runs of consecutive positions of one row in a group
    of outputs (row, position) laid lane after lane: each run is contiguous in Y."""
    runs: list[list[int]] = []
    for lane, (r, q) in enumerate(group):
        if runs and runs[-1][0] == r and runs[-1][1] + runs[-1][3] == q:
            runs[-1][3] += 1
        else:
            runs.append([r, q, lane, 1])
    return [tuple(run) for run in runs]


def _transpose(num: Numeric, xt: TensorRef, x: TensorRef, lanes: int) -> None:
    """XT[n, p, c] = X[n, c, p] in blocks of ``lanes`` channels x ``lanes`` positions (the plane's last block
    overlapping its neighbour): ``lanes`` rows loaded, transposed by log2(lanes) rounds of interleaving
    shuffles, stored (a scalar copy took 320 us of 2048->512 on 7x7, 8x the compute's share)."""
    b = num.b
    n, channels, height, width = x.shape
    positions, row = height * width, xt.shape[2]
    half = lanes // 2
    low = vconst([lane + side * lanes for lane in range(half) for side in (0, 1)])
    high = vconst([lane + side * lanes for lane in range(half, lanes) for side in (0, 1)])

    def block(batch: Value, c0: Value, p0: Value) -> None:
        rows = [num.load(x, affine(b, i * positions, (batch, channels * positions), (c0, positions), (p0, 1)), lanes)
                for i in range(lanes)]
        for _ in range(lanes.bit_length() - 1):
            rows = [b.shuffle_vector(rows[i], rows[i + half], mask) for i in range(half) for mask in (low, high)]
        for j, vector in enumerate(rows):
            num.store(xt, affine(b, j * row, (batch, positions * row), (p0, row), (c0, 1)), vector)

    with for_range(b, n, name="n") as batch, for_range(b, channels // lanes, name="cb") as cb:
        c0 = affine(b, 0, (cb, lanes))
        with for_range(b, positions // lanes, name="pb") as pb:
            block(batch, c0, affine(b, 0, (pb, lanes)))
        if positions % lanes:
            block(batch, c0, const(positions - lanes))


def emit(k: KernelContext, num: Numeric, simd: Simd, epilogue) -> None:
    """X transposed into the workspace, then per batch, block of output channels and run of position tiles,
    ``_tile``."""
    b = k.builder
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    n, channels = x.shape[:2]
    positions = x.shape[2] * x.shape[3]
    lanes = simd.lanes(num.compute)
    xt = TensorRef(k.scratch(x.element, workspace_bytes(k, simd)),
                   TensorType((n, positions, channels + lanes), x.type.dtype))
    _transpose(num, xt, x, lanes)
    flat_w = TensorRef(w.ptr, TensorType((w.shape[0], channels), w.type.dtype))
    flat_y = TensorRef(y.ptr, TensorType((n, y.shape[1], positions), y.type.dtype))
    rows, most = tile_shape(simd, y.shape[1])
    parts = _balanced(channels // lanes, CHUNK // lanes)
    passes = [((c_first + c_tile * c_size) * lanes, c_size * lanes)
              for c_first, c_tiles, c_size in parts for c_tile in range(c_tiles)]

    def block(batch: Value, m0: Value, count: int) -> None:
        for index, (c0, c_count) in enumerate(passes):
            part = (c0, c_count, index == 0, index == len(passes) - 1)
            for first, tiles, size in _balanced(positions, most):
                with for_range(b, tiles, name="p") as t:
                    _tile(num, xt, flat_w, bias, flat_y, epilogue, batch, m0, count, affine(b, first, (t, size)),
                          size, lanes, part)

    with for_range(b, n, name="n") as batch:
        for_tiles(b, 0, y.shape[1], rows, lambda m0, count: block(batch, m0, count))
