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

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.parameters import load_channel
from pegasus.exporters.glow.llvm.barriers import opaque, volatile_load
from pegasus.exporters.glow.llvm.functions import entry_alloca, intrinsic
from pegasus.exporters.glow.llvm.loops import const
from pegasus.exporters.glow.llvm.requant import (
    clamp,
    divide_away,
    halve_rounding,
    high_word,
    requantize,
    wide_multiplier,
    widen,
)
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import I8, I32, I64, llvm_type
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ops.fixedpoint import INT32_MAX, INT32_MIN, integer_range
from pegasus.ops.integer import clamp_bounds

Value = ir.Value
OPERAND_DTYPES = (DType.UINT8, DType.INT8, DType.UINT16, DType.INT16)
#: Workspace a kernel's buffer may take (a QConv tile has fewer positions rather than pass it).
SCRATCH_BYTES = 16 * 1024


# ---- operands and accumulators -----------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """One side of a product: its tensor type and zero point (and a smaller bound on |value - zero point|
    when the values are known to need fewer bits than their type: 8-bit weights stored as 16-bit pairs)."""

    dtype: DType
    zero_point: int
    bound: int | None = None

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
        return self.bound if self.bound is not None else max(abs(v) for v in self.centered)

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
    """A bound on |Σ x̃ * (w - zw) + bias| (the bias as large as its values, or its type, allow)."""
    return mac.depth * mac.x.magnitude * mac.w.magnitude + bias_bound(bias)


def bias_bound(bias: TensorRef | None) -> int:
    """A bound on |bias|: its largest value when it is a constant, else its type's (0 without one)."""
    if bias is None:
        return 0
    return max(abs(v) for v in bias.bounds) if bias.bounds else 1 << (8 * bias.type.dtype.itemsize - 1)


def seeds_bias(mac: Mac, bias: TensorRef | None) -> bool:
    """Whether an i32 ``bias`` may start a MAC kernel's sums instead of being added to each: i32 accumulators
    and its sum with any of them within 32 bits (``acc_bound``)."""
    return (bias is not None and mac.acc is I32 and bias.type.dtype is DType.INT32
            and acc_bound(mac, bias) < INT32_MAX)


#: Per-channel shift tables of the narrow form hold S - base as bytes: base per rounding.
NARROW_BASE = {"tflite": 32, "half_up": 33}


def narrow_pairs(rounding: str, multipliers: list[int], shifts: list[int]) -> list[tuple[int, int]] | None:
    """The (M, S) pairs of ``Requant``'s narrow form, or None when a channel has no such pair: ``tflite``
    needs 0 <= M < 2**31 and 32 <= S <= 61 (a right shift e = S - 31 of 1..30 after SRDHM); ``half_up`` needs
    S >= 33 — a smaller S is raised with M scaled by the same power of two while M stays below 2**31 — and
    S <= 64."""
    if rounding == "tflite":
        ok = all(0 <= m < (1 << 31) and 32 <= s <= 61 for m, s in zip(multipliers, shifts))
        return list(zip(multipliers, shifts)) if ok else None
    if rounding != "half_up":
        return None
    pairs = [(m << max(0, 33 - s), max(33, s)) for m, s in zip(multipliers, shifts)]
    return pairs if all(0 <= m < (1 << 31) and s <= 64 for m, s in pairs) else None


def narrow_form(rounding: str, zero_point: int, multipliers: list[int],
                shifts: list[int]) -> list[tuple[int, int]] | None:
    """``Requant``'s narrow (M, S) pairs (``narrow_pairs``) when the output zero point lets it add in 32 bits."""
    if (1 << 30) + 1 + 2 * abs(zero_point) >= (1 << 31):
        return None
    return narrow_pairs(rounding, multipliers, shifts)


class Requant:
    """The op's requantisation of an accumulator plus bias, per tensor or per output channel.

    Narrow form (the usual case: i32 accumulator and bias, ``narrow_pairs``): the sum x = acc + bias is taken
    in 32 bits with an overflow check, and the rule is computed from the high word of x * M — one SMMUL or
    SMMULR on Arm with the DSP extension — instead of 64-bit arithmetic; when the 32-bit sums overflow (a
    bias near 2**31), a branch the code takes never for real layers computes the 64-bit rule. Both are exact:

    - ``half_up`` with S = 32 + t, t >= 1, acc * M = hi * 2**32 + lo (0 <= lo < 2**32):
      floor((x * M + 2**(S-1)) / 2**S) = floor((hi + 2**(t-1)) / 2**t) = ((hi >> (t-1)) + 1) >> 1
      (the low word cannot carry past the half; |hi| < 2**30, so nothing overflows);
    - ``tflite`` (MultiplyByQuantizedMultiplier with S = 31 + e, 1 <= e <= 30): SRDHM(x, M) = floor((x*M +
      2**30) / 2**31) — gemmlowp's sign-dependent nudge and truncating division give the same value — which is
      SMMULR(2x, M) = floor((2x*M + 2**31) / 2**32) when 2x fits in 32 bits (checked too); then
      RoundingDivideByPOT(y, e) = floor((y - [y < 0] + 2**(e-1)) / 2**e) = (((y + (y >> 31)) >> (e-1)) + 1) >> 1
      (|y| <= 2**30, so nothing overflows). Under a fused ReLU (clamp floor >= zero point) the sign term is
      dropped: a negative y gives a value <= 0 either way, which the clamp sends to its floor.

    A 64-bit accumulator (or bias) with narrow ``half_up`` pairs takes the same high-word form when its
    product cannot overflow (``high_word``); otherwise the rule is requant.py's 64-bit form — whose shift by
    a table value is a dozen instructions on 32-bit CPUs. ``tflite_wide`` is the ``half_up`` rule of
    its reduced multipliers (requant.wide_multiplier); ``tflite`` is requant.tflite_scale's SRDHM and
    RoundingDivideByPOT.
    """

    def __init__(self, tables: Callable, attrs, out: TensorRef, bound: int):
        """``tables``: ``KernelContext.table``, which places a per-channel table (values, type)."""
        self.lo, self.hi = clamp_bounds(attrs)
        self.bound = bound
        self.zero_point = attrs.out_zero_point
        self.out = llvm_type(out.type.dtype)
        self.rounding = getattr(attrs, "rounding", "half_up")
        multipliers, shifts = [int(m) for m in attrs.multiplier], [int(s) for s in attrs.shift]
        if self.rounding == "tflite_wide":
            multipliers, shifts = (list(v) for v in zip(*(wide_multiplier(m, s) for m, s in zip(multipliers, shifts))))
            self.rounding = "half_up"
        self.multiplier: int | ir.Value = multipliers[0]
        self.shift: int | ir.Value = shifts[0]
        self.high_word = False
        self.pairs: ir.Value | None = None    # per-channel (multiplier, shift) words of the narrow form
        self.saturate = any(m == INT32_MIN for m in multipliers)
        self.narrow = narrow_form(self.rounding, self.zero_point, multipliers, shifts)
        if not self.narrow:
            if len(multipliers) > 1:
                fits = all(-(1 << 31) <= m < (1 << 31) for m in multipliers)
                self.multiplier = tables(tuple(multipliers), I32 if fits else I64)
                self.shift = tables(tuple(shifts), I32)
            return
        # a 64-bit accumulator's half_up high word stays exact while its product cannot overflow
        self.high_word = (self.rounding == "half_up" and bound * max(m for m, _ in self.narrow)
                          + (1 << (max(s for _, s in self.narrow) - 1)) < (1 << 63))
        # a fused ReLU (lo >= zero point) sends every negative product to lo, however it is rounded: TFLite's
        # round-half-away of negative values (divide_away's sign correction) is then not needed
        self.clamps_negatives = self.lo >= self.zero_point
        base = NARROW_BASE[self.rounding]
        if len(self.narrow) == 1:
            self.multiplier, self.shift = self.narrow[0][0], self.narrow[0][1] - base
        elif out.type.size > len(self.narrow):   # several positions: one table of (multiplier, shift) words,
            pairs = tuple(v for m, s in self.narrow for v in (m, s - base))   # one pointer for a block of channels
            self.pairs = tables(pairs, I32)
        else:   # each channel's parameters read once (a dense layer): the compact tables, shifts as bytes
            self.multiplier = tables(tuple(m for m, _ in self.narrow), I32)
            self.shift = tables(tuple(s - base for _, s in self.narrow), I8)

    def __call__(self, b: ir.IRBuilder, acc: Value, channel: Value, bias: Value | None = None) -> Value:
        """The output of ``acc`` + ``bias`` (a loaded value, added exactly as the reference does: in 64 bits)
        for ``channel``."""
        return self.many(b, [(acc, channel, bias)])[0]

    @property
    def takes_doubled(self) -> bool:
        """Whether ``many(..., doubled=True)`` may be given 2 (acc + bias) itself: the narrow ``tflite`` form, whose
        first step doubles the sum, when that cannot overflow (``bound`` < 2**30: no ``_checks``)."""
        return bool(self.narrow) and self.rounding == "tflite" and not self._checks(True)

    def many(self, b: ir.IRBuilder, items: list[tuple[Value, Value, Value | None]],
             doubled: bool = False, parameters: list[tuple[Value, Value, Value | None]] | None = None) -> list[Value]:
        """The outputs of several (acc, channel, bias): in the narrow form with one overflow branch for all
        of them, so the sums are all formed before it (none is kept across blocks). ``doubled``: each acc is
        already 2 (acc + bias), bias None (``takes_doubled``; a kernel whose weights are doubled forms it);
        then ``parameters`` may give each item's (multiplier, shift, K) as the kernel loaded them from a table
        of its own (``fold_constant``: shift t + 1 and K, or shift t and None)."""
        assert not doubled or (self.takes_doubled and all(bias is None for *_, bias in items))
        if parameters is not None:
            assert doubled
            return [self._scaled(b, acc, *loaded) for (acc, _, _), loaded in zip(items, parameters)]
        per_channel: dict[int, tuple] = {}    # per channel value, loaded once for its positions
        for _, channel, _ in items:
            if id(channel) not in per_channel:
                per_channel[id(channel)] = self._parameters(b, channel)
        loaded = [(acc, *per_channel[id(channel)], bias) for acc, channel, bias in items]
        if not self.narrow or not all(acc.type.width == 32 and (bias is None or bias.type.width == 32)
                                      for acc, _, _, bias in loaded):
            return [self._one(b, *item) for item in loaded]
        if doubled:
            return [self._scaled(b, acc, multiplier, shift) for acc, multiplier, shift, _ in loaded]
        if not self._checks(any(bias is not None for *_, bias in loaded)):
            return [self._narrow(b, acc, bias, multiplier, shift, None) for acc, multiplier, shift, bias in loaded]
        wide = b.append_basic_block("rq.wide")
        fast = [self._narrow(b, acc, bias, multiplier, shift, wide) for acc, multiplier, shift, bias in loaded]
        join = b.append_basic_block("rq.join")
        quick = b.block
        b.branch(join)
        b.position_at_end(wide)
        slow = [self._wide(b, acc, bias, multiplier, shift) for acc, multiplier, shift, bias in loaded]
        wide_end = b.block
        b.branch(join)
        b.position_at_end(join)
        results = []
        for value, other in zip(fast, slow):
            phi = b.phi(value.type)
            phi.add_incoming(value, quick)
            phi.add_incoming(other, wide_end)
            results.append(phi)
        return results

    def _checks(self, bias: bool) -> bool:
        """Whether a 32-bit sum of the narrow form can overflow: acc + bias, or TFLite's doubled sum (|x| < 2**30
        makes 2x fit), as far as ``bound`` (the accumulator's and the bias's ranges) tells."""
        return (bias and self.bound >= INT32_MAX) or (self.rounding == "tflite" and self.bound >= 1 << 30)

    def _parameters(self, b: ir.IRBuilder, channel: Value) -> tuple[Value | int, Value | int]:
        if self.pairs is not None:      # one 64-bit load: an LDRD on Cortex-M (volatile: LLVM keeps it whole)
            first = b.shl(channel, ir.Constant(channel.type, 1))
            pointer = self.pairs if not isinstance(self.pairs, ir.GlobalVariable) else b.bitcast(
                self.pairs, I32.as_pointer())
            both = volatile_load(b, b.bitcast(b.gep(pointer, [first], inbounds=True), I64.as_pointer()), 4)
            return b.trunc(both, I32), b.trunc(b.lshr(both, ir.Constant(I64, 32)), I32)
        return tuple(value if isinstance(value, int) else load_channel(b, value, channel)
                     for value in (self.multiplier, self.shift))

    def _one(self, b: ir.IRBuilder, acc: Value, multiplier: Value | int, shift: Value | int,
             bias: Value | None) -> Value:
        """One output without the narrow form's 32-bit sums."""
        if not self.narrow:
            if bias is not None:
                acc = b.add(widen(b, acc, I64, True), widen(b, bias, I64, True))
            return requantize(b, acc, multiplier, shift, self.zero_point, self.lo, self.hi, self.out, self.rounding,
                              self.saturate)
        if not self.high_word:
            return self._wide(b, acc, bias, multiplier, shift)
        total = widen(b, acc, I64, True)
        if bias is not None:
            total = b.add(total, widen(b, bias, I64, True))
        return self._finish(b, halve_rounding(b, high_word(b, total, multiplier, False), shift))

    def _finish(self, b: ir.IRBuilder, value: Value) -> Value:
        """+ zero point, clamp, in the output type (value: the scaled i32)."""
        if self.zero_point:
            value = b.add(value, const(self.zero_point))
        return self._clamped(b, value)

    def _clamped(self, b: ir.IRBuilder, value: Value) -> Value:
        return widen(b, clamp(b, value, self.lo, self.hi), self.out, True)

    def _wide(self, b: ir.IRBuilder, acc: Value, bias: Value | None, multiplier: Value | int,
              shift: Value | int) -> Value:
        """The narrow form's pairs through requant.py's 64-bit rule (any accumulator)."""
        total = widen(b, acc, I64, True)
        if bias is not None:
            total = b.add(total, widen(b, bias, I64, True))
        base = NARROW_BASE[self.rounding]
        shift = shift + base if isinstance(shift, int) else b.add(widen(b, shift, I32, True), const(base))
        return requantize(b, total, multiplier, shift, self.zero_point, self.lo, self.hi, self.out, self.rounding,
                          False)

    def _narrow(self, b: ir.IRBuilder, acc: Value, bias: Value | None, multiplier: Value | int,
                shift: Value | int, wide: ir.Block | None) -> Value:
        """The narrow form (class docstring); each 32-bit sum that overflows branches to ``wide`` (ADDS, BVS)."""
        x = acc
        if bias is not None:
            x = add_checked(b, acc, bias, wide) if self.bound >= INT32_MAX else b.add(acc, bias)
        if self.rounding == "tflite":
            x = add_checked(b, x, x, wide) if self.bound >= 1 << 30 else b.add(x, x)
        return self._scaled(b, x, multiplier, shift)

    def _scaled(self, b: ir.IRBuilder, x: Value, multiplier: Value | int, shift: Value | int,
                k: Value | None = None) -> Value:
        """The narrow form from its 32-bit sum (doubled for ``tflite``) on; with K (``fold_constant``), shift is
        t + 1."""
        high = high_word(b, x, multiplier, self.rounding == "tflite")
        if k is not None:   # (high + K) >> (t + 1): SMMLAR and ASR
            return self._clamped(b, b.ashr(b.add(high, k), shift))
        # the zero point rides on the rounding's + 1 (halve_rounding): no add of its own
        if self.rounding == "tflite" and not self.clamps_negatives:
            # high + (high >> 31) is one ADD with a shifted operand; seen through, LLVM folds the add into a
            # second multiply (SMMLAR), an instruction more
            return self._clamped(b, divide_away(b, opaque(b, high), shift, self.zero_point))
        return self._clamped(b, halve_rounding(b, high, shift, self.zero_point))


def fold_constant(rounding: str, zero_point: int, lo: int, bound: int, multiplier: int, shift: int) -> int | None:
    """K = (1 + 2 zp) << t for a channel of ``Requant``'s narrow form (t = S - NARROW_BASE), when
    ((high >> t) + 1 + 2 zp) >> 1 (``halve_rounding``) may be taken as (high + K) >> (t + 1) — the same value,
    K a multiple of 2**t; an add the high word's multiply takes (SMMLAR), a SUB saved per output: not for
    TFLite's rounding of negative values (``divide_away``, no fused ReLU: ``lo`` < zero point), and only where
    |high| + |K| < 2**31 (|high| <= 2 |x| M / 2**32 + 1 for TFLite's doubled x, |x| M / 2**32 + 1 for half_up,
    |x| <= ``bound``). None otherwise."""
    if rounding == "tflite" and lo < zero_point:
        return None
    t = shift - NARROW_BASE[rounding]
    k = (1 + 2 * zero_point) << t
    doubled = 2 if rounding == "tflite" else 1
    return k if bound * doubled * multiplier // (1 << 32) + 2 + abs(k) < (1 << 31) else None


def add_checked(b: ir.IRBuilder, x: Value, y: Value, overflow: ir.Block) -> Value:
    """x + y in 32 bits, branching to ``overflow`` when the signed sum overflows (ADDS and BVS on Arm)."""
    pair = b.call(intrinsic(b.module, "llvm.sadd.with.overflow.i32", ir.LiteralStructType([I32, ir.IntType(1)]),
                            [I32, I32]), [x, y])
    rest = b.append_basic_block("rq.sum")
    b.cbranch(b.extract_value(pair, 1), overflow, rest).set_weights([1, 1 << 20])
    b.position_at_end(rest)
    return b.extract_value(pair, 0)


def finish(b: ir.IRBuilder, mac: Mac, items: list[tuple[Value, Value | None, Value]], bias: TensorRef | None,
           rq: Requant) -> list[Value]:
    """acc - zw * Σ x̃ + bias[channel], requantised, for each (acc, Σ x̃, channel) of a block of outputs."""
    terms = []
    for acc, sum_x, channel in items:
        if mac.fold:
            acc = b.sub(acc, b.mul(sum_x, ir.Constant(mac.acc, mac.w.zero_point)))
        terms.append((acc, channel, None if bias is None else bias.load(b, channel)))
    return rq.many(b, terms)


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
