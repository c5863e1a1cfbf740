"""How a QConv's weights are laid at export for the implementation the select stage chose (the pack stage,
exporters/glow/pipeline.py, applies ``pack_weights``): channels-last rows, 16-bit pairs and halves for
Cortex-M's DSP kernels, and the tables that replace a paired layer's biases (block, tile stream, pointwise
records, depthwise). NumPy only; integer_conv_plan.py reads the layout back from the ``Choice``.
"""

from __future__ import annotations

import numpy as np

from pegasus.exporters.glow.kernels.integer.integer_conv_plan import (
    BLOCK,
    BYTES,
    DEPTHWISE,
    FOLDED,
    HALVES,
    PAIRS,
    RECORDS,
    TILE,
    TILE_GROUPS,
    UNROLLED_ROWS,
    depthwise,
    doubles,
    stored_taps,
)
from pegasus.exporters.glow.kernels.integer.integer_dot import (
    NARROW_BASE,
    Operand,
    fold_constant,
    narrow_form,
)
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour_of
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ops.integer import clamp_bounds
from pegasus.ops.spatial import prod


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


def spread_pairs(w: np.ndarray) -> np.ndarray:
    """(..., M) weights, already centred, as int32 words of 16-bit pairs: per group of four channels
    (w0 | w2 << 16, w1 | w3 << 16) — what SXTB16 would make of the bytes, made once at export."""
    v = w.astype(np.int64).reshape(w.shape[:-1] + (w.shape[-1] // 4, 4)) & 0xFFFF
    words = np.stack([v[..., 0] | v[..., 2] << 16, v[..., 1] | v[..., 3] << 16], axis=-1)
    return words.astype(np.uint32).view(np.int32).reshape(w.shape[:-1] + (w.shape[-1] // 2,))


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


def interleave_rows(spread: np.ndarray) -> np.ndarray:
    """(M, ...) rows of 16-bit pairs with the rows of each pair of output channels (2i, 2i + 1) interleaved word
    by word: per group of four taps, (w0, w2) of both rows, then (w1, w3) of both — what the SMLAD loop of a
    block of channels loads with one LDRD each (integer_im2col.py ``_dual_groups``); an odd M's last row stays
    as it is."""
    m = spread.shape[0]
    words = spread.reshape(m, -1, 2)
    pairs = words[:m // 2 * 2].reshape(m // 2, 2, words.shape[1], 2).transpose(0, 2, 3, 1)
    return np.concatenate([pairs.reshape(-1), words[m // 2 * 2:].reshape(-1)]).reshape(spread.shape)
