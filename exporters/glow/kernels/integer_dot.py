"""What the MAC-heavy integer kernels (integer_conv.py: QConv, integer_matmul.py: QMatMul) share: the
operands and the accumulator their sums need, the correction and bias terms, the requantisation of the
sums (also used by integer_elementwise.py), and the Cortex-M DSP helpers — so each kernel computes
exactly the bits of its NumPy reference (pegasus/ops/integer.py).

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
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.elementwise import intrinsic
from pegasus.exporters.glow.kernels.linear import simd_of
from pegasus.exporters.glow.kernels.registry import KernelContext, TensorRef, entry_alloca, llvm_type
from pegasus.exporters.glow.kernels.requant import (
    I32,
    I64,
    channel_table,
    clamp,
    load_channel,
    requantize,
    wide_multiplier,
    widen,
)
from pegasus.exporters.glow.llvm.loops import const
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ops.fixedpoint import INT32_MIN, integer_range
from pegasus.ops.integer import clamp_bounds

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

    The op's ``rounding`` is honoured: ``tflite_wide`` is the ``half_up`` rule of its reduced multipliers
    (requant.wide_multiplier), high-word form included; ``tflite`` is requant.tflite_scale's SRDHM and
    RoundingDivideByPOT (no high-word form), with constants or per-channel tables.
    """

    def __init__(self, module: ir.Module, attrs, out: TensorRef, name: str, bound: int):
        self.lo, self.hi = clamp_bounds(attrs)
        self.zero_point = attrs.out_zero_point
        self.out = llvm_type(out.type.dtype)
        self.rounding = getattr(attrs, "rounding", "half_up")
        multipliers, shifts = [int(m) for m in attrs.multiplier], [int(s) for s in attrs.shift]
        if self.rounding == "tflite_wide":
            multipliers, shifts = (list(v) for v in zip(*(wide_multiplier(m, s) for m, s in zip(multipliers, shifts))))
            self.rounding = "half_up"
        self.multiplier: int | ir.GlobalVariable = multipliers[0]
        self.shift: int | ir.GlobalVariable = shifts[0]
        self.saturate = any(m == INT32_MIN for m in multipliers)
        self.high_word = False
        if len(multipliers) == 1:
            return
        # (M * 2**j, S + j) is the same rule as (M, S): both halves of the fraction scale by 2**j
        wide = [(m << max(0, 33 - s), max(33, s)) if m >= 0 else (m, s) for m, s in zip(multipliers, shifts)]
        self.high_word = (self.rounding == "half_up" and all(0 <= m < (1 << 31) for m, _ in wide)
                          and bound * max(m for m, _ in wide) + (1 << (max(s for _, s in wide) - 1)) < (1 << 63)
                          and (1 << 30) + 1 + abs(self.zero_point) < (1 << 31))
        if self.high_word:
            self.multiplier = channel_table(module, f"{name}_multiplier", tuple(m for m, _ in wide))
            self.shift = channel_table(module, f"{name}_shift", tuple(s - 33 for _, s in wide))
            return
        narrow = all(-(1 << 31) <= m < (1 << 31) for m in multipliers)
        self.multiplier = channel_table(module, f"{name}_multiplier", tuple(multipliers), I32 if narrow else I64)
        self.shift = channel_table(module, f"{name}_shift", tuple(shifts))

    def __call__(self, b: ir.IRBuilder, acc: Value, channel: Value, bias: Value | None = None) -> Value:
        """The output of ``acc`` + ``bias`` (a loaded value, added in 64 bits as the reference does) for
        ``channel``."""
        multiplier, shift = (value if isinstance(value, int) else load_channel(b, value, channel)
                             for value in (self.multiplier, self.shift))
        if bias is not None:
            acc = b.add(widen(b, acc, I64, True), widen(b, bias, I64, True))
        if not self.high_word:
            return requantize(b, acc, multiplier, shift, self.zero_point, self.lo, self.hi, self.out, self.rounding,
                              self.saturate)
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
    return rq(b, acc, channel, None if bias is None else bias.load(b, channel))


def zeroed(b: ir.IRBuilder, typ: ir.Type) -> Value:
    slot = entry_alloca(b, typ)
    b.store(ir.Constant(typ, None), slot)
    return slot


def accumulate(b: ir.IRBuilder, slot: Value, value: Value) -> None:
    b.store(b.add(b.load(slot), value), slot)



def dsp(module: ir.Module, name: str, arity: int) -> ir.Function:
    return intrinsic(module, f"llvm.arm.{name}", I32, [I32] * arity)


def load_word(b: ir.IRBuilder, ref: TensorRef, flat: Value) -> Value:
    """The 32 bits at ref[flat] (unaligned: Cortex-M3 and later load them with one LDR)."""
    pointer = b.bitcast(ref.address(b, flat), I32.as_pointer())
    return b.load(pointer, align=ref.type.dtype.itemsize)


def channel_block(target, acc: ir.IntType, multiple: int, channels: int) -> tuple[int, int]:
    """(lanes, channels) of a block of a channels-last kernel's accumulators (vectors across channels):
    vectors of the target's ``acc`` lanes, as many as leave registers for the operands (four scalars on a
    CPU without vectors), the block a multiple of ``multiple`` (at most ``channels``)."""
    simd = simd_of(target)
    lanes = max(1, simd.width // (acc.width // 8))
    size = lanes * (max(1, min(4, simd.accumulators // 2)) if lanes > 1 else 4)
    return lanes, min(channels, max(multiple, size // multiple * multiple))
