"""What every QConv kernel shares (integer_conv.py picks the kernel): the plan of a layer (operands and
accumulator, grouping, layout, the dot-product flavour the target offers, tile sizes) and the geometry of
its taps (their input offsets, whether a window lies inside the input, where one tap reads).

Activations are channels first (N, C, D1..Dn) or, with ``channels_last``, (N, D1..Dn, C)
(pegasus/ops/layout.py): ``Activation`` gives the kernels the strides of either. The weights of a
channels-last layer are re-laid at export (``pack_weights``, applied by the pack stage, exporters/glow/pipeline.py, so
NAME.weights.bin holds what the kernel reads): a depthwise layer's as (k..., 1, M), one vector of channels
per tap, every other layer's as (M, k..., C/group), so that the taps of a weight row follow the input
(each tap's C/group channels contiguous, as in the channels-last input). On Cortex-M with the DSP extension
8-bit weights are stored as centred 16-bit pairs (``spreads_pairs``): an im2col layer's rows interleaved two
by two, doubled under TFLite rounding (``doubles``), its taps reordered when its channels are not a multiple
of four (``stored_taps``), so that the im2col copy moves whole words of four inputs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_dot import (
    NARROW_BASE,
    SCRATCH_BYTES,
    Mac,
    Operand,
    fold_constant,
    madd_fits,
    narrow_form,
    operand,
)
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour_of
from pegasus.exporters.glow.llvm.loops import affine, const
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.types import I16, I32
from pegasus.exporters.glow.llvm.windows import Axis, axes_of
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ops.conv import Conv
from pegasus.ops.integer import clamp_bounds
from pegasus.ops.layout import first_shape
from pegasus.ops.spatial import prod

Value = ir.Value
#: Most runs (rows of a window along its last axis) a channels-last layer's im2col copy unrolls: a paired layer
#: of fewer than four channels has no other copy (its taps are reordered, ``stored_taps``).
UNROLLED_ROWS = 64
#: Most groups of four taps a layer's blocks may have for one function to compute every block of a tile
#: (``tile_stream``: its groups unrolled).
TILE_GROUPS = 72
#: Words of a ``tile_stream`` per pair besides its weights: 2 seeds, 6 parameters, whether another pair follows.
TILE_TAIL = 9


@dataclass(frozen=True)
class Activation:
    """Where the elements of a convolution's input or output lie, channels first or channels last."""

    ref: TensorRef
    channels_last: bool

    @property
    def channels(self) -> int:
        return self.ref.shape[-1] if self.channels_last else self.ref.shape[1]

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.ref.shape[1:-1] if self.channels_last else self.ref.shape[2:]

    @property
    def batch(self) -> int:
        return self.ref.strides[0]

    @property
    def channel(self) -> int:
        return 1 if self.channels_last else self.ref.strides[1]

    @property
    def spatial(self) -> tuple[int, ...]:
        return self.ref.strides[1:-1] if self.channels_last else self.ref.strides[2:]

    @property
    def position(self) -> int:
        """The stride of the flat spatial index (positions in row-major order)."""
        return self.channels if self.channels_last else 1


def depthwise(group: int, in_group: int) -> bool:
    """One input channel per group, several groups: the channels-last weights are (k..., 1, M)."""
    return group > 1 and in_group == 1


def spreads_pairs(node: Node, graph: Graph, target, pooled: bool = False) -> bool:
    """Whether a channels-last QConv's weights are stored as centred 16-bit pairs for Cortex-M's DSP
    kernels — what SXTB16 would make of them in every inner loop, made once at export (twice the bytes of
    flash, none of RAM): 8-bit inputs and weights, a CPU with the DSP extension, and either a depthwise layer
    of one output channel per input channel and a multiple of four channels (integer_depthwise.py), or a
    layer of one group and a multiple of four input channels, computed by im2col (integer_im2col.py: not
    fused with a pooling, ``pooled``: whose kernel reads bytes) at several output positions — a dense layer (one
    position) reads each weight once, so its weights, often most of a model's, stay bytes. ``--compact-weights``
    (``Target.byte_weights``) keeps every layer's bytes."""
    x, w = graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1])
    info = CPUS.get(getattr(target, "cpu", ""))
    if not (info is not None and info.has_dsp and target.is_cortex_m and not target.byte_weights
            and x.dtype.itemsize == 1 and w.dtype.itemsize == 1 and graph.tensors[node.inputs[1]].is_constant):
        return False
    if depthwise(node.attrs.group, w.shape[1]):
        return w.shape[0] == x.shape[-1] and w.shape[0] % 4 == 0
    positions = prod(graph.type_of(node.outputs[0]).shape[:-1])
    # a number of input channels not a multiple of four (a first layer): the taps reordered (stored_taps), the
    # window's rows copied a word at a time, their last taps one by one (integer_im2col.Words), all unrolled
    rows, run = prod(w.shape[2:-1]), w.shape[-1] * w.shape[1]
    dilated = bool(node.attrs.dilations) and node.attrs.dilations[-1] != 1
    reordered = w.shape[1] % 4 == 0 or (run >= 2 and not dilated and rows * (1 + run % 4) <= UNROLLED_ROWS)
    return node.attrs.group == 1 and reordered and positions > 1 and not pooled


def dense_halves(node: Node, graph: Graph, target, relaid: np.ndarray) -> np.ndarray | None:
    """A dense layer's (one output position, one group) weights ``relaid`` (M, k..., C) as halfword pairs of rows
    (integer_halves.py) on a CPU with the DSP extension, when they fit that layout; None otherwise."""
    x, y = graph.type_of(node.inputs[0]), graph.type_of(node.outputs[0])
    info = CPUS.get(getattr(target, "cpu", ""))
    if not (info is not None and info.has_dsp and target.is_cortex_m and x.dtype.itemsize == 1
            and node.attrs.group == 1 and prod(y.shape[:-1]) == 1 and relaid.shape[0] > 1):
        return None
    rows = relaid.reshape(relaid.shape[0], -1)
    magnitude = Operand(x.dtype, node.attrs.x_zero_point).magnitude
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:     # the sums may start at it: its value bounds them too
        if not graph.tensors[node.inputs[2]].is_constant:
            return None
        bias = graph.value_of(node.inputs[2]).astype(np.int64)
    if not flavour_of("halves.fits")(rows, bias, magnitude, node.attrs.w_zero_point):
        return None
    return flavour_of("halves.pack")(rows).reshape((relaid.shape[0] // 2,) + relaid.shape[1:])


def doubles(attrs) -> bool:
    """Whether an im2col layer's paired weights are stored doubled, 2 (w - zw): the sums are then 2 Σ, which
    TFLite's requantisation takes first (SRDHM is SMMULR of the doubled sum, integer_dot.Requant) — an
    instruction per output saved."""
    return getattr(attrs, "rounding", "half_up") == "tflite"


def stored_taps(kernel: tuple[int, ...], dilation: int, channels: int) -> tuple[int | None, ...]:
    """The taps of a paired weight row in the order they are stored (and copied into the im2col buffer): their
    natural indices (k..., ci), None for a zero padding the row to whole groups of four. Each run of taps
    contiguous in a channels-last input — a row of the window along its last axis (dilation 1), else one tap's
    channels — gives its whole words of four taps first, in order; the runs' last len % 4 taps follow, then the
    padding. With a multiple of four channels, the natural order."""
    run = kernel[-1] * channels if dilation == 1 else channels
    words, rest = [], []
    for start in range(0, prod(kernel) * channels, run):
        whole = start + run // 4 * 4
        words += range(start, whole)
        rest += range(whole, start + run)
    return (*words, *rest) + (None,) * (-(len(words) + len(rest)) % 4)


def spread_pairs(w: np.ndarray) -> np.ndarray:
    """(..., M) weights, already centred, as int32 words of 16-bit pairs: per group of four channels
    (w0 | w2 << 16, w1 | w3 << 16) — what SXTB16 would make of the bytes, made once at export."""
    v = w.astype(np.int64).reshape(w.shape[:-1] + (w.shape[-1] // 4, 4)) & 0xFFFF
    words = np.stack([v[..., 0] | v[..., 2] << 16, v[..., 1] | v[..., 3] << 16], axis=-1)
    return words.astype(np.uint32).view(np.int32).reshape(w.shape[:-1] + (w.shape[-1] // 2,))


#: how a layer's weights are stored, decided by the select stage (``weights_layout``, the choice's "weights"):
#: centred 16-bit pairs (``spreads_pairs``), two rows' bytes as halfwords (integer_halves.py) or as imported
PAIRS, HALVES, BYTES = "pairs", "halves", "bytes"
#: what replaces the biases of a layer of ``PAIRS`` (the choice's "table", ``weights_table``; None: its biases stay):
#: a ``block_table`` of 6 or 8 words a pair of channels (``FOLDED``), a ``tile_stream``, ``pointwise_records``, a
#: ``depthwise_table``
BLOCK, FOLDED, TILE, RECORDS, DEPTHWISE = "block", "folded_block", "tile", "records", "depthwise"


def relaid_weights(node: Node, graph: Graph) -> np.ndarray:
    """A channels-last QConv's weights (M, C/group, k...) as (k..., 1, M) when depthwise, else (M, k..., C/group)."""
    w = graph.value_of(node.inputs[1])
    n = w.ndim - 2
    if depthwise(node.attrs.group, w.shape[1]):
        return np.ascontiguousarray(w.transpose(*range(2, 2 + n), 1, 0))
    return np.ascontiguousarray(w.transpose(0, *range(2, 2 + n), 1))


def weights_layout(node: Node, graph: Graph, target, pooled: bool = False) -> str:
    """How ``pack_weights`` stores a channels-last QConv's weights (``PAIRS``, ``HALVES``, ``BYTES``); ``pooled``:
    the layer ends with a pooling."""
    if spreads_pairs(node, graph, target, pooled):
        return PAIRS
    return HALVES if dense_halves(node, graph, target, relaid_weights(node, graph)) is not None else BYTES


def weights_table(node: Node, graph: Graph, layout: str, pooled: bool = False) -> str | None:
    """What replaces the biases of a channels-last QConv whose weights are laid out as ``layout`` (``TILE`` ...)."""
    w = graph.type_of(node.inputs[1])
    if layout != PAIRS:
        return None
    if depthwise(node.attrs.group, w.shape[1]):
        return DEPTHWISE if depthwise_table(node, graph, prod(w.shape[2:]), pooled) is not None else None
    depth = len(stored_taps(w.shape[2:], node.attrs.dilations[-1] if node.attrs.dilations else 1, w.shape[1]))
    table = block_table(node, graph, depth)
    if table is None:
        return None
    if streams_tile(w.shape[0], table, depth):
        return RECORDS if resident(node.attrs, w.shape) else TILE
    return FOLDED if len(table) == 8 * -(-w.shape[0] // 2) else BLOCK


def pack_weights(node: Node, graph: Graph, target=None, pooled: bool = False, layout: str | None = None,
                 table_kind: str | None = None) -> dict[int, np.ndarray]:
    """The weights (M, C/group, k...) of a channels-last QConv as its kernels read them (module docstring), in
    ``layout`` and with the biases replaced by ``table_kind`` (``weights_layout``, ``weights_table`` when
    ``layout`` is None: the select stage decides both): for a DSP CPU as 16-bit pairs of ``w - zw`` along the last axis
    (``spreads_pairs``, ``spread_pairs``): a depthwise layer's as (k..., 1, M / 2),
    another's rows in ``stored_taps`` order, two by two interleaved (``interleave_rows``), as (M, k..., C/2) —
    or, with C not a multiple of four, as the first words of an (M', k..., C) array of the fewest rows M' that
    hold them, the rest zeros (a shape that keeps the window: ``conv_plan`` and row_chains read it there).
    ``pooled``: the layer ends with a pooling (its kernel, integer_conv_pool.py, reads bytes and its own bias)."""
    w, relaid = graph.value_of(node.inputs[1]), relaid_weights(node, graph)
    if layout is None:
        layout = weights_layout(node, graph, target, pooled)
        table_kind = weights_table(node, graph, layout, pooled)
    if layout == HALVES:
        return {1: dense_halves(node, graph, target, relaid)}
    if layout == BYTES:
        return {1: relaid}
    centred = relaid.astype(np.int64) - node.attrs.w_zero_point
    if depthwise(node.attrs.group, w.shape[1]):
        if table_kind != DEPTHWISE:
            return {1: spread_pairs(centred)}
        return {1: spread_pairs(2 * centred), 2: depthwise_table(node, graph, prod(w.shape[2:]), pooled)}
    centred *= 1 + doubles(node.attrs)
    dilation = node.attrs.dilations[-1] if node.attrs.dilations else 1
    order = stored_taps(w.shape[2:], dilation, w.shape[1])
    flat = centred.reshape(w.shape[0], -1)
    rows = np.zeros((w.shape[0], len(order)), np.int64)
    places = [i for i, t in enumerate(order) if t is not None]
    rows[:, places] = flat[:, [t for t in order if t is not None]]
    words = interleave_rows(spread_pairs(rows))
    table = block_table(node, graph, len(order)) if table_kind else None
    biases = {} if table is None else {2: table}
    if table_kind in (TILE, RECORDS):   # the weights live in the stream: input 1 keeps one row (its shape: the window)
        stream = (pointwise_records(spread_pairs(rows), table) if table_kind == RECORDS
                  else tile_stream(words, table, len(order)))
        words, biases = words[:1], {2: stream}
    if w.shape[1] % 4 == 0:
        return {1: words.reshape((-1,) + relaid.shape[1:-1] + (w.shape[1] // 2,)), **biases}
    row = relaid[0].size
    filled = np.zeros(-(-words.size // row) * row, np.int32)
    filled[:words.size] = words.reshape(-1)
    return {1: filled.reshape((-1,) + relaid.shape[1:]), **biases}


def _requant_rows(node: Node, graph: Graph, depth: int) -> tuple[list[tuple[int, int, int, int]], bool] | None:
    """Per output channel of a paired layer under TFLite rounding, (2 b, M, t, K) — the doubled bias its doubled
    sums start at and the narrow requantisation's (multiplier, shift) (integer_dot.Requant, t = S - 32), with
    t + 1 for t and the rounding constant K where every channel's folds (integer_dot.fold_constant, else K 0) —
    and whether they fold; None where the doubled sums of ``depth`` MACs could overflow or the layer has no
    int32 constant bias."""
    attrs = node.attrs
    if len(node.inputs) < 3 or not node.inputs[2] or not doubles(attrs):
        return None
    bias = graph.tensors[node.inputs[2]]
    if not bias.is_constant or graph.type_of(node.inputs[2]).dtype is not DType.INT32:
        return None
    biases = graph.value_of(node.inputs[2]).astype(np.int64)
    channels = len(biases)
    multipliers = [int(m) for m in attrs.multiplier] * (channels if len(attrs.multiplier) == 1 else 1)
    shifts = [int(v) for v in attrs.shift] * (channels if len(attrs.shift) == 1 else 1)
    pairs = narrow_form(attrs.rounding, attrs.out_zero_point, multipliers, shifts)
    x = graph.type_of(node.inputs[0])
    bound = depth * Operand(x.dtype, attrs.x_zero_point).magnitude * 255 + int(np.abs(biases).max(initial=0))
    if pairs is None or bound >= 1 << 30:     # Requant.takes_doubled
        return None
    folds = [fold_constant(attrs.rounding, attrs.out_zero_point, clamp_bounds(attrs)[0], bound, m, s) for m, s in pairs]
    folded = all(k is not None for k in folds)
    return [(2 * b, m, s - NARROW_BASE["tflite"] + folded, k if folded else 0)
            for b, (m, s), k in zip(biases, pairs, folds)], folded


def block_table(node: Node, graph: Graph, depth: int) -> np.ndarray | None:
    """What a paired im2col layer under TFLite rounding reads per pair of output channels, in place of its
    biases (input 2): (2 b0, 2 b1, M0, t0, M1, t1) — the doubled biases its doubled sums start at and the
    narrow requantisation's (multiplier, shift) pairs (integer_dot.Requant, t = S - 32) — and, where every
    channel's rounding constant folds (integer_dot.fold_constant), (t + 1) for t and (K0, K1) after them: the
    block loads them through one pointer, four LDRDs; its length, 6 or 8 words a pair (an odd last channel
    padded with zeros), tells the layout. None where the doubled sums could overflow (the biases and
    parameters then stay where they were)."""
    found = _requant_rows(node, graph, depth)
    if found is None:
        return None
    rows, folded = found
    rows += [(0, 0, 0, 0)] * (len(rows) % 2)
    table = []
    for first, second in zip(rows[::2], rows[1::2]):
        table += [first[0], second[0], first[1], first[2], second[1], second[2]]
        table += [first[3], second[3]] if folded else []
    return np.asarray(table, np.int64).astype(np.int32)


def tile_stream(words: np.ndarray, table: np.ndarray | None, depth: int) -> np.ndarray | None:
    """What a paired im2col layer reads per pair of output channels when one function computes every block of
    a tile (integer_smlad_tile.py), in place of its biases: the pair's doubled biases, its interleaved weight
    rows (``depth`` words), then (M0, t0 + 1, M1, t1 + 1, K0, K1) and 1 if another pair follows, else 0 — one
    pointer walks it, an LDRD, an LDM per group of four taps, an LDM of the parameters. Only for a
    ``block_table`` whose rounding constants fold, an even number of output channels and at most
    ``TILE_GROUPS`` groups (unrolled); None otherwise."""
    channels = words.shape[0]
    if table is None or not streams_tile(channels, table, depth):
        return None
    pairs = channels // 2
    blocks = np.asarray(table).reshape(pairs, 8)
    flat = words.reshape(pairs, depth)
    more = (np.arange(pairs) < pairs - 1).astype(np.int64)[:, None]
    return np.concatenate([blocks[:, :2], flat, blocks[:, 2:], more], axis=1).reshape(-1).astype(np.int32)


def streams_tile(channels: int, table: np.ndarray, depth: int) -> bool:
    """Whether a paired layer of ``channels`` output channels and ``depth`` taps with ``block_table`` ``table``
    reads a ``tile_stream``: an even number of channels, rounding constants that fold, at most ``TILE_GROUPS``."""
    return channels % 2 == 0 and depth // 4 <= TILE_GROUPS and len(table) == 4 * channels


def resident(attrs, w_shape: tuple[int, ...]) -> bool:
    """Whether a 1x1 convolution of stride 1 without padding, of 4 or 8 input channels, keeps each position's
    inputs in registers (integer_pointwise_dsp.py) — with a ``tile_stream`` it reads ``pointwise_records``."""
    return (w_shape[1] in (4, 8) and all(k == 1 for k in w_shape[2:]) and all(s == 1 for s in attrs.strides)
            and not any(attrs.pads))


def pointwise_records(rows: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Per output channel of a ``resident`` layer, its record: the row's doubled weights as 16-bit pairs (``rows``,
    not interleaved), its doubled bias, M, t + 1 and K (from the folded ``block_table``) — one LDM."""
    channels = rows.shape[0]
    blocks = np.asarray(table).reshape(-1, 8)
    parameters = np.stack([blocks[:, [0, 2, 3, 6]], blocks[:, [1, 4, 5, 7]]], axis=1).reshape(-1, 4)[:channels]
    return np.concatenate([rows, parameters], axis=1).reshape(-1).astype(np.int32)


def pointwise_layout(cp: ConvPlan) -> bool:
    """Whether a layer's biases were replaced by its ``pointwise_records`` (the choice's table)."""
    return cp.table == RECORDS


def tile_layout(cp: ConvPlan) -> bool:
    """Whether a paired im2col layer's biases were replaced by its ``tile_stream`` (the choice's table)."""
    return cp.table == TILE


def depthwise_table(node: Node, graph: Graph, taps: int, pooled: bool = False) -> np.ndarray | None:
    """What a paired depthwise layer (integer_depthwise_dsp.py) under TFLite rounding reads per channel in place
    of its bias when every channel's rounding constant folds: (2 b, K, M, t + 1) — its weights are then stored
    doubled, its sums start at 2 b, and each output is SMMLAR, ASR, SSAT (no doubling, no SUB); the table's
    the select stage's choice says so (``DEPTHWISE``). None otherwise, and for a layer that
    ends with a pooling (``pooled``: integer_conv_pool.py reads its own bias)."""
    found = _requant_rows(node, graph, taps)
    if found is None or not found[1] or pooled:
        return None
    return np.asarray([(b, k, m, t) for b, m, t, k in found[0]], np.int64).reshape(-1).astype(np.int32)


def depthwise_layout(cp: ConvPlan) -> bool:
    """Whether a paired depthwise layer's bias was replaced by its ``depthwise_table`` (and its weights doubled)."""
    return cp.table == DEPTHWISE


def block_layout(cp: ConvPlan) -> int | None:
    """Words a pair of output channels takes in the ``block_table`` that replaced the layer's biases (6 or 8),
    None when the biases are the layer's own (the choice's table)."""
    return {BLOCK: 6, FOLDED: 8}.get(cp.table)


def interleave_rows(spread: np.ndarray) -> np.ndarray:
    """(M, ...) rows of 16-bit pairs with the rows of each pair of output channels (2i, 2i + 1) interleaved word
    by word: per group of four taps, (w0, w2) of both rows, then (w1, w3) of both — what the SMLAD loop of a
    block of channels loads with one LDRD each (integer_im2col.py ``_dual_groups``); an odd M's last row stays
    as it is."""
    m = spread.shape[0]
    words = spread.reshape(m, -1, 2)
    pairs = words[:m // 2 * 2].reshape(m // 2, 2, words.shape[1], 2).transpose(0, 2, 3, 1)
    return np.concatenate([pairs.reshape(-1), words[m // 2 * 2:].reshape(-1)]).reshape(spread.shape)


def weight_shape(w_shape: tuple[int, ...], channels_last: bool, packed_depthwise: bool) -> tuple[int, ...]:
    """The (M, C/group, k...) shape of weights stored as ``pack_weights`` lays them out."""
    if not channels_last:
        return w_shape
    if packed_depthwise:
        return (w_shape[-1], 1) + w_shape[:-2]
    return (w_shape[0], w_shape[-1]) + w_shape[1:-1]


@dataclass(frozen=True)
class ConvPlan:
    x: TensorRef
    w: TensorRef
    bias: TensorRef | None
    y: TensorRef
    mac: Mac
    group: int
    channels_last: bool
    axes: list[Axis]    # the spatial axes' geometry (conv.py)
    dual: bool          # SMLAD dot products (activations stored x0 x2 x1 x3 per group of four taps)
    madd: int           # x86 PMADDWD dot products of this many 16-bit lanes (0: plain loops)
    positions: int      # output positions per tile (rows of the im2col buffer)
    block: int          # output channels per register block
    doubled: bool = False   # paired weights stored doubled (``doubles``): the sums are 2 Σ
    halves: bool = False    # two rows' weights as int16 halfwords 256 w1 + w0 (integer_halves.py)
    paired: bool = False    # weights stored as centred 16-bit pairs (int32 words: ``pack_weights``, ``PAIRS``)
    table: str | None = None    # what replaced the biases (``weights_table``)

    @property
    def sums(self) -> Mac:
        """The MACs of Σ (x - zx) (w - zw) itself (``mac`` bounds the doubled sums of doubled weights)."""
        return replace(self.mac, w=Operand(DType.INT16, 0, 255)) if self.doubled else self.mac

    @property
    def xa(self) -> Activation:
        return Activation(self.x, self.channels_last)

    @property
    def ya(self) -> Activation:
        return Activation(self.y, self.channels_last)

    @property
    def in_group(self) -> int:
        return self.xa.channels // self.group

    @property
    def out_group(self) -> int:
        return self.ya.channels // self.group

    @property
    def depthwise(self) -> bool:
        return depthwise(self.group, self.in_group)

    @property
    def element(self) -> ir.IntType:
        return I16 if self.mac.x.centered_is_i16 else I32

    @property
    def order(self) -> tuple[int | None, ...] | None:
        """The stored order of a paired layer's taps (``stored_taps``) when it is not the natural one."""
        if not self.paired or self.depthwise or self.in_group % 4 == 0:
            return None
        return stored_taps(tuple(axis.kernel for axis in self.axes), self.axes[-1].dilation, self.in_group)

    @property
    def whole(self) -> int:
        """Taps in whole groups of four (SMLAD layout); the rest, depth % 4, are single MACs."""
        return self.mac.depth // 4 * 4 if self.dual else 0

    @property
    def size(self) -> int:
        """Elements of the buffer (its rows start on 32-bit words)."""
        return self.positions * (self.mac.depth + self.mac.depth % 2)

    @property
    def buffer_bytes(self) -> int:
        """The im2col buffer in bytes, whole 32-bit words (the layer's workspace)."""
        return -(-self.size * (self.element.width // 8) // 4) * 4

    @property
    def swapped(self) -> bool:
        """Whether the buffer holds each group of four taps as x0 x2 x1 x3: SXTB16's pairs (w0, w2), (w1, w3)
        of byte weights, or weights stored as those pairs (``PAIRS``)."""
        return self.w.type.dtype.itemsize == 1 or self.paired or self.halves

    def group_slot(self, b: ir.IRBuilder, p: Value, q: Value, j: int) -> Value:
        """slot(p, 4 * q + j) for j < 4 and 4 * q + 4 <= depth."""
        if not self.dual:
            return affine(b, j, (p, self.mac.depth + self.mac.depth % 2), (q, 4))
        return affine(b, [0, 2, 1, 3][j] if self.swapped else j, (q, 4 * self.positions), (p, 4))

    def slot(self, b: ir.IRBuilder, p: Value | int, k: Value | int) -> Value:
        """Where tap k of position p goes. Plain: row p, column k. SMLAD: group g of four taps of the tile's
        positions at 4 * positions * g, each position's four values in a row as two words of pairs — (x0, x2)
        then (x1, x3) when the weights are bytes (SXTB16's pairs) or stored as those pairs, else (x0, x1)
        then (x2, x3) — so that a block of two positions loads a group in one LDM (integer_smlad.py); then
        each position's last depth % 4."""
        depth, positions = self.mac.depth, self.positions
        if not self.dual:
            return affine(b, 0, (p, depth + depth % 2), (k, 1))
        if isinstance(k, int):
            if k >= self.whole:
                return affine(b, self.whole * positions + k - self.whole, (p, depth - self.whole))
            return affine(b, k // 4 * 4 * positions + ([0, 2, 1, 3][k % 4] if self.swapped else k % 4), (p, 4))
        j = b.and_(k, const(3))
        if self.swapped:    # (j & 1) * 2 + (j >> 1)
            j = affine(b, 0, (b.and_(j, const(1)), 2), (b.lshr(j, const(1)), 1))
        grouped = affine(b, 0, (b.and_(k, const(~3)), positions), (p, 4), (j, 1))
        if self.whole == depth:
            return grouped
        tail = affine(b, self.whole * positions - self.whole, (p, depth - self.whole), (k, 1))
        return b.select(b.icmp_unsigned("<", k, const(self.whole)), grouped, tail)


def conv_plan(k: KernelContext) -> ConvPlan:
    x, w, y = k.inputs[0], k.inputs[1], k.outputs[0]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    last, group = bool(k.attrs.channels_last), k.attrs.group
    xa = Activation(x, last)
    packed_depthwise = depthwise(group, xa.channels // group)
    w_shape = weight_shape(w.shape, last, packed_depthwise)
    out_channels = Activation(y, last).channels
    # how the pack stage laid the weights, as the select stage decided (``weights_layout``)
    layout = k.choice.param("weights", BYTES) if k.choice is not None else BYTES
    table = k.choice.param("table") if k.choice is not None else None
    pairs, halves = layout == PAIRS, layout == HALVES and not packed_depthwise
    if halves:      # int16 halfwords of two rows each (integer_halves.py): 8-bit weights of zero point 0
        w_shape = (out_channels,) + w_shape[1:]
    depth = prod(w_shape[1:])
    if pairs:       # words of two centred 16-bit weights (pack_weights): (k..., 1, M / 2), (M, k..., C / 2)
        if packed_depthwise:    # or (M', k..., C), the first words of which hold the pairs
            w_shape = (w_shape[0] * 2,) + w_shape[1:]
        else:
            w_shape = (Activation(y, last).channels, xa.channels // group) + w_shape[2:]
            depth = prod(w_shape[1:]) + -prod(w_shape[1:]) % 4     # whole groups (stored_taps)
    win = Conv.geometry(k.attrs, first_shape(x.shape, last), w_shape)
    # paired: centred 8-bit weights, |w - zw| <= 255
    doubled = pairs and doubles(k.attrs) and (not packed_depthwise or table == DEPTHWISE)
    w_side = (Operand(DType.INT16, 0, 255 * (1 + doubled)) if pairs else Operand(DType.INT8, 0) if halves
              else operand(k, w, k.attrs.w_zero_point, "weight"))
    # a fused convolution's halfwords come with the input's zero point folded into the biases (integer_conv_pool.py)
    x_zero = 0 if halves and not last else k.attrs.x_zero_point
    mac = Mac(operand(k, x, x_zero, "input"), w_side, depth)
    dual = mac.dual(k.target)
    element = 2 if mac.x.centered_is_i16 else 4
    wanted = 2 if k.target.is_cortex_m else 4       # 2 x 2 accumulators: what 13 Thumb registers hold
    # no more rows than the layer has positions (a dense layer as a 1x1 convolution has one)
    positions = max(1, min(wanted, prod(win.out), SCRATCH_BYTES // ((mac.depth + 1) * element)))
    madd = flavour_of("madd.lanes")(k.target) if not dual and madd_fits(mac) else 0
    # 4 x 4 accumulators of AVX-512's 32 registers; with SMLAD, 2 x 2, or 4 channels of a single position
    # (a dense layer: each pair of inputs loaded once for four channels) — 2 over weights stored as pairs,
    # whose rows are interleaved two by two (interleave_rows)
    block = 4 if madd == 32 or (dual and positions == 1 and not pairs) else 2
    return ConvPlan(x, w, bias, y, mac, group, last, axes_of(win, xa.sizes), dual, madd, positions, block, doubled,
                    halves and dual, pairs, table)


def tap_offsets(cp: ConvPlan) -> list[int]:
    """Input offset of every tap of a weight row from its position's window origin in the group's first
    channel: taps (ci, k0, k1, ...) channels first, (k0, k1, ..., ci) channels last."""
    spatial = [sum(k * axis.dilation * stride for k, axis, stride in zip(ks, cp.axes, cp.xa.spatial))
               for ks in itertools.product(*(range(axis.kernel) for axis in cp.axes))]
    channel = [ci * cp.xa.channel for ci in range(cp.in_group)]
    pairs = itertools.product(spatial, channel) if cp.channels_last else itertools.product(channel, spatial)
    return [a + c for a, c in pairs]


def tap_index(b: ir.IRBuilder, cp: ConvPlan, ci: Value, ks: list[Value]) -> Value:
    """The place in a weight row of the tap at kernel position ``ks`` of the group's channel ``ci``."""
    kernel = tuple(axis.kernel for axis in cp.axes)
    spatial = [(kk, stride * (cp.in_group if cp.channels_last else 1)) for kk, stride in zip(ks, strides_of(kernel))]
    return affine(b, 0, (ci, 1 if cp.channels_last else prod(kernel)), *spatial)


def window_inside(b: ir.IRBuilder, coords: list[Value], limits: list[tuple[int, int]]) -> Value | None:
    """Whether every tap of the window at ``coords`` reads inside the input (``Axis.interior`` per axis);
    None when no axis can cross the padding."""
    inside = None
    for o, (lo, hi) in zip(coords, limits):
        ok = b.icmp_unsigned("<", b.sub(o, const(lo)), const(max(0, hi - lo)))
        inside = ok if inside is None else b.and_(inside, ok)
    return inside


def tap_at(b: ir.IRBuilder, axes, origins: list[Value], ks: list[Value | int], spatial: tuple[int, ...],
           channel: Value) -> tuple[Value, Value]:
    """(flat input index, inside) of tap ``ks`` of the window at ``origins`` (``spatial``: the input's strides
    along the axes) in the channel starting at ``channel``: the index clamped to 0 along an axis where the
    tap reads the padding."""
    terms, inside = [(channel, 1)], None
    for axis, origin, kk, stride in zip(axes, origins, ks, spatial):
        at = affine(b, 0, (origin, 1), (kk, axis.dilation))
        ok = b.icmp_unsigned("<", at, const(axis.size))
        inside = ok if inside is None else b.and_(inside, ok)
        terms.append((b.select(ok, at, const(0)), stride))
    return affine(b, 0, *terms), inside
