"""NumPy ``astype`` in LLVM between any two dtypes (``convert``), and loads and stores through it (``load_as``,
``store_as``): float16 is widened to float32 and rounded back with integer instructions only (no target needs a
half-float library routine); float to int saturates to int32 (int64 for the wide types), then wraps."""

from __future__ import annotations

from llvmlite import ir

from pegasus.exporters.glow.llvm.functions import intrinsic
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import BIT, F32, I8, I16, I32, I64, llvm_type
from pegasus.ir.dtypes import DType

UNSIGNED = (DType.BOOL, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)


def _is_signed(dtype: DType) -> bool:
    return dtype not in UNSIGNED


def half_to_float(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """float16 → float32, exact, with integer operations only (subnormals via an int → float multiply)."""
    h = b.zext(b.bitcast(value, I16), I32)
    magnitude = b.and_(h, ir.Constant(I32, 0x7FFF))
    exponent = b.and_(h, ir.Constant(I32, 0x7C00))
    shifted = b.shl(magnitude, ir.Constant(I32, 13))
    normal = b.add(shifted, ir.Constant(I32, 112 << 23))                  # re-bias 15 → 127
    special = b.or_(shifted, ir.Constant(I32, 0x7F800000))               # inf / NaN keep their payload
    tiny = b.bitcast(b.fmul(b.uitofp(magnitude, F32), ir.Constant(F32, 2.0 ** -24)), I32)  # zero, subnormal
    bits = b.select(b.icmp_unsigned("==", exponent, ir.Constant(I32, 0x7C00)), special,
                    b.select(b.icmp_unsigned("==", exponent, ir.Constant(I32, 0)), tiny, normal))
    sign = b.shl(b.and_(h, ir.Constant(I32, 0x8000)), ir.Constant(I32, 16))
    return b.bitcast(b.or_(bits, sign), F32)


def float_to_half(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """float32 → float16 rounding to nearest even, with integer operations (after F. Giesen's
    float_to_half_fast3_rtne): overflow gives inf, NaN a quiet NaN."""
    def c(v: int) -> ir.Constant:
        return ir.Constant(I32, v)

    bits = b.bitcast(value, I32)
    sign = b.lshr(b.and_(bits, c(0x80000000)), c(16))
    mag = b.and_(bits, c(0x7FFFFFFF))
    special = b.select(b.icmp_unsigned(">", mag, c(0x7F800000)), c(0x7E00), c(0x7C00))
    magic = c(126 << 23)  # 0.5: adding it shifts a subnormal half's bits into place, rounding as the FPU does
    subnormal = b.sub(b.bitcast(b.fadd(b.bitcast(mag, F32), b.bitcast(magic, F32)), I32), magic)
    odd = b.and_(b.lshr(mag, c(13)), c(1))
    normal = b.lshr(b.add(b.add(mag, c(((15 - 127) << 23) + 0xFFF)), odd), c(13))
    half = b.select(b.icmp_unsigned(">=", mag, c(143 << 23)), special,
                    b.select(b.icmp_unsigned("<", mag, c(113 << 23)), subnormal, normal))
    return b.bitcast(b.trunc(b.or_(half, sign), I16), ir.HalfType())


def _float_to_int(b: ir.IRBuilder, value: ir.Value, dst: DType) -> ir.Value:
    """Truncation toward zero; out-of-range and NaN are defined (see the module docstring)."""
    def saturating(kind: str, wide: ir.IntType) -> ir.Value:
        name = f"llvm.{kind}.sat.{wide.intrinsic_name}.{value.type.intrinsic_name}"
        return b.call(intrinsic(b.module, name, wide, [value.type]), [value])

    target = llvm_type(dst)
    if dst.itemsize < 4 or dst is DType.INT32:
        narrow = saturating("fptosi", I32)
        return b.trunc(narrow, target) if target.width < 32 else narrow
    signed = saturating("fptosi", I64)
    if dst is not DType.UINT64:
        return b.trunc(signed, target) if target.width < 64 else signed
    negative = b.fcmp_ordered("<", value, ir.Constant(value.type, 0.0))
    return b.select(negative, signed, saturating("fptoui", I64))


def _nonzero(b: ir.IRBuilder, value: ir.Value, src: DType) -> ir.Value:
    if src.is_float:
        return b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))  # NaN is truthy
    return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))


def _resize_int(b: ir.IRBuilder, value: ir.Value, src: DType, dst: DType) -> ir.Value:
    source, target = llvm_type(src), llvm_type(dst)
    if target.width < source.width:
        return b.trunc(value, target)
    if target.width > source.width:
        return (b.sext if _is_signed(src) else b.zext)(value, target)
    return value


def convert(b: ir.IRBuilder, value: ir.Value, src: DType, dst: DType) -> ir.Value:
    """``value`` (of dtype src) as dtype dst, following NumPy's astype."""
    if src is dst:
        return value
    if src is DType.FLOAT16:
        return convert(b, half_to_float(b, value), DType.FLOAT32, dst)
    if dst is DType.BOOL:
        return b.zext(_nonzero(b, value, src), I8)
    if dst is DType.FLOAT16:
        return float_to_half(b, convert(b, value, src, DType.FLOAT32))
    target = llvm_type(dst)
    if src.is_float and dst.is_float:
        return b.fpext(value, target) if dst.itemsize > src.itemsize else b.fptrunc(value, target)
    if src.is_float:
        return _float_to_int(b, value, dst)
    if dst.is_float:
        return (b.sitofp if _is_signed(src) else b.uitofp)(value, target)
    return _resize_int(b, value, src, dst)


def load_as(b: ir.IRBuilder, ref: TensorRef, flat: ir.Value, dtype: DType) -> ir.Value:
    return convert(b, ref.load(b, flat), ref.type.dtype, dtype)


def store_as(b: ir.IRBuilder, ref: TensorRef, flat: ir.Value, value: ir.Value, dtype: DType) -> None:
    """Store a value computed in ``dtype`` (an i1 result counts as bool) into ``ref``'s dtype."""
    if value.type == BIT:
        value, dtype = b.zext(value, I8), DType.BOOL
    ref.store(b, convert(b, value, dtype, ref.type.dtype), flat)
