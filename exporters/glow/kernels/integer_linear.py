"""Emitters for the MAC-heavy integer ops of quantized models, QConv and QMatMul (pegasus/ops/integer.py),
computing exactly the bits of their NumPy references.

The sum ``Σ (x - zx) * (w - zw)`` is formed as ``Σ x̃ * w - zw * Σ x̃`` with ``x̃ = x - zx``: the weights are
used as stored, the activation side is centred once where it is read (a conv's im2col copy, a matmul
row element shared by a tile of columns), and ``zw * Σ x̃`` is only formed when ``zw != 0`` (asymmetric
weights), from sums taken on the way. (Emitters see tensor types, not constant values, so ``zx * Σ w``
cannot be folded at export time; centring in the copy costs the same ``1 / channels`` of the MACs.) The
bias is added and the result requantised once per output.

Accumulators are i32 when ``depth * max|x - zx| * max|w - zw| < 2**31`` over the operand types (always for
8-bit operands with at most 33,025 taps), else i64. The i32 sums are modular: ``Σ x̃ * w`` may wrap when
``zw != 0``, but the exact ``Σ x̃ * (w - zw)`` fits, and wrapping adds, multiplies and subtractions give
it back exactly. The bias (int32 or int64, values unknown to the code) is added in 64 bits, as the
reference does. Requantisation is requant.py's, except per-channel tables whose shifts allow the exact
high-word form of ``Requant`` (a 64-bit shift by a table value is a dozen instructions on Cortex-M).

QConv is im2col + dot products: the receptive fields of a tile of output positions are copied, centred,
into a scratch buffer (zeros for the padding; windows inside the input read through a constant table of
tap offsets, windows crossing the padding test every tap), then each block of output channels takes
dot products of its contiguous weight rows with the buffer's rows — loops of constant trip count over a
contiguous reduction axis, which LLVM vectorises on the host. On Cortex-M CPUs with the DSP extension
(M4/M7/M33/M55) the dot products use SMLAD, two 16-bit MACs per instruction: a weight word of four
int8/uint8 is spread by SXTB16/UXTB16 into the pairs (w0, w2) and (w1, w3), so the copy stores each
group of four taps of the tile's positions side by side in the order x0 x2 x1 x3, and a tile of 2
positions x 2 channels takes 8 SMLAD, 4 SXTB16 and 6 loads per 16 MACs (int16 weights are already
pairs). The buffer takes ``positions * depth`` 16-bit values (32-bit when ``x - zx`` needs them) of the
layer's workspace in the activations region: 2 positions on Cortex-M, 4 elsewhere, fewer if that would
pass 16 KB.

On x86-64 the dot products use PMADDWD (integer_madd.py; VPDPWSSD with AVX-512 VNNI) whenever the
accumulator is i32 and both sides are 16-bit values: QConv takes one vector accumulator per output over
the buffer's rows (whole vectors, then pieces of 16, 8 and a zero-padded rest), 4 positions x 4
channels with AVX-512, summed by one tree per tile; QMatMul pairs B's rows k, k + 1 by interleaving
them per 128-bit lane and meets them with a broadcast pair of A, formed once per row into the
workspace, in tiles of 64 (AVX-512), 32, 16 or 8 columns.

A depthwise QConv (one input channel per group, at most 64 taps) needs no im2col: each output channel's
centred weights are held across its positions and every position sums its taps straight from the input
(``qconv_direct``).

QMatMul keeps a tile of rows times a vector of columns in registers: each step over the reduction adds
a centred, broadcast element of A times a row of B (contiguous along its columns). With the DSP
extension a row of A is first centred into 16-bit pairs in the workspace; B's rows are read a word at a
time and spread by SXTB16, and each pair of A meets them in single 16 x 16 MACs (SMLABB/SMLATB/...):
pairing B along the reduction for SMLAD would cost as many instructions as it saves, since B cannot be
laid out anew at export time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.conv import axes_of
from pegasus.exporters.glow.kernels.elementwise import intrinsic
from pegasus.exporters.glow.kernels.integer_madd import load_lanes, madd, madd_lanes, padded, reduce_all
from pegasus.exporters.glow.kernels.linear import _batch_steps, affine, for_tiles, simd_of
from pegasus.exporters.glow.kernels.registry import (
    KernelContext,
    TensorRef,
    emitter,
    entry_alloca,
    llvm_type,
    piece,
    strides_of,
    workspace,
)
from pegasus.exporters.glow.kernels.requant import (
    I16,
    I32,
    I64,
    channel_table,
    clamp,
    load_channel,
    requantize,
    widen,
)
from pegasus.exporters.glow.llvm.loops import const, for_range, loop_nest
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ops.common import broadcast_shape
from pegasus.ops.conv import Conv
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.integer import clamp_bounds
from pegasus.ops.spatial import prod

Value = ir.Value
OPERAND_DTYPES = (DType.UINT8, DType.INT8, DType.UINT16, DType.INT16)
#: Workspace a kernel's buffer may take (a QConv tile has fewer positions rather than pass it).
SCRATCH_BYTES = 16 * 1024


# ---- operands and accumulators -----------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """One side of a product: its tensor type and zero point."""

    dtype: DType
    zero_point: int

    @property
    def signed(self) -> bool:
        return self.dtype in (DType.INT8, DType.INT16)

    @property
    def centered(self) -> tuple[int, int]:
        """The range of value - zero_point."""
        lo, hi = integer_range(self.dtype.numpy)
        return lo - self.zero_point, hi - self.zero_point

    @property
    def magnitude(self) -> int:
        return max(abs(v) for v in self.centered)

    @property
    def centered_is_i16(self) -> bool:
        lo, hi = self.centered
        return -(1 << 15) <= lo and hi < (1 << 15)

    @property
    def raw_is_i16(self) -> bool:
        """Whether the stored values are int16 values (what SMLAD multiplies)."""
        return self.dtype in (DType.INT8, DType.UINT8, DType.INT16)


def operand(k: KernelContext, ref: TensorRef, zero_point: int, what: str) -> Operand:
    if ref.type.dtype not in OPERAND_DTYPES:
        raise PegasusError(f"{k.node.op} with a {ref.type.dtype.value} {what} is not supported by the Glow exporter "
                           f"(supported: {', '.join(d.value for d in OPERAND_DTYPES)})", where=f"layer '{k.node.name}'")
    return Operand(ref.type.dtype, int(zero_point))


@dataclass(frozen=True)
class Mac:
    """How Σ x̃ * w over ``depth`` terms is accumulated: ``acc`` is i32 when the exact sum provably fits."""

    x: Operand
    w: Operand
    depth: int

    @property
    def acc(self) -> ir.IntType:
        return I32 if self.depth * self.x.magnitude * self.w.magnitude < (1 << 31) else I64

    @property
    def fold(self) -> bool:
        """Whether ``zw * Σ x̃`` is subtracted (asymmetric weights)."""
        return self.w.zero_point != 0

    def dual(self, target) -> bool:
        """Whether 16-bit MACs compute it on ``target``: SMLAD (SMLALD for an i64 accumulator) and kin."""
        info = CPUS.get(target.cpu)
        return (info is not None and info.has_dsp and target.is_cortex_m and self.x.centered_is_i16
                and self.w.raw_is_i16)


def madd_fits(mac: Mac) -> bool:
    """Whether PMADDWD computes the sums: i32 accumulators and both sides 16-bit values (centred x,
    stored w)."""
    return mac.acc is I32 and mac.x.centered_is_i16 and mac.w.raw_is_i16


def centered(b: ir.IRBuilder, ref: TensorRef, flat: Value, side: Operand) -> Value:
    """ref[flat] - zero_point as i32 (exact for 8/16-bit tensors)."""
    value = widen(b, ref.load(b, flat), I32, side.signed)
    return b.sub(value, ir.Constant(I32, side.zero_point)) if side.zero_point else value


def acc_bound(mac: Mac, bias: TensorRef | None) -> int:
    """A bound on |Σ x̃ * (w - zw) + bias| (the bias as large as its type allows)."""
    bias_bound = 0 if bias is None else 1 << (8 * bias.type.dtype.itemsize - 1)
    return mac.depth * mac.x.magnitude * mac.w.magnitude + bias_bound


class Requant:
    """The op's requantisation of a 64-bit accumulator, per tensor or per output channel.

    Per-channel shifts are table values, and a 64-bit shift by a variable amount is a dozen instructions
    on 32-bit CPUs. When every shift S is at least 33 (the usual case: M has 31 bits; a smaller S is
    raised to 33 with M scaled by the same power of two, when M stays below 2**31) and nothing can
    overflow, the rule is computed from the high word of the product instead, exactly: with
    acc * M = hi * 2**32 + lo (0 <= lo < 2**32) and t = S - 32 >= 1,
    floor((acc * M + 2**(S-1)) / 2**S) = floor((hi + 2**(t-1)) / 2**t) = ((hi >> (t-1)) + 1) >> 1
    — the low word cannot carry into a multiple of 2**32 that the half already is, and halving
    floor(hi / 2**(t-1)) + 1 rounds the same way. The table holds t - 1; the result has at most 31 bits,
    so the zero point and the clamp are 32-bit too. Otherwise (and per tensor, where the shift is a
    constant) requant.py's 64-bit form is used as it is.
    """

    def __init__(self, module: ir.Module, attrs, out: TensorRef, name: str, bound: int):
        self.lo, self.hi = clamp_bounds(attrs)
        self.zero_point = attrs.out_zero_point
        self.out = llvm_type(out.type.dtype)
        self.multiplier: int | ir.GlobalVariable = int(attrs.multiplier[0])
        self.shift: int | ir.GlobalVariable = int(attrs.shift[0])
        self.high_word = False
        if len(attrs.multiplier) == 1:
            return
        multipliers, shifts = [int(m) for m in attrs.multiplier], [int(s) for s in attrs.shift]
        # (M * 2**j, S + j) is the same rule as (M, S): both halves of the fraction scale by 2**j
        wide = [(m << max(0, 33 - s), max(33, s)) if m >= 0 else (m, s) for m, s in zip(multipliers, shifts)]
        self.high_word = (all(0 <= m < (1 << 31) for m, _ in wide)
                          and bound * max(m for m, _ in wide) + (1 << (max(s for _, s in wide) - 1)) < (1 << 63)
                          and (1 << 30) + 1 + abs(self.zero_point) < (1 << 31))
        if self.high_word:
            self.multiplier = channel_table(module, f"{name}_multiplier", tuple(m for m, _ in wide))
            self.shift = channel_table(module, f"{name}_shift", tuple(s - 33 for _, s in wide))
            return
        narrow = all(-(1 << 31) <= m < (1 << 31) for m in multipliers)
        self.multiplier = channel_table(module, f"{name}_multiplier", tuple(multipliers), I32 if narrow else I64)
        self.shift = channel_table(module, f"{name}_shift", tuple(shifts))

    def __call__(self, b: ir.IRBuilder, acc: Value, channel: Value) -> Value:
        multiplier, shift = (value if isinstance(value, int) else load_channel(b, value, channel)
                             for value in (self.multiplier, self.shift))
        if not self.high_word:
            return requantize(b, acc, multiplier, shift, self.zero_point, self.lo, self.hi, self.out)
        product = b.mul(widen(b, acc, I64, True), b.zext(multiplier, I64))
        high = b.trunc(b.ashr(product, ir.Constant(I64, 32)), I32)
        value = b.ashr(b.add(b.ashr(high, shift), const(1)), const(1))
        if self.zero_point:
            value = b.add(value, const(self.zero_point))
        return widen(b, clamp(b, value, self.lo, self.hi), self.out, True)


def finish(b: ir.IRBuilder, mac: Mac, acc: Value, sum_x: Value | None, bias: TensorRef | None, channel: Value,
           rq: Requant) -> Value:
    """acc - zw * Σ x̃ + bias[channel], requantised."""
    if mac.fold:
        acc = b.sub(acc, b.mul(sum_x, ir.Constant(mac.acc, mac.w.zero_point)))
    if bias is not None:
        acc = b.add(widen(b, acc, I64, True), widen(b, bias.load(b, channel), I64, True))
    return rq(b, acc, channel)


def zeroed(b: ir.IRBuilder, typ: ir.Type) -> Value:
    slot = entry_alloca(b, typ)
    b.store(ir.Constant(typ, None), slot)
    return slot


def accumulate(b: ir.IRBuilder, slot: Value, value: Value) -> None:
    b.store(b.add(b.load(slot), value), slot)


# ---- QConv -------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Taps:
    """The taps' input offsets (see ``tap_offsets``), and the same as a constant table in the code."""

    offsets: list[int]
    table: ir.GlobalVariable

    @classmethod
    def of(cls, module: ir.Module, cp: ConvPlan, axes) -> Taps:
        offsets = tap_offsets(cp, axes)
        return cls(offsets, channel_table(module, "im2col_taps", offsets, I16 if max(offsets) < (1 << 15) else I32))


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


def im2col(b: ir.IRBuilder, cp: ConvPlan, axes, taps: Taps, batch: Value, group: Value, first: Value, count: int,
           buffer: Value, sums: Value | None) -> None:
    """Rows 0..count-1 of the buffer: the centred receptive fields of output positions first.., zeros where
    they cross the padding; sums[p] = Σ of row p when the weights have a zero point. A window inside the
    input is read through a constant table of tap offsets, in groups of four taps (every store's place in
    the buffer a constant); a window crossing the padding tests each tap."""
    out_strides = strides_of(tuple(axis.out for axis in axes))
    x_strides = cp.x.strides
    depth = cp.mac.depth
    limits = [axis.interior() for axis in axes]
    acc = cp.mac.acc

    with for_range(b, count, name="p") as p:
        position = b.add(first, p)
        coords = []
        for i, (axis, stride) in enumerate(zip(axes, out_strides)):
            o = b.udiv(position, const(stride)) if stride != 1 else position
            coords.append(b.urem(o, const(axis.out)) if i else o)
        origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
        running = zeroed(b, acc) if sums is not None else None

        def put(value: Value, slot: Value) -> None:
            b.store(widen(b, value, cp.element, True), b.gep(buffer, [slot], inbounds=True))
            if running is not None:
                accumulate(b, running, widen(b, value, acc, True))

        def interior() -> None:
            base = affine(b, 0, (batch, x_strides[0]), (group, cp.in_group * x_strides[1]),
                          *zip(origins, x_strides[2:]))
            if depth >= 4:
                with for_range(b, depth // 4, name="q") as q:
                    for j in range(4):
                        offset = widen(b, load_channel(b, taps.table, affine(b, j, (q, 4))), I32, True)
                        put(centered(b, cp.x, b.add(base, offset), cp.mac.x), cp.group_slot(b, p, q, j))
            for k in range(depth // 4 * 4, depth):
                put(centered(b, cp.x, affine(b, taps.offsets[k], (base, 1)), cp.mac.x), cp.slot(b, p, k))

        def border() -> None:
            kernel = [axis.kernel for axis in axes]
            with for_range(b, cp.in_group, name="ci") as ci:
                x_chan = affine(b, 0, (batch, x_strides[0]), (group, cp.in_group * x_strides[1]), (ci, x_strides[1]))
                with loop_nest(b, kernel, names="abcdefgh") as ks:
                    flat, inside = tap_at(b, axes, origins, ks, x_strides, x_chan)
                    value = b.select(inside, centered(b, cp.x, flat, cp.mac.x), const(0))
                    index = affine(b, 0, (ci, prod(kernel)), *zip(ks, strides_of(tuple(kernel))))
                    put(value, cp.slot(b, p, index))

        checked = [(o, limit) for o, limit, axis in zip(coords, limits, axes) if limit != (0, axis.out)]
        inside = window_inside(b, [o for o, _ in checked], [limit for _, limit in checked])
        if inside is None:
            interior()
        else:
            with b.if_else(inside) as (then, otherwise):
                with then:
                    interior()
                with otherwise:
                    border()
        if sums is not None:
            b.store(b.load(running), b.gep(sums, [const(0), p], inbounds=True))


def _dot_plain(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
    """acc[c][p] = Σ_k buffer[p][k] * W[row c][k]: one loop over k, every access contiguous."""
    acc = cp.mac.acc
    slots = [[zeroed(b, acc) for _ in range(count)] for _ in w_rows]
    with for_range(b, cp.mac.depth, name="k") as kk:
        xs = [widen(b, b.load(b.gep(buffer, [cp.slot(b, p, kk)], inbounds=True)), acc, True)
              for p in range(count)]
        for c, w_row in enumerate(w_rows):
            weight = widen(b, cp.w.load(b, affine(b, 0, (w_row, 1), (kk, 1))), acc, cp.mac.w.signed)
            for p in range(count):
                accumulate(b, slots[c][p], b.mul(xs[p], weight))
    return [[b.load(slot) for slot in row] for row in slots]


def _dot_madd(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
    """The same dot products with x86 PMADDWD: a loop over whole vectors of the reduction, then pieces of
    16, 8 and the last depth % 8 taps (zero-padded), one vector accumulator per output, summed by a tree."""
    lanes, depth = cp.madd, cp.mac.depth
    accumulator = ir.VectorType(I32, lanes // 2)
    slots = [[zeroed(b, accumulator) for _ in range(count)] for _ in w_rows]

    def chunk(first: Value, width: int) -> None:
        size = max(8, width)
        xs = [load_lanes(b, b.gep(buffer, [cp.slot(b, p, first)], inbounds=True), width, True, size)
              for p in range(count)]
        for c, w_row in enumerate(w_rows):
            weights = load_lanes(b, cp.w.address(b, b.add(w_row, first)), width, cp.mac.w.signed, size)
            for p in range(count):
                accumulate(b, slots[c][p], padded(b, madd(b, xs[p], weights), lanes // 2))

    full, rest = divmod(depth, lanes)
    if full:
        with for_range(b, full, name="q") as q:
            chunk(b.mul(q, const(lanes)), lanes)
    first = full * lanes
    for width in (16, 8):
        if width < lanes and rest >= width:
            chunk(const(first), width)
            first, rest = first + width, rest - width
    if rest:
        chunk(const(first), rest)
    totals = reduce_all(b, [b.load(slot) for row in slots for slot in row])
    return [totals[c * count:(c + 1) * count] for c in range(len(w_rows))]


def _dsp(module: ir.Module, name: str, arity: int) -> ir.Function:
    return intrinsic(module, f"llvm.arm.{name}", I32, [I32] * arity)


def _load_word(b: ir.IRBuilder, ref: TensorRef, flat: Value) -> Value:
    """The 32 bits at ref[flat] (unaligned: Cortex-M3 and later load them with one LDR)."""
    pointer = b.bitcast(ref.address(b, flat), I32.as_pointer())
    return b.load(pointer, align=ref.type.dtype.itemsize)


def _dot_dual(b: ir.IRBuilder, cp: ConvPlan, buffer: Value, w_rows: list[Value], count: int) -> list[list[Value]]:
    """The same dot products with SMLAD (SMLALD into i64) over groups of four taps, single MACs for the
    last depth % 4."""
    module = b.module
    acc = cp.mac.acc
    dual = _dsp(module, "smlad", 3) if acc is I32 else intrinsic(module, "llvm.arm.smlald", I64, [I32, I32, I64])
    unpack = _dsp(module, "sxtb16" if cp.mac.w.signed else "uxtb16", 1)
    words = b.bitcast(buffer, I32.as_pointer())
    byte_weights = cp.w.type.dtype.itemsize == 1
    slots = [[zeroed(b, acc) for _ in range(count)] for _ in w_rows]
    groups = cp.mac.depth // 4
    with for_range(b, groups, name="q") as q:
        pairs = []
        for p in range(count):
            first = affine(b, 2 * p, (q, 2 * cp.positions))
            both = b.load(b.bitcast(b.gep(words, [first], inbounds=True), I64.as_pointer()), align=4)
            pairs.append([b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)])
        for c, w_row in enumerate(w_rows):
            start = affine(b, 0, (w_row, 1), (q, 4))
            if byte_weights:
                word = _load_word(b, cp.w, start)
                rotated = b.or_(b.lshr(word, ir.Constant(I32, 8)), b.shl(word, ir.Constant(I32, 24)))
                weights = [b.call(unpack, [word]), b.call(unpack, [rotated])]
            else:
                weights = [_load_word(b, cp.w, affine(b, 2 * j, (start, 1))) for j in range(2)]
            for p in range(count):
                total = b.load(slots[c][p])
                for j in range(2):
                    total = b.call(dual, [pairs[p][j], weights[j], total])
                b.store(total, slots[c][p])
    for kk in range(groups * 4, cp.mac.depth):
        xs = [widen(b, b.load(b.gep(buffer, [cp.slot(b, p, kk)], inbounds=True)), I32, True)
              for p in range(count)]
        for c, w_row in enumerate(w_rows):
            weight = widen(b, cp.w.load(b, affine(b, kk, (w_row, 1))), I32, cp.mac.w.signed)
            for p in range(count):
                accumulate(b, slots[c][p], widen(b, b.mul(xs[p], weight), acc, True))   # 16 x 16 bits: exact
    return [[b.load(slot) for slot in row] for row in slots]


#: Most taps a depthwise window may have for ``direct_taps`` (its weights are held across the positions).
DIRECT_TAPS = 64


def direct_taps(cp: ConvPlan) -> bool:
    """Depthwise-style grouping (one input channel per group): direct taps instead of im2col."""
    return cp.group > 1 and cp.in_group == 1 and cp.mac.depth <= DIRECT_TAPS


@workspace("QConv")
def qconv_workspace(k: KernelContext) -> int:
    cp = conv_plan(k)
    return 0 if direct_taps(cp) else piece(cp.buffer_bytes)


def qconv_direct(k: KernelContext, cp: ConvPlan, axes) -> None:
    """A depthwise QConv: per output channel, its centred weights ``w̃ = w - zw`` are loaded once, and each
    output position sums ``x * w̃`` over its taps straight from the input — constant offsets inside the
    input, a per-tap test on the border (padding reads ``zx``) — then subtracts ``zx * Σ w̃`` (once per
    channel). The sums wrap in the accumulator type, and their exact total fits it (``Mac.acc``). Cortex-M7,
    int8 3x3 over 32 channels of 32x32: 6.3 instructions per MAC, requantisation included (im2col: 8.3)."""
    b, mac = k.builder, cp.mac
    acc = mac.acc
    rq = Requant(k.module, k.attrs, cp.y, k.node.name, acc_bound(mac, cp.bias))
    offsets = tap_offsets(cp, axes)
    kernels = list(itertools.product(*(range(axis.kernel) for axis in axes)))
    x_strides, y_strides = cp.x.strides, cp.y.strides
    limits = [axis.interior() for axis in axes]
    out_strides = strides_of(tuple(axis.out for axis in axes))

    def wide(value: Value, signed: bool) -> Value:
        return widen(b, value, acc, signed)

    with loop_nest(b, [cp.x.shape[0], cp.y.shape[1]], names="nc") as (batch, chan):
        row = b.mul(chan, const(mac.depth))
        weights = [wide(cp.w.load(b, affine(b, t, (row, 1))), mac.w.signed) for t in range(mac.depth)]
        if mac.w.zero_point:
            weights = [b.sub(weight, ir.Constant(acc, mac.w.zero_point)) for weight in weights]
        total_w = weights[0]
        for weight in weights[1:]:
            total_w = b.add(total_w, weight)
        shift = b.mul(total_w, ir.Constant(acc, mac.x.zero_point))
        x_chan = affine(b, 0, (batch, x_strides[0]), (b.udiv(chan, const(cp.out_group)), x_strides[1]))
        y_chan = affine(b, 0, (batch, y_strides[0]), (chan, y_strides[1]))
        with loop_nest(b, [axis.out for axis in axes], names="abcdefgh") as coords:
            origins = [axis.origin(b, o) for axis, o in zip(axes, coords)]
            inside = window_inside(b, coords, limits)

            def interior() -> Value:
                base = affine(b, 0, (x_chan, 1), *zip(origins, x_strides[2:]))
                total = ir.Constant(acc, 0)
                for weight, offset in zip(weights, offsets):
                    total = b.add(total, b.mul(wide(cp.x.load(b, affine(b, offset, (base, 1))), mac.x.signed),
                                               weight))
                return total

            def border() -> Value:
                total = ir.Constant(acc, 0)
                for weight, ks in zip(weights, kernels):
                    flat, ok = tap_at(b, axes, origins, list(ks), x_strides, x_chan)
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
            value = b.sub(total, shift)
            if cp.bias is not None:
                value = b.add(widen(b, value, I64, True), widen(b, cp.bias.load(b, chan), I64, True))
            position = affine(b, 0, *zip(coords, out_strides))
            cp.y.store(b, rq(b, value, chan), affine(b, 0, (y_chan, 1), (position, 1)))


@emitter("QConv")
def qconv(k: KernelContext) -> None:
    b = k.builder
    cp = conv_plan(k)
    win = Conv.geometry(k.attrs, cp.x.shape, cp.w.shape)
    axes = axes_of(win, cp.x.shape[2:])
    if direct_taps(cp):
        qconv_direct(k, cp, axes)
        return
    taps = Taps.of(k.module, cp, axes)
    rq = Requant(k.module, k.attrs, cp.y, k.node.name, acc_bound(cp.mac, cp.bias))
    positions = prod(win.out)
    words = cp.buffer_bytes // 4
    buffer = b.bitcast(k.scratch(ir.ArrayType(I32, words), cp.buffer_bytes), cp.element.as_pointer())
    sums = entry_alloca(b, ir.ArrayType(cp.mac.acc, cp.positions)) if cp.mac.fold else None
    dot = _dot_dual if cp.dual else _dot_madd if cp.madd else _dot_plain
    y_strides = cp.y.strides

    def channels(batch: Value, group: Value, first: Value, count: int, local0: Value, width: int) -> None:
        chans = [affine(b, c, (group, cp.out_group), (local0, 1)) for c in range(width)]
        w_rows = [b.mul(chan, const(cp.mac.depth)) for chan in chans]
        acc = dot(b, cp, buffer, w_rows, count)
        for c, chan in enumerate(chans):
            y_row = affine(b, 0, (batch, y_strides[0]), (chan, y_strides[1]), (first, 1))
            for p in range(count):
                sum_x = b.load(b.gep(sums, [const(0), const(p)], inbounds=True)) if sums is not None else None
                value = finish(b, cp.mac, acc[c][p], sum_x, cp.bias, chan, rq)
                cp.y.store(b, value, affine(b, p, (y_row, 1)))

    def tile(batch: Value, group: Value, first: Value, count: int) -> None:
        im2col(b, cp, axes, taps, batch, group, first, count, buffer, sums)
        for_tiles(b, 0, cp.out_group, cp.block,
                  lambda local0, width: channels(batch, group, first, count, local0, width))

    with loop_nest(b, [cp.x.shape[0], cp.group]) as (batch, group):
        for_tiles(b, 0, positions, cp.positions, lambda first, count: tile(batch, group, first, count))


# ---- QMatMul -----------------------------------------------------------------------------------------


def _halves(b: ir.IRBuilder, ref: TensorRef, flat: Value, count: int, signed: bool) -> list[Value]:
    """ref[flat : flat + count] (8- or 16-bit, count a whole number of words) as i32 values that LLVM can
    see are sign-extended halfwords: words loaded whole, bytes spread into halves by SXTB16/UXTB16."""
    values: list[Value] = []
    if ref.type.dtype.itemsize == 2:
        for g in range(count // 2):
            word = _load_word(b, ref, affine(b, 2 * g, (flat, 1)))
            values += [_low(b, word), b.ashr(word, ir.Constant(I32, 16))]
        return values
    unpack = _dsp(b.module, "sxtb16" if signed else "uxtb16", 1)
    for g in range(count // 4):
        word = _load_word(b, ref, affine(b, 4 * g, (flat, 1)))
        even = b.call(unpack, [word])
        odd = b.call(unpack, [b.or_(b.lshr(word, ir.Constant(I32, 8)), b.shl(word, ir.Constant(I32, 24)))])
        values += [_low(b, even), _low(b, odd), b.ashr(even, ir.Constant(I32, 16)), b.ashr(odd, ir.Constant(I32, 16))]
    return values


def _low(b: ir.IRBuilder, word: Value) -> Value:
    return b.sext(b.trunc(word, I16), I32)


def _splat(b: ir.IRBuilder, scalar: Value, lanes: int) -> Value:
    vector = ir.VectorType(scalar.type, lanes)
    one = b.insert_element(ir.Constant(vector, None), scalar, const(0))
    return b.shuffle_vector(one, ir.Constant(vector, None), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


@dataclass(frozen=True)
class MatMulPlan:
    """QMatMul's tiling: ``row_tile`` rows x ``width`` columns of accumulators; ``madd_width`` > 0 when x86
    PMADDWD meets pairs of A formed once per row tile (``pair_bytes`` of workspace), ``dual_cols`` columns
    (the leading multiple of a weight word) taken with SMLAxy from a centred row of A (``row_bytes``)."""

    rows: int
    depth: int
    cols: int
    mac: Mac
    row_tile: int
    width: int
    madd_width: int
    dual_cols: int

    @property
    def pairs(self) -> int:
        """Words of 16-bit pairs a row of A takes (an odd last element pairs with 0)."""
        return (self.depth + 1) // 2

    @property
    def pair_bytes(self) -> int:
        return self.row_tile * self.pairs * 4 if self.madd_width else 0

    @property
    def row_bytes(self) -> int:
        return self.pairs * 4 if self.dual_cols else 0


def _matrix_shapes(k: KernelContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    a, bm = k.inputs[0], k.inputs[1]
    return (a.shape if len(a.shape) > 1 else (1,) + a.shape), (bm.shape if len(bm.shape) > 1 else bm.shape + (1,))


def matmul_plan(k: KernelContext) -> MatMulPlan:
    a, bm = k.inputs[0], k.inputs[1]
    a_shape, b_shape = _matrix_shapes(k)
    rows, depth, cols = a_shape[-2], a_shape[-1], b_shape[-1]
    mac = Mac(operand(k, a, k.attrs.a_zero_point, "A"), operand(k, bm, k.attrs.b_zero_point, "B"), depth)
    dual = mac.dual(k.target)
    lanes = max(1, simd_of(k.target).width // (mac.acc.width // 8))
    if dual:
        row_tile, width = 1, 4
    elif k.target.is_cortex_m:
        row_tile, width = min(rows, 2), min(cols, 4)
    else:
        row_tile, width = min(rows, 4), min(cols, 2 * lanes)
    fits = not dual and madd_fits(mac) and row_tile * ((depth + 1) // 2) * 4 <= SCRATCH_BYTES and cols >= 8
    per_word = 4 // bm.type.dtype.itemsize
    dual_cols = cols // per_word * per_word if dual and 2 * depth <= SCRATCH_BYTES else 0
    return MatMulPlan(rows, depth, cols, mac, row_tile, width, madd_lanes(k.target) if fits else 0, dual_cols)


@workspace("QMatMul")
def qmatmul_workspace(k: KernelContext) -> int:
    plan = matmul_plan(k)
    return piece(plan.pair_bytes) + piece(plan.row_bytes)


@emitter("QMatMul")
def qmatmul(k: KernelContext) -> None:
    """numpy.matmul semantics (1-D operands, broadcast batches); per-column requantisation and bias."""
    b = k.builder
    a, bm = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y = k.outputs[0]
    a_shape, b_shape = _matrix_shapes(k)
    plan = matmul_plan(k)
    rows, depth, cols, mac = plan.rows, plan.depth, plan.cols, plan.mac
    row_tile, width, madd_width, dual_cols = plan.row_tile, plan.width, plan.madd_width, plan.dual_cols
    acc = mac.acc
    rq = Requant(k.module, k.attrs, y, k.node.name, acc_bound(mac, bias))
    pairs = plan.pairs
    batch = broadcast_shape(a_shape[:-2], b_shape[:-2])
    steps = (_batch_steps(a_shape, batch, rows * depth), _batch_steps(b_shape, batch, depth * cols),
             [s * rows * cols for s in strides_of(batch)])

    def vector_products(base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int,
                        sums: list[Value] | None) -> list[list[Value]]:
        """Rows of A (broadcast elements) times a vector of B's row: <ncols x acc> per row of the tile."""
        vector = ir.VectorType(acc, ncols)
        slots = [zeroed(b, vector) for _ in range(nrows)]
        with for_range(b, depth, name="k") as kk:
            pointer = b.bitcast(bm.address(b, affine(b, 0, (base[1], 1), (kk, cols), (col0, 1))),
                                ir.VectorType(bm.element, ncols).as_pointer())
            loaded = b.load(pointer, align=bm.type.dtype.itemsize)
            column = b.sext(loaded, vector) if mac.w.signed else b.zext(loaded, vector)
            for r in range(nrows):
                x = widen(b, centered(b, a, affine(b, r * depth, (base[0], 1), (row0, depth), (kk, 1)), mac.x),
                          acc, True)
                accumulate(b, slots[r], b.mul(_splat(b, x, ncols), column))
                if sums is not None:
                    accumulate(b, sums[r], x)
        totals = [b.load(slot) for slot in slots]
        return [[b.extract_element(total, const(c)) for c in range(ncols)] for total in totals]

    def madd_products(base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int,
                      sums: list[Value] | None) -> list[list[Value]]:
        """x86 PMADDWD over pairs of B's rows: rows k and k + 1 of ``ncols`` (8, 16 or 32) columns are
        interleaved per 128-bit lane (low and high four columns of every eight) and meet the broadcast
        pair (A[r, k], A[r, k + 1]) - zero point; an odd last k pairs with zeros."""
        sub = min(ncols, madd_width)                # columns per PMADDWD
        blocks = ncols // sub
        accumulator = ir.VectorType(I32, sub // 2)
        slots = [[zeroed(b, accumulator) for _ in range(2 * blocks)] for _ in range(nrows)]
        lows = [c for lane in range(sub // 8) for j in range(4) for c in (8 * lane + j, sub + 8 * lane + j)]
        highs = [c + 4 for c in lows]
        columns = [[s * sub + 8 * lane + 4 * h + j for lane in range(sub // 8) for j in range(4)]
                   for s in range(blocks) for h in range(2)]

        def step(kk: Value, pair: bool) -> None:
            chunks = []
            for s in range(blocks):
                rows_b = [load_lanes(b, bm.address(b, affine(b, s * sub, (base[1], 1), (kk, cols), (col0, 1),
                                                              (d, cols))), sub, mac.w.signed, sub)
                          for d in range(2 if pair else 1)]
                other = rows_b[1] if pair else ir.Constant(rows_b[0].type, None)
                chunks += [b.shuffle_vector(rows_b[0], other, ir.Constant(ir.VectorType(I32, sub), m))
                           for m in (lows, highs)]
            for r in range(nrows):
                word = b.load(b.gep(pair_words, [affine(b, r * pairs, (b.lshr(kk, const(1)), 1))], inbounds=True))
                both = b.bitcast(_splat(b, word, sub // 2), ir.VectorType(I16, sub))
                for h, chunk in enumerate(chunks):
                    accumulate(b, slots[r][h], madd(b, both, chunk))

        if depth >= 2:
            with for_range(b, depth // 2, name="kp") as kp:
                step(b.mul(kp, const(2)), True)
        if depth % 2:
            step(const(depth - 1), False)
        if sums is not None:
            for r in range(nrows):
                b.store(b.load(b.gep(pair_sums, [const(r)], inbounds=True)), sums[r])
        out = []
        for r in range(nrows):
            values = [b.load(slot) for slot in slots[r]]
            row = [None] * ncols
            for h, value in enumerate(values):
                for lane, col in enumerate(columns[h]):
                    row[col] = b.extract_element(value, const(lane))
            out.append(row)
        return out

    def dual_products(base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int,
                      sums: list[Value] | None) -> list[list[Value]]:
        """One row of A, centred beforehand into 16-bit pairs (``centered_row``), times B's rows read a
        word at a time and spread into 16-bit halves by SXTB16: per two steps of k, one load of A's pair
        and single 16 x 16 MACs of its bottom and top halves (SMLABB, SMLATB, SMLABT, SMLATT)."""
        slots = [zeroed(b, acc) for _ in range(ncols)]
        words = b.bitcast(row_buffer, I32.as_pointer())

        def step(kk: Value, pair: Value | None) -> None:
            flat = affine(b, 0, (base[1], 1), (kk, cols), (col0, 1))
            halves = [(_low(b, pair), flat), (b.ashr(pair, ir.Constant(I32, 16)), affine(b, cols, (flat, 1)))]
            for x, at in halves:
                for c, value in enumerate(_halves(b, bm, at, ncols, mac.w.signed)):
                    accumulate(b, slots[c], widen(b, b.mul(x, value), acc, True))

        if depth >= 2:
            with for_range(b, depth // 2, name="kp") as kp:
                step(b.mul(kp, const(2)), b.load(b.gep(words, [kp], inbounds=True)))
        if depth % 2:
            last = depth - 1
            x = widen(b, b.load(b.gep(row_buffer, [const(last)], inbounds=True)), I32, True)
            for c, value in enumerate(_halves(b, bm, affine(b, last * cols, (base[1], 1), (col0, 1)), ncols,
                                              mac.w.signed)):
                accumulate(b, slots[c], widen(b, b.mul(x, value), acc, True))
        if sums is not None:
            b.store(b.load(row_sum), sums[0])
        return [[b.load(slot) for slot in slots]]

    def centered_row(base: list[Value], row: Value) -> None:
        """row_buffer[k] = A[row, k] - a_zero_point (int16), row_sum = their sum."""
        if row_sum is not None:
            b.store(ir.Constant(acc, 0), row_sum)
        with for_range(b, depth, name="ka") as kk:
            x = centered(b, a, affine(b, 0, (base[0], 1), (row, depth), (kk, 1)), mac.x)
            b.store(b.trunc(x, I16), b.gep(row_buffer, [kk], inbounds=True))
            if row_sum is not None:
                accumulate(b, row_sum, widen(b, x, acc, True))

    def tile(base: list[Value], row0: Value, nrows: int, col0: Value, ncols: int, products) -> None:
        sums = [zeroed(b, acc) for _ in range(nrows)] if mac.fold else None
        totals = products(base, row0, nrows, col0, ncols, sums)
        for r in range(nrows):
            sum_x = b.load(sums[r]) if sums is not None else None
            for c in range(ncols):
                col = affine(b, c, (col0, 1))
                value = finish(b, mac, totals[r][c], sum_x, bias, col, rq)
                y.store(b, value, affine(b, r * cols + c, (base[2], 1), (row0, cols), (col0, 1)))

    def paired_rows(base: list[Value], row0: Value, nrows: int) -> None:
        """pair_words[r][k / 2] = (A[row0 + r, k], A[row0 + r, k + 1]) - zero point as 16-bit halves (an
        odd last k with 0), pair_sums[r] = their sum: A's side of every column tile, formed once."""
        def pair(r: int, kw: Value, odd: bool) -> Value:
            kk = b.mul(kw, const(2))
            xs = [centered(b, a, affine(b, r * depth + d, (base[0], 1), (row0, depth), (kk, 1)), mac.x)
                  for d in range(1 if odd else 2)] + ([const(0)] if odd else [])
            b.store(b.or_(b.and_(xs[0], const(0xFFFF)), b.shl(xs[1], const(16))),
                    b.gep(pair_words, [affine(b, r * pairs, (kw, 1))], inbounds=True))
            return b.add(xs[0], xs[1])

        for r in range(nrows):
            running = b.gep(pair_sums, [const(r)], inbounds=True)
            b.store(ir.Constant(acc, 0), running)
            with for_range(b, depth // 2, name="kw") as kw:
                accumulate(b, running, pair(r, kw, False))
            if depth % 2:
                accumulate(b, running, pair(r, const(depth // 2), True))

    def row_block(base: list[Value], row0: Value, nrows: int) -> None:
        if madd_width:
            paired_rows(base, row0, nrows)
        start = 0
        for ncols in (2 * madd_width, madd_width, 16, 8) if madd_width else ():
            whole = (cols - start) // ncols * ncols
            if ncols <= 2 * madd_width and whole:
                for_tiles(b, start, whole, ncols,
                          lambda col0, n: tile(base, row0, nrows, col0, n, madd_products))
                start += whole
        if start:
            if cols > start:
                for_tiles(b, start, cols - start, width,
                          lambda col0, ncols: tile(base, row0, nrows, col0, ncols, vector_products))
            return
        if dual_cols:
            centered_row(base, row0)
            for_tiles(b, 0, dual_cols, width,
                      lambda col0, ncols: tile(base, row0, nrows, col0, ncols, dual_products))
        if cols > dual_cols:
            for_tiles(b, dual_cols, cols - dual_cols, width,
                      lambda col0, ncols: tile(base, row0, nrows, col0, ncols, vector_products))

    if madd_width:
        pair_words = b.bitcast(k.scratch(ir.ArrayType(I32, row_tile * pairs), plan.pair_bytes), I32.as_pointer())
        pair_sums = b.bitcast(entry_alloca(b, ir.ArrayType(acc, row_tile)), acc.as_pointer())
    if dual_cols:
        row_buffer = b.bitcast(k.scratch(ir.ArrayType(I32, pairs), plan.row_bytes), I16.as_pointer())
        row_sum = entry_alloca(b, acc) if mac.fold else None
    with loop_nest(b, batch) as index:
        base = [affine(b, 0, *zip(index, step)) for step in steps]
        for_tiles(b, 0, rows, row_tile, lambda row0, nrows: row_block(base, row0, nrows))
