"""The LLVM types kernels name: the integer and float types (I8 .. I64, BIT, F32), and the LLVM type of each IR
dtype (``llvm_type``)."""

from __future__ import annotations

from llvmlite import ir

from pegasus.ir.dtypes import DType

BIT = ir.IntType(1)
I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
Value = ir.Value

LLVM_TYPES: dict[DType, ir.Type] = {
    DType.FLOAT32: ir.FloatType(), DType.FLOAT64: ir.DoubleType(), DType.FLOAT16: ir.HalfType(),
    DType.INT8: ir.IntType(8), DType.UINT8: ir.IntType(8), DType.BOOL: ir.IntType(8),
    DType.INT16: ir.IntType(16), DType.UINT16: ir.IntType(16), DType.INT32: ir.IntType(32),
    DType.UINT32: ir.IntType(32), DType.INT64: ir.IntType(64), DType.UINT64: ir.IntType(64),
}


def llvm_type(dtype: DType) -> ir.Type:
    return LLVM_TYPES[dtype]
