"""Two output channels' 8-bit weights packed into 16-bit halfwords, so that one SMLAD takes four MACs' worth of
weights without unpacking them: dense layers and channels-first convolutions fused with a max pooling on
Cortex-M with the DSP extension.

Why. SMLAD multiplies 16-bit pairs, so 8-bit weights are unpacked first — one SXTB16 per pair, which for a
dense layer (each weight read once: LeNet's fc1 800 -> 500) costs as much as the SMLADs themselves — and weights
stored as pairs would double the flash. Here the weights of output channels c0 = 2i and c1 = 2i + 1 are
stored, at export, as the int16 halfwords ``h = 256 w1 + w0`` (still a byte a weight: low byte w0, high byte
w1 - [w0 < 0], the borrow that makes the halfword exact; a high w1 of -128 under a negative w0 has none, so
such weights keep their bytes). For an input pair (xa, xb) and a word of two halfwords (ha, hb), SMLAD gives
``xa ha + xb hb``: summed over the row, ``T = 256 A1 + A0`` (A0, A1 the channels' sums); one SXTB16 of the
same word gives its low bytes (w0 of taps a and b), whose SMLAD sums ``A0`` exactly; then
``A1 = (T - A0) >> 8`` (``unpair``), exact when |A1| (with its bias, when the sums start at the biases) is below
2**23, checked at export against the actual weights (``halves_rows``: else the layer keeps its bytes). T may
wrap: only T - A0 modulo 2**32 is used. A word of four weights thus costs 3 instructions (SMLAD, SXTB16,
SMLAD) instead of 4 (two SXTB16, two SMLAD). Only 8-bit signed weights of zero point 0, an even number of
output channels and i32 sums.

Dense layers (integer_conv_weights.dense_halves, read by integer_smlad.py): per pair of rows and group of four
taps, the words (h0, h2) and (h1, h3) — the order of the im2col buffer's pairs (x0, x2), (x1, x3) — the pairs
of each block of four rows interleaved group by group (an M % 4 == 2 layer's last pair alone), so that a block
of four rows loads a group's weights with one LDM: 14 instructions per 16 MACs (LDRD, LDM, 4 SXTB16,
8 SMLAD). Int16 of shape (M / 2, k..., C); the select stage's choice says so (integer_conv_plan.HALVES).
LeNet int8 fc1 on Cortex-M7: 607,249 -> 377,209 instructions (0.66 -> 1.06 MACs per instruction).

A convolution fused with its pooling (integer_conv_pool.pack_pooled_halves, read by its ``Dot``): each row of
the window (a run of contiguous taps) in ``run_order``, whole groups of four as (0, 2, 1, 3), the rest in order;
the pair of channels a block computes is one row of halfwords, its accumulators A0 and T; the input's zero point
folds into the biases there. LeNet int8 conv2 + pool2 on Cortex-M7: 2,364,569 -> 2,159,769 instructions.

``halves_rows`` and ``halve_rows`` are the flavours ``halves.fits`` and ``halves.pack`` (integer_flavours.py) that
integer_conv_weights.dense_halves looks up.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour
from pegasus.exporters.glow.llvm.types import I32

Value = ir.Value
#: |A1 (+ bias)| must stay below this for (T - A0) >> 8 to be exact in 32 bits.
HALF_LIMIT = 1 << 23


@flavour("halves.fits")
def halves_rows(w: np.ndarray, bias: np.ndarray | None, x_magnitude: int, w_zero_point: int,
                whole_groups: bool = True) -> bool:
    """Whether the weights ``w`` (M, taps) int8 (with ``bias`` (M,) the sums may start at) can be stored as
    halfword pairs of rows: M even, whole groups of four taps (``whole_groups``: a dense layer's layout), zero
    point 0, every halfword exact and every odd row's sum within ``HALF_LIMIT`` for inputs of magnitude
    ``x_magnitude`` — and i32 sums."""
    if w_zero_point != 0 or (whole_groups and w.shape[1] % 4):
        return False
    return halves_within(w, -x_magnitude, x_magnitude, bias)


def halves_within(w: np.ndarray, x_low: int, x_high: int, bias: np.ndarray | None = None) -> bool:
    """Whether the int8 weights ``w`` (M, taps) can be halfword pairs of rows for inputs known to lie in
    [x_low, x_high] (centred: a ReLU's output from 0 up), the sums starting at ``bias`` (else 0): M even, every
    halfword exact, each odd row's sum — bounded by its positive and negative weights times the ends of that
    interval (a rectified input's are about half its weights' magnitudes times the largest input), plus its
    bias — within ``HALF_LIMIT``, and i32 sums."""
    if w.dtype != np.int8 or w.shape[0] % 2 or w.shape[1] * max(abs(x_low), abs(x_high)) * 128 >= 1 << 31:
        return False
    low, high = w[0::2].astype(np.int64), w[1::2].astype(np.int64)
    if np.any((high == -128) & (low < 0)):
        return False
    positive, negative = np.where(high > 0, high, 0).sum(axis=1), np.where(high < 0, high, 0).sum(axis=1)
    offset = 0 if bias is None else np.abs(bias.astype(np.int64)[1::2])
    largest = np.maximum(positive * x_high + negative * x_low, 0) + offset
    smallest = np.minimum(positive * x_low + negative * x_high, 0) - offset
    return bool(np.all(largest < HALF_LIMIT) and np.all(smallest > -HALF_LIMIT))


def halfwords(w: np.ndarray) -> np.ndarray:
    """(M, taps) int8 weights as (M / 2, taps) int16 halfwords 256 w1 + w0 of each pair of rows."""
    return (256 * w[1::2].astype(np.int64) + w[0::2].astype(np.int64)).astype(np.int16)


def run_order(taps: int, run: int) -> list[int]:
    """The taps of a row made of runs of ``run`` contiguous taps as a SMLAD kernel reads them: per run, its whole
    groups of four as (0, 2, 1, 3), then its last run % 4 in order (integer_conv_pool.Dot)."""
    order = []
    for start in range(0, taps, run):
        whole = start + run // 4 * 4
        for group in range(start, whole, 4):
            order += [group, group + 2, group + 1, group + 3]
        order += range(whole, start + run)
    return order


@flavour("halves.pack")
def halve_rows(w: np.ndarray) -> np.ndarray:
    """(M, taps) int8 weights as (M / 2, taps) int16 halfwords 256 w1 + w0 of each pair of rows, each group of
    four taps stored (0, 2, 1, 3), the pairs of each block of four rows interleaved word by word per group."""
    m, taps = w.shape
    halves = halfwords(w)
    halves = halves.reshape(m // 2, taps // 4, 4)[:, :, [0, 2, 1, 3]].reshape(m // 2, taps // 4, 2, 2)
    whole = m // 4 * 2
    # blocks of two pairs: per group, pair 0's two words then pair 1's
    blocks = halves[:whole].reshape(m // 4, 2, taps // 4, 2, 2).transpose(0, 2, 1, 3, 4)
    return np.concatenate([blocks.reshape(-1), halves[whole:].reshape(-1)]).reshape(m // 2, taps)


def seeds_of(b: ir.IRBuilder, seeds: list[Value]) -> list[Value]:
    """The sums' starting values per row for biases ``seeds`` (rows 2i, 2i + 1): A0 starts at b0, T at
    b0 + 256 b1 (wrapping)."""
    out = []
    for low, high in zip(seeds[0::2], seeds[1::2]):
        out += [low, b.add(low, b.shl(high, ir.Constant(I32, 8)))]
    return out


def unpair(b: ir.IRBuilder, totals: list[list[Value]]) -> list[list[Value]]:
    """Rows 2i, 2i + 1 holding (A0, T) per position -> (A0, A1): A1 = (T - A0) >> 8."""
    out = []
    for low, high in zip(totals[0::2], totals[1::2]):
        out += [low, [b.ashr(b.sub(t, a), ir.Constant(I32, 8)) for a, t in zip(low, high)]]
    return out


def halves_sums(b: ir.IRBuilder, smlad: ir.Function, unpack: ir.Function, xs: list[Value], ws: list[Value],
                sums: list[list[Value]]) -> list[list[Value]]:
    """One group of four taps: ``xs`` the positions' pairs (x0, x2), (x1, x3), ``ws`` per pair of rows its two
    words (h0, h2), (h1, h3); ``sums`` rows 2i (A0) and 2i + 1 (T) per position."""
    count = len(xs) // 2
    out = [list(row) for row in sums]
    for pair in range(len(ws) // 2):
        words = ws[2 * pair: 2 * pair + 2]
        lows = [b.call(unpack, [word]) for word in words]
        for p in range(count):
            for half in range(2):
                x = xs[2 * p + half]
                out[2 * pair][p] = b.call(smlad, [x, lows[half], out[2 * pair][p]])
                out[2 * pair + 1][p] = b.call(smlad, [x, words[half], out[2 * pair + 1][p]])
    return out
