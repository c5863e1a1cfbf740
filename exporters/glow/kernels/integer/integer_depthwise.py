"""Depthwise QConv (one input channel per group) without im2col, in either layout.

Channels first (``qconv_direct``, windows of at most ``DIRECT_TAPS`` taps): each output channel's centred
weights are held across its positions and every position sums its taps straight from the input.

Channels last (``qconv_depthwise_last``, any window): the channels of a position are contiguous, so the
kernel works on vectors of channels. The weights were re-laid at export as (k..., 1, M)
(integer_conv_plan.py), one contiguous vector of channels per tap. Per output position, each block of
output channels sums, over the taps inside the input, the centred inputs ``x - zx`` (the block's input
channels, each repeated ``multiplier`` times) times the centred weights of the tap: a padded tap adds
``(zx - zx) * w = 0``, so the border positions just skip their outside taps (each tested, unrolled, in a
window of at most ``DIRECT_TAPS`` taps; loops over conv.py's ``Axis.taps`` ranges in a larger one), and
interior positions run every tap unrolled with constant offsets. Then the bias and the requantisation,
per channel. On Cortex-M with the DSP extension (8-bit operands, multiplier 1, i32 sums: ``uses_dsp``), a
layer of a multiple of four channels is the select stage's ``qconv.depthwise_dsp`` (integer_depthwise_dsp.py:
blocks of three positions along a row; Cortex-M7, int8 3x3 over 32 channels of 32x32, pads 1: 2.88
instructions per MAC, requantisation included; channels first: 5.12); another channel count keeps one
position here, blocks of four channels: one word of inputs
becomes the centred pairs (x0, x2), (x1, x3) by SXTAB16 (sign- or zero-extend and add ``-zx`` in one
instruction), a word of weights (w0, w2), (w1, w3) by SXTB16, and SMLABB/SMLATT take the four products:
10 instructions per tap for 4 MACs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import ConvPlan, tap_at, tap_offsets, window_inside
from pegasus.exporters.glow.kernels.integer.integer_dot import (
    Mac,
    Requant,
    acc_bound,
    channel_block,
    dsp,
    load_word,
    seeds_bias,
)
from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const, loop_nest
from pegasus.exporters.glow.llvm.requant import widen
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.exporters.glow.llvm.tiles import for_tiles, pieces, range_nest
from pegasus.exporters.glow.llvm.types import I32, llvm_type
from pegasus.ops.spatial import prod

Value = ir.Value


#: Most taps a depthwise window may have for ``direct_taps`` (its weights are held across the positions).
DIRECT_TAPS = 64


def direct_taps(cp: ConvPlan) -> bool:
    """A channels-first depthwise layer with a small window: ``qconv_direct`` instead of im2col."""
    return not cp.channels_last and cp.depthwise and cp.mac.depth <= DIRECT_TAPS


def qconv_direct(k: KernelContext, cp: ConvPlan) -> None:
    """A depthwise QConv: per output channel, its centred weights ``w̃ = w - zw`` are loaded once, and each
    output position sums ``x * w̃`` over its taps straight from the input — constant offsets inside the
    input, a per-tap test on the border (padding reads ``zx``) — then subtracts ``zx * Σ w̃`` (once per
    channel). The sums wrap in the accumulator type, and their exact total fits it (``Mac.acc``). Cortex-M7,
    int8 3x3 over 32 channels of 32x32: 6.3 instructions per MAC, requantisation included (im2col: 8.3)."""
    b, mac = k.builder, cp.mac
    acc = mac.acc
    rq = Requant(k.table, k.attrs, cp.y, acc_bound(mac, cp.bias))
    axes, xa, ya = cp.axes, cp.xa, cp.ya
    offsets = tap_offsets(cp)
    kernels = list(itertools.product(*(range(axis.kernel) for axis in axes)))
    limits = [axis.interior() for axis in axes]
    out_strides = strides_of(tuple(axis.out for axis in axes))

    def wide(value: Value, signed: bool) -> Value:
        return widen(b, value, acc, signed)

    with loop_nest(b, [cp.x.shape[0], ya.channels], names="nc") as (batch, chan):
        row = b.mul(chan, const(mac.depth))
        weights = [wide(cp.w.load(b, affine(b, t, (row, 1))), mac.w.signed) for t in range(mac.depth)]
        if mac.w.zero_point:
            weights = [b.sub(weight, ir.Constant(acc, mac.w.zero_point)) for weight in weights]
        total_w = weights[0]
        for weight in weights[1:]:
            total_w = b.add(total_w, weight)
        shift = b.mul(total_w, ir.Constant(acc, mac.x.zero_point))
        x_chan = affine(b, 0, (batch, xa.batch), (b.udiv(chan, const(cp.out_group)), xa.channel))
        y_chan = affine(b, 0, (batch, ya.batch), (chan, ya.channel))
        with loop_nest(b, [axis.out for axis in axes], names="abcdefgh") as coords:
            origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
            inside = window_inside(b, coords, limits)

            def interior() -> Value:
                base = affine(b, 0, (x_chan, 1), *zip(origins, xa.spatial))
                total = ir.Constant(acc, 0)
                for weight, offset in zip(weights, offsets):
                    total = b.add(total, b.mul(wide(cp.x.load(b, affine(b, offset, (base, 1))), mac.x.signed),
                                               weight))
                return total

            def border() -> Value:
                total = ir.Constant(acc, 0)
                for weight, ks in zip(weights, kernels):
                    flat, ok = tap_at(b, axes, origins, list(ks), xa.spatial, x_chan)
                    value = b.select(ok, wide(cp.x.load(b, flat), mac.x.signed), ir.Constant(acc, mac.x.zero_point))
                    total = b.add(total, b.mul(value, weight))
                return total

            with b.if_else(inside, likely=True) as (then, otherwise):
                with then:
                    fast, fast_block = interior(), b.block
                with otherwise:
                    slow, slow_block = border(), b.block
            total = b.phi(acc)
            total.add_incoming(fast, fast_block)
            total.add_incoming(slow, slow_block)
            bias = None if cp.bias is None else cp.bias.load(b, chan)
            position = affine(b, 0, *zip(coords, out_strides))
            cp.y.store(b, rq(b, b.sub(total, shift), chan, bias), affine(b, 0, (y_chan, 1), (position, ya.position)))


# ---- channels last -----------------------------------------------------------------------------------


def _vector(element: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(element, lanes)


def _splat(value: int, typ: ir.IntType, lanes: int) -> ir.Constant:
    return ir.Constant(_vector(typ, lanes), [ir.Constant(typ, value)] * lanes)


def dsp_operands(mac: Mac, target, multiplier: int, x_bytes: int, w_bytes: int, paired: bool) -> bool:
    """Four channels by SXTAB16/SXTB16 and SMLAxy: 8-bit operands (weights of ``w_bytes`` as laid, or paired),
    multiplier 1, i32 sums, a DSP CPU (``uses_dsp``; the select stage asks it before the weights are laid)."""
    return mac.dual(target) and multiplier == 1 and mac.acc is I32 and x_bytes == 1 and (w_bytes == 1 or paired)


def uses_dsp(k: KernelContext, cp: ConvPlan) -> bool:
    """Whether a layer's blocks take four channels by SXTAB16/SXTB16 and SMLAxy (``dsp_operands``)."""
    return dsp_operands(cp.mac, k.target, cp.out_group, cp.x.type.dtype.itemsize, cp.w.type.dtype.itemsize,
                        cp.paired)


def depthwise_block(k: KernelContext, cp: ConvPlan) -> tuple[int, int]:
    """(lanes, channels) of a block: four channels on the DSP path, else ``channel_block``'s."""
    if uses_dsp(k, cp):
        return 4, 4
    return channel_block(k.target, cp.mac.acc, cp.out_group, cp.ya.channels)


@dataclass
class _DepthwiseLast:
    """One channels-last depthwise QConv layer (``qconv_depthwise_last``): blocks of ``size`` output channels,
    ``lanes`` per vector (the DSP path: four, by SMLABB/SMLATT), at each output position."""

    b: ir.IRBuilder
    cp: ConvPlan
    rq: Requant
    lanes: int
    size: int
    dsp_path: bool
    w_steps: list[int]
    seeded: bool

    def tap_vector(self, ref, element, flat: Value, indices: list[int], signed: bool, zero: int) -> Value:
        """One lane per index i: ref[flat + i] - zero, widened to ``acc``."""
        b, acc = self.b, self.cp.mac.acc
        span, count = indices[-1] + 1, len(indices)
        pointer = b.bitcast(ref.address(b, flat), _vector(element, span).as_pointer())
        loaded = b.load(pointer, align=element.width // 8)
        if span != count:
            loaded = b.shuffle_vector(loaded, loaded, ir.Constant(_vector(I32, count), indices))
        wide = (b.sext if signed else b.zext)(loaded, _vector(acc, count))
        return b.sub(wide, _splat(zero, acc, count)) if zero else wide

    def block(self, x_base: Value, y_base: Value, m0: Value, count: int, taps) -> None:
        """Output channels m0..m0+count-1 at one position; ``taps(body)`` calls body(x offset, w offset) per
        tap read (offsets of the tap's pixel in X and of its weight vector in W')."""
        b, cp, acc, mult = self.b, self.cp, self.cp.mac.acc, self.cp.out_group
        c0 = b.udiv(m0, const(mult)) if mult > 1 else m0
        widths = pieces(count, self.lanes) if not self.dsp_path else [(0, count)]
        slots = [entry_alloca(b, _vector(acc, width)) for _, width in widths]
        for slot, (offset, width) in zip(slots, widths):
            start = ir.Constant(_vector(acc, width), None)
            if self.seeded:      # the sums start at the biases: no add per output after them
                pointer = b.bitcast(cp.bias.address(b, affine(b, offset, (m0, 1))), _vector(acc, width).as_pointer())
                start = b.load(pointer, align=4)
            b.store(start, slot)
        taps(lambda x_at, w_at: self._tap(slots, widths, m0, c0, x_at, w_at))
        self._finish(slots, widths, m0, y_base)

    def _tap(self, slots: list[Value], widths: list[tuple[int, int]], m0: Value, c0: Value, x_at: Value,
             w_at: Value) -> None:
        """One tap's products added to the block's sums."""
        b, cp, mac, mult = self.b, self.cp, self.cp.mac, self.cp.out_group
        for slot, (offset, width) in zip(slots, widths):
            if self.dsp_path and width == 4:
                w_first = b.lshr(m0, const(1)) if cp.paired else m0
                b.store(_dsp_tap(b, cp, b.load(slot), affine(b, 0, (x_at, 1), (c0, 1)),
                                 affine(b, 0, (w_at, 1), (w_first, 1))), slot)
                continue
            x_first = affine(b, offset // mult, (x_at, 1), (c0, 1))
            x_lanes = [(offset + lane) // mult - offset // mult for lane in range(width)]
            xs = self.tap_vector(cp.x, llvm_type(cp.x.type.dtype), x_first, x_lanes, mac.x.signed, mac.x.zero_point)
            ws = self.tap_vector(cp.w, llvm_type(cp.w.type.dtype), affine(b, offset, (w_at, 1), (m0, 1)),
                                 list(range(width)), mac.w.signed, mac.w.zero_point)
            b.store(b.add(b.load(slot), b.mul(xs, ws)), slot)

    def _finish(self, slots: list[Value], widths: list[tuple[int, int]], m0: Value, y_base: Value) -> None:
        """The block's sums requantised and stored."""
        b, cp = self.b, self.cp
        terms, places = [], []
        for slot, (offset, width) in zip(slots, widths):
            sums = b.load(slot)
            for lane in range(width):
                chan = affine(b, offset + lane, (m0, 1))
                bias = None if cp.bias is None or self.seeded else cp.bias.load(b, chan)
                terms.append((b.extract_element(sums, const(lane)), chan, bias))
                places.append(offset + lane)
        for place, value in zip(places, self.rq.many(b, terms)):
            cp.y.store(b, value, affine(b, place, (y_base, 1), (m0, 1)))

    def position(self, batch: Value, coords: list[Value]) -> None:
        """Every block of one output position: the interior's taps unchecked, a border's tested."""
        b, cp, axes = self.b, self.cp, self.cp.axes
        origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
        x_base = affine(b, 0, (batch, cp.xa.batch), *zip(origins, cp.xa.spatial))
        y_base = affine(b, 0, (batch, cp.ya.batch), *zip(coords, cp.ya.spatial))
        steps = [axis.dilation * stride for axis, stride in zip(axes, cp.xa.spatial)]

        def sweep(taps) -> None:
            for_tiles(b, 0, cp.ya.channels, self.size, lambda m0, count: self.block(x_base, y_base, m0, count, taps))

        limits = [axis.interior() for axis in axes]
        checked = [(o, limit) for o, limit, axis in zip(coords, limits, axes) if limit != (0, axis.out)]
        inside = window_inside(b, [o for o, _ in checked], [limit for _, limit in checked])

        def interior(body) -> None:
            self._interior(x_base, steps, body)

        if inside is None:
            sweep(interior)
            return
        with b.if_else(inside, likely=True) as (then, otherwise):
            with then:
                sweep(interior)
            with otherwise:
                sweep(lambda body: self._border(x_base, coords, origins, steps, body))

    def _interior(self, x_base: Value, steps: list[int], body) -> None:
        b, kernel = self.b, [axis.kernel for axis in self.cp.axes]
        for ks in itertools.product(*(range(n) for n in kernel)):
            body(affine(b, sum(kk * step for kk, step in zip(ks, steps)), (x_base, 1)),
                 const(sum(kk * step for kk, step in zip(ks, self.w_steps))))

    def _border(self, x_base: Value, coords: list[Value], origins: list[Value], steps: list[int], body) -> None:
        """The taps inside the input: each tested (unrolled) in a small window, else loops over their
        ranges."""
        b, axes = self.b, self.cp.axes
        kernel = [axis.kernel for axis in axes]
        if prod(kernel) > DIRECT_TAPS:
            with range_nest(b, [axis.taps(b, o) for axis, o in zip(axes, coords)]) as ks:
                body(affine(b, 0, (x_base, 1), *zip(ks, steps)), affine(b, 0, *zip(ks, self.w_steps)))
            return
        inside = [[b.icmp_unsigned("<", affine(b, kk * axis.dilation, (origin, 1)), const(axis.size))
                   for kk in range(axis.kernel)] for axis, origin in zip(axes, origins)]
        for ks in itertools.product(*(range(n) for n in kernel)):
            ok = inside[0][ks[0]]
            for axis_inside, kk in zip(inside[1:], ks[1:]):
                ok = b.and_(ok, axis_inside[kk])
            with b.if_then(ok):
                body(affine(b, sum(kk * step for kk, step in zip(ks, steps)), (x_base, 1)),
                     const(sum(kk * step for kk, step in zip(ks, self.w_steps))))


def qconv_depthwise_last(k: KernelContext, cp: ConvPlan) -> None:
    """A channels-last depthwise QConv (module docstring; ``_DepthwiseLast``)."""
    b = k.builder
    rq = Requant(k.table, k.attrs, cp.y, acc_bound(cp.mac, cp.bias))
    lanes, size = depthwise_block(k, cp)
    kernel = tuple(axis.kernel for axis in cp.axes)
    # W' is (k..., 1, M), or (k..., 1, M / 2) words of two 16-bit weights (integer_conv_weights.spread_pairs)
    w_steps = [stride * cp.ya.channels // (2 if cp.paired else 1) for stride in strides_of(kernel)]
    layer = _DepthwiseLast(b, cp, rq, lanes, size, uses_dsp(k, cp), w_steps, seeds_bias(cp.mac, cp.bias))
    with loop_nest(b, [cp.x.shape[0], *(axis.out for axis in cp.axes)], names="nabcdefg") as (batch, *coords):
        layer.position(batch, coords)


def _dsp_tap(b: ir.IRBuilder, cp: ConvPlan, sums: Value, x_flat: Value, w_flat: Value) -> Value:
    """<4 x i32> sums + the products of one tap for four channels: SXTAB16/UXTAB16 centre the inputs'
    (x0, x2), (x1, x3) pairs, SXTB16/UXTB16 spread the weights' (w0, w2), (w1, w3), SMLABB/SMLATT multiply."""
    module, mac = b.module, cp.mac
    xtab = dsp(module, "sxtab16" if mac.x.signed else "uxtab16", 2)
    xtb = dsp(module, "sxtb16" if mac.w.signed else "uxtb16", 1)
    smlabb, smlatt = dsp(module, "smlabb", 3), dsp(module, "smlatt", 3)
    minus_zx = ir.Constant(I32, (-mac.x.zero_point & 0xFFFF) * 0x10001)

    def rotated(word: Value) -> Value:
        return b.or_(b.lshr(word, const(8)), b.shl(word, const(24)))

    x_word = load_word(b, cp.x, x_flat)
    xs = [b.call(xtab, [minus_zx, x_word]), b.call(xtab, [minus_zx, rotated(x_word)])]
    if cp.paired:        # spread and centred at export
        ws = [cp.w.load(b, w_flat), cp.w.load(b, affine(b, 1, (w_flat, 1)))]
    else:
        w_word = load_word(b, cp.w, w_flat)
        ws = [b.call(xtb, [w_word]), b.call(xtb, [rotated(w_word)])]
    if mac.w.zero_point:
        ssub16 = dsp(module, "ssub16", 2)
        zw = ir.Constant(I32, (mac.w.zero_point & 0xFFFF) * 0x10001)
        ws = [b.call(ssub16, [w, zw]) for w in ws]
    lanes = [b.extract_element(sums, const(lane)) for lane in range(4)]
    lanes[0] = b.call(smlabb, [xs[0], ws[0], lanes[0]])
    lanes[2] = b.call(smlatt, [xs[0], ws[0], lanes[2]])
    lanes[1] = b.call(smlabb, [xs[1], ws[1], lanes[1]])
    lanes[3] = b.call(smlatt, [xs[1], ws[1], lanes[3]])
    out = ir.Constant(sums.type, None)
    for lane, value in enumerate(lanes):
        out = b.insert_element(out, value, const(lane))
    return out
