"""LLVM for the integer arithmetic of ``pegasus.ops.fixedpoint``, shared by every integer emitter so
that the generated code rounds exactly as ``pegasus inference --dtype quantized`` does.

``requantize`` computes ``clamp(((acc * M + 2**(S-1)) >> S) + zp, lo, hi)`` in 64-bit integers
(on 32-bit ARM the product is one SMULL, the shift a pair of register shifts); when ``M`` is 1 the
multiply disappears, when ``S`` is 0 the rounding does. ``M``/``S`` may be per-channel LLVM values
(loaded from a constant table) or Python ints (folded into the instruction stream).
"""

from __future__ import annotations

from llvmlite import ir

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)

Scalar = ir.Value | int


def widen(b: ir.IRBuilder, value: ir.Value, to: ir.IntType, signed: bool) -> ir.Value:
    """Sign- or zero-extend (or truncate) an integer value to ``to``."""
    width = value.type.width
    if width == to.width:
        return value
    if width > to.width:
        return b.trunc(value, to)
    return b.sext(value, to) if signed else b.zext(value, to)


def _as(value: Scalar, ty: ir.IntType) -> ir.Value:
    return ir.Constant(ty, int(value)) if isinstance(value, int) else value


def rounding_shift(b: ir.IRBuilder, value: ir.Value, shift: Scalar) -> ir.Value:
    """``(v + 2**(S-1)) >> S`` (arithmetic) for S >= 1, ``v`` for S == 0, on the value's own width."""
    ty = value.type
    if isinstance(shift, int):
        if shift == 0:
            return value
        half = ir.Constant(ty, 1 << (shift - 1))
        return b.ashr(b.add(value, half), ir.Constant(ty, shift))
    shift = widen(b, shift, ty, signed=False)
    one = ir.Constant(ty, 1)
    # 2**(S-1) when S >= 1, else 0: (1 << S) >> 1 is exactly that for every S in 0..62
    half = b.lshr(b.shl(one, shift), one)
    return b.ashr(b.add(value, half), shift)


def clamp(b: ir.IRBuilder, value: ir.Value, lo: int, hi: int) -> ir.Value:
    ty = value.type
    low, high = ir.Constant(ty, lo), ir.Constant(ty, hi)
    value = b.select(b.icmp_signed("<", value, low), low, value)
    return b.select(b.icmp_signed(">", value, high), high, value)


def requantize(b: ir.IRBuilder, acc: ir.Value, multiplier: Scalar, shift: Scalar, zero_point: int,
               lo: int, hi: int, out: ir.IntType) -> ir.Value:
    """The requantisation rule on a signed accumulator (any width), result as ``out``."""
    acc = widen(b, acc, I64, signed=True)
    if not (isinstance(multiplier, int) and multiplier == 1):
        acc = b.mul(acc, widen(b, _as(multiplier, I64), I64, signed=True))
    scaled = rounding_shift(b, acc, shift if isinstance(shift, int) else widen(b, shift, I64, signed=False))
    if zero_point:
        scaled = b.add(scaled, ir.Constant(I64, zero_point))
    return b.trunc(clamp(b, scaled, lo, hi), out) if out.width < 64 else clamp(b, scaled, lo, hi)


def channel_table(module: ir.Module, name: str, values: tuple[int, ...], ty: ir.IntType = I32) -> ir.GlobalVariable:
    """A constant array of per-channel parameters in the code's read-only data (not the weights)."""
    array_ty = ir.ArrayType(ty, len(values))
    table = ir.GlobalVariable(module, array_ty, name=module.get_unique_name(name))
    table.initializer = ir.Constant(array_ty, [int(v) for v in values])
    table.global_constant = True
    table.linkage = "internal"
    return table


def load_channel(b: ir.IRBuilder, table: ir.GlobalVariable, index: ir.Value) -> ir.Value:
    return b.load(b.gep(table, [ir.Constant(I32, 0), index], inbounds=True))
