"""One dtype's arithmetic on explicit ``<lanes x T>`` vectors (``Numeric``: float16 computes in float32; strided,
masked and broadcast loads; max with NumPy's NaN rules; lane reductions) and ``Accumulators``, register
accumulators kept in entry-block allocas that LLVM promotes to registers. Shared by the dense float kernels (matrix
products, convolutions, pooling)."""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.loops import affine, const
from pegasus.exporters.glow.llvm.simd import element_bytes, masked_intrinsic, vconst
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import BIT, Value, llvm_type
from pegasus.ir.dtypes import DType

#: Fast-math flags of accumulations: fused multiply-add allowed, results otherwise IEEE.
FMF = ("contract",)


SIGNED = (DType.INT8, DType.INT16, DType.INT32, DType.INT64)


class Numeric:
    """One dtype's arithmetic on ``<lanes x T>`` vectors: float16 computes in float32, every other type
    in itself (integers wrap as NumPy's do)."""

    def __init__(self, builder: ir.IRBuilder, dtype: DType):
        self.b = builder
        self.dtype = dtype
        self.storage = llvm_type(dtype)
        self.compute = ir.FloatType() if dtype is DType.FLOAT16 else self.storage
        self.is_float = dtype.is_float
        self.signed = dtype in SIGNED

    def vector(self, lanes: int) -> ir.VectorType:
        return ir.VectorType(self.compute, lanes)

    def constant(self, value: float | int, lanes: int) -> ir.Constant:
        scalar = ir.Constant(self.compute, float(value) if self.is_float else int(value))
        return ir.Constant(self.vector(lanes), [scalar] * lanes)

    def lowest(self, lanes: int) -> ir.Constant:
        """The value every element beats in a max: -inf, or the integer type's minimum."""
        if self.is_float:
            return self.constant(-math.inf, lanes)
        bits = self.compute.width
        return self.constant(-(1 << (bits - 1)) if self.signed else 0, lanes)

    def splat(self, scalar: Value, lanes: int) -> Value:
        b = self.b
        one = b.insert_element(ir.Constant(ir.VectorType(scalar.type, 1), None), scalar, const(0))
        return one if lanes == 1 else b.shuffle_vector(one, one, vconst([0] * lanes))

    # -- memory -------------------------------------------------------------------------------------

    def _widen(self, value: Value) -> Value:
        return self.b.fpext(value, ir.VectorType(self.compute, value.type.count)) \
            if self.storage != self.compute else value

    def load(self, ref: TensorRef, flat: Value, lanes: int, stride: int = 1) -> Value:
        """Elements flat, flat+stride, ... (lanes of them) of ``ref``; stride 0 broadcasts one.
        Small strides load a few whole vectors covering exactly the lanes' span and shuffle the lanes
        out of them (no load reaches past the last element used); larger ones gather lane by lane."""
        b = self.b
        if stride == 0 or lanes == 1:
            return self.splat(self._widen_scalar(ref.load(b, flat)), lanes)
        if stride == 1:
            return self._widen(self._load_vector(ref, flat, lanes))
        if stride > 4:
            return self._gather(ref, flat, stride, (True,) * lanes)
        span = (lanes - 1) * stride + 1
        result = None
        for start in (min(start, span - lanes) for start in range(0, span, lanes)):
            piece = self._load_vector(ref, affine(b, start, (flat, 1)), lanes)
            wanted = {lane: lane * stride - start for lane in range(lanes) if 0 <= lane * stride - start < lanes}
            if result is None:
                result = b.shuffle_vector(piece, piece, vconst([wanted.get(lane, 0) for lane in range(lanes)]))
            else:
                mask = [lanes + wanted[lane] if lane in wanted else lane for lane in range(lanes)]
                result = b.shuffle_vector(result, piece, vconst(mask))
        return self._widen(result)

    def _load_vector(self, ref: TensorRef, flat: Value, lanes: int) -> Value:
        pointer = self.b.bitcast(ref.address(self.b, flat), ir.VectorType(self.storage, lanes).as_pointer())
        return self.b.load(pointer, align=element_bytes(self.storage))

    def _gather(self, ref: TensorRef, flat: Value, stride: int, mask: tuple[bool, ...]) -> Value:
        """Lanes flat + lane*stride where ``mask`` is set, zero elsewhere, one load each."""
        b = self.b
        value = ir.Constant(ir.VectorType(self.storage, len(mask)), None)
        for lane in (lane for lane, on in enumerate(mask) if on):
            value = b.insert_element(value, ref.load(b, affine(b, lane * stride, (flat, 1))), const(lane))
        return self._widen(value)

    def load_lanes(self, ref: TensorRef, flat: Value, lanes: int, stride: int, mask: tuple[bool, ...]) -> Value:
        """Like ``load``, but only the lanes in ``mask`` are read and the others are zero: lane 0 may
        lie before the tensor's start (a tile crossing the padding)."""
        if all(mask):
            return self.load(ref, flat, lanes, stride)
        if stride != 1:
            return self._gather(ref, flat, stride, mask)
        b = self.b
        vector = ir.VectorType(self.storage, lanes)
        pointer = b.bitcast(b.gep(ref.ptr, [flat]), vector.as_pointer())    # not inbounds: may start before
        masked = masked_intrinsic(b.module, "load", vector)
        align = const(element_bytes(self.storage))
        value = b.call(masked, [pointer, align, vconst(mask, BIT), ir.Constant(vector, None)])
        return self._widen(value)

    def _widen_scalar(self, value: Value) -> Value:
        return self.b.fpext(value, self.compute) if self.storage != self.compute else value

    def store(self, ref: TensorRef, flat: Value, value: Value, count: int | None = None, stride: int = 1) -> None:
        """Store the lanes at flat, flat+stride, ... (only the first ``count`` lanes, if given)."""
        b = self.b
        lanes = value.type.count
        if self.storage != self.compute:
            value = b.fptrunc(value, ir.VectorType(self.storage, lanes))
        if lanes == 1 or stride != 1:
            for lane in range(lanes if count is None else count):
                ref.store(b, b.extract_element(value, const(lane)), affine(b, lane * stride, (flat, 1)))
            return
        pointer = b.bitcast(ref.address(b, flat), value.type.as_pointer())
        if count is None or count == lanes:
            b.store(value, pointer, align=element_bytes(self.storage))
            return
        mask = vconst([lane < count for lane in range(lanes)], BIT)
        align = const(element_bytes(self.storage))
        b.call(masked_intrinsic(b.module, "store", value.type), [value, pointer, align, mask])

    # -- arithmetic ---------------------------------------------------------------------------------

    def add(self, x: Value, y: Value) -> Value:
        return self.b.fadd(x, y, flags=FMF) if self.is_float else self.b.add(x, y)

    def mul(self, x: Value, y: Value) -> Value:
        return self.b.fmul(x, y, flags=FMF) if self.is_float else self.b.mul(x, y)

    def mul_add(self, acc: Value, x: Value, y: Value) -> Value:
        return self.add(acc, self.mul(x, y))

    def div(self, x: Value, y: Value) -> Value:
        return self.b.fdiv(x, y)

    def wins(self, x: Value, best: Value) -> Value:
        """Whether x replaces best in a running max that keeps the first maximum and, like
        numpy's argmax, the first NaN."""
        b = self.b
        if not self.is_float:
            return b.icmp_signed(">", x, best) if self.signed else b.icmp_unsigned(">", x, best)
        greater = b.fcmp_ordered(">", x, best)
        first_nan = b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", best, best))
        return b.or_(greater, first_nan)

    def maximum(self, x: Value, best: Value) -> Value:
        """max(x, best), NaN once either is NaN (for floats: x wins when greater or NaN)."""
        b = self.b
        if not self.is_float:
            return b.select(self.wins(x, best), x, best)
        larger = b.select(b.fcmp_ordered(">", x, best), x, best)
        return b.select(b.fcmp_unordered("uno", x, x), x, larger)

    def from_int(self, value: Value, lanes: int) -> Value:
        """An i32 count as a vector of the compute type."""
        return self.splat(self.b.sitofp(value, self.compute), lanes)

    def reduce(self, value: Value, combine: Callable[[Value, Value], Value], identity: ir.Constant) -> Value:
        """Combine the lanes of ``value`` pairwise down to one lane (a <1 x T> vector)."""
        b = self.b
        lanes = value.type.count
        padded = 1 << (lanes - 1).bit_length()
        if padded != lanes:
            fill = ir.Constant(value.type, [identity] * lanes)
            value = b.shuffle_vector(value, fill, vconst(list(range(lanes)) + [lanes] * (padded - lanes)))
        while padded > 1:
            padded //= 2
            low = b.shuffle_vector(value, value, vconst(list(range(padded))))
            high = b.shuffle_vector(value, value, vconst(list(range(padded, 2 * padded))))
            value = combine(low, high)
        return value

    def sum(self, value: Value) -> Value:
        return self.reduce(value, self.add, ir.Constant(self.compute, 0.0 if self.is_float else 0))


class Accumulators:
    """Register accumulators as entry-block allocas (SROA turns them into phis of the loops)."""

    def __init__(self, num: Numeric, count: int, lanes: int):
        self.num = num
        self.slots = [entry_alloca(num.b, num.vector(lanes)) for _ in range(count)]

    def set(self, index: int, value: Value) -> None:
        self.num.b.store(value, self.slots[index])

    def get(self, index: int) -> Value:
        return self.num.b.load(self.slots[index])

    def mul_add(self, index: int, x: Value, y: Value) -> None:
        self.set(index, self.num.mul_add(self.get(index), x, y))


