"""What every QConv kernel shares (integer_conv.py picks the kernel): the plan of a layer (operands and
accumulator, grouping, the dot-product flavour the target offers, tile sizes) and the geometry of its taps
(their input offsets, whether a window lies inside the input, where one tap reads).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.kernels.integer_dot import SCRATCH_BYTES, Mac, madd_fits, operand
from pegasus.exporters.glow.kernels.integer_madd import madd_lanes
from pegasus.exporters.glow.kernels.linear import affine
from pegasus.exporters.glow.kernels.registry import KernelContext, TensorRef
from pegasus.exporters.glow.kernels.requant import I16, I32
from pegasus.exporters.glow.llvm.loops import const
from pegasus.ops.spatial import prod

Value = ir.Value


@dataclass(frozen=True)
class ConvPlan:
    x: TensorRef
    w: TensorRef
    bias: TensorRef | None
    y: TensorRef
    mac: Mac
    group: int
    dual: bool          # SMLAD dot products (activations stored x0 x2 x1 x3 per group of four taps)
    madd: int           # x86 PMADDWD dot products of this many 16-bit lanes (0: plain loops)
    positions: int      # output positions per tile (rows of the im2col buffer)
    block: int          # output channels per register block

    @property
    def in_group(self) -> int:
        return self.x.shape[1] // self.group

    @property
    def out_group(self) -> int:
        return self.y.shape[1] // self.group

    @property
    def element(self) -> ir.IntType:
        return I16 if self.mac.x.centered_is_i16 else I32

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

    def group_slot(self, b: ir.IRBuilder, p: Value, q: Value, j: int) -> Value:
        """slot(p, 4 * q + j) for j < 4 and 4 * q + 4 <= depth."""
        if not self.dual:
            return affine(b, j, (p, self.mac.depth + self.mac.depth % 2), (q, 4))
        order = [0, 2, 1, 3] if self.w.type.dtype.itemsize == 1 else [0, 1, 2, 3]
        return affine(b, order[j], (q, 4 * self.positions), (p, 4))

    def slot(self, b: ir.IRBuilder, p: Value | int, k: Value | int) -> Value:
        """Where tap k of position p goes. Plain: row p, column k. SMLAD: the groups of four taps of the
        tile's positions side by side (group g of position p at 4 * (g * positions + p)), in the order
        x0 x2 x1 x3 when the weights are bytes (SXTB16's pairs); then each position's last depth % 4."""
        depth, positions = self.mac.depth, self.positions
        if not self.dual:
            return affine(b, 0, (p, depth + depth % 2), (k, 1))
        if isinstance(k, int):
            if k >= self.whole:
                return affine(b, self.whole * positions + k - self.whole, (p, depth - self.whole))
            j = [0, 2, 1, 3][k % 4] if self.w.type.dtype.itemsize == 1 else k % 4
            return affine(b, k // 4 * 4 * positions + j, (p, 4))
        j = b.and_(k, const(3))
        if self.w.type.dtype.itemsize == 1:
            j = b.or_(b.shl(b.and_(j, const(1)), const(1)), b.lshr(j, const(1)))
        grouped = affine(b, 0, (b.and_(k, const(~3)), positions), (p, 4), (j, 1))
        if self.whole == depth:
            return grouped
        tail = affine(b, self.whole * positions - self.whole, (p, depth - self.whole), (k, 1))
        return b.select(b.icmp_unsigned("<", k, const(self.whole)), grouped, tail)


def conv_plan(k: KernelContext) -> ConvPlan:
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    mac = Mac(operand(k, x, k.attrs.x_zero_point, "input"), operand(k, w, k.attrs.w_zero_point, "weight"),
              prod(w.shape[1:]))
    dual = mac.dual(k.target)
    element = 2 if mac.x.centered_is_i16 else 4
    wanted = 2 if k.target.is_cortex_m else 4       # 2 x 2 accumulators: what 13 Thumb registers hold
    positions = max(1, min(wanted, SCRATCH_BYTES // ((mac.depth + 1) * element)))
    madd = madd_lanes(k.target) if not dual and madd_fits(mac) else 0
    block = 4 if madd == 32 else 2          # 4 x 4 accumulators of AVX-512's 32 registers
    return ConvPlan(x, w, bias, k.outputs[0], mac, k.attrs.group, dual, madd, positions, block)


def tap_offsets(cp: ConvPlan, axes) -> list[int]:
    """Input offset of every tap k = (ci, k0, k1, ...) from its position's window origin in channel 0."""
    x_strides = cp.x.strides
    per_tap = [sum(k * axis.dilation * stride for k, axis, stride in zip(ks, axes, x_strides[2:]))
               for ks in itertools.product(*(range(axis.kernel) for axis in axes))]
    return [ci * x_strides[1] + offset for ci in range(cp.in_group) for offset in per_tap]


def window_inside(b: ir.IRBuilder, coords: list[Value], limits: list[tuple[int, int]]) -> Value | None:
    """Whether every tap of the window at ``coords`` reads inside the input (``Axis.interior`` per axis);
    None when no axis can cross the padding."""
    inside = None
    for o, (lo, hi) in zip(coords, limits):
        ok = b.icmp_unsigned("<", b.sub(o, const(lo)), const(max(0, hi - lo)))
        inside = ok if inside is None else b.and_(inside, ok)
    return inside


def tap_at(b: ir.IRBuilder, axes, origins: list[Value], ks: list[Value | int], x_strides,
           channel: Value) -> tuple[Value, Value]:
    """(flat input index, inside) of tap ``ks`` of the window at ``origins`` in the plane at ``channel``: the
    index clamped to 0 along an axis where the tap reads the padding."""
    terms, inside = [(channel, 1)], None
    for axis, origin, kk, stride in zip(axes, origins, ks, x_strides[2:]):
        at = affine(b, 0, (origin, 1), (kk, axis.dilation))
        ok = b.icmp_unsigned("<", at, const(axis.size))
        inside = ok if inside is None else b.and_(inside, ok)
        terms.append((b.select(ok, at, const(0)), stride))
    return affine(b, 0, *terms), inside
