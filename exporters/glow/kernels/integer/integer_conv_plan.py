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

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_dot import (
    SCRATCH_BYTES,
    Mac,
    Operand,
    madd_fits,
    operand,
)
from pegasus.exporters.glow.kernels.integer.integer_flavours import flavour_of
from pegasus.exporters.glow.llvm.loops import affine, const
from pegasus.exporters.glow.llvm.tensors import TensorRef, strides_of
from pegasus.exporters.glow.llvm.types import I16, I32
from pegasus.exporters.glow.llvm.windows import Axis, axes_of
from pegasus.ir.dtypes import DType
from pegasus.ops.conv import Conv
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


#: how a layer's weights are stored, decided by the select stage (``weights_layout``, the choice's "weights"):
#: centred 16-bit pairs (``spreads_pairs``), two rows' bytes as halfwords (integer_halves.py) or as imported
PAIRS, HALVES, BYTES = "pairs", "halves", "bytes"
#: what replaces the biases of a layer of ``PAIRS`` (the choice's "table", ``weights_table``; None: its biases stay):
#: a ``block_table`` of 6 or 8 words a pair of channels (``FOLDED``), a ``tile_stream``, ``pointwise_records``, a
#: ``depthwise_table``
BLOCK, FOLDED, TILE, RECORDS, DEPTHWISE = "block", "folded_block", "tile", "records", "depthwise"


def pointwise_layout(cp: ConvPlan) -> bool:
    """Whether a layer's biases were replaced by its ``pointwise_records`` (the choice's table)."""
    return cp.table == RECORDS


def tile_layout(cp: ConvPlan) -> bool:
    """Whether a paired im2col layer's biases were replaced by its ``tile_stream`` (the choice's table)."""
    return cp.table == TILE


def depthwise_layout(cp: ConvPlan) -> bool:
    """Whether a paired depthwise layer's bias was replaced by its ``depthwise_table`` (and its weights doubled)."""
    return cp.table == DEPTHWISE


def block_layout(cp: ConvPlan) -> int | None:
    """Words a pair of output channels takes in the ``block_table`` that replaced the layer's biases (6 or 8),
    None when the biases are the layer's own (the choice's table)."""
    return {BLOCK: 6, FOLDED: 8}.get(cp.table)


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
