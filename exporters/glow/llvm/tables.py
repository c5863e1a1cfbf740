"""Read-only tables baked into the bundle's code (per-axis index maps, per-channel constants when a layer has no
parameter block): ``constant_table`` names each by its contents so equal tables are shared, ``table_load`` reads
one element."""

from __future__ import annotations

import hashlib

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.llvm.loops import const
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.ir.dtypes import DType


def constant_table(module: ir.Module, values: np.ndarray) -> ir.GlobalVariable:
    """A read-only table in the bundle (internal constant), named by its contents so layers that need
    the same table share it and the same model gives the same object file."""
    values = np.ascontiguousarray(values).reshape(-1)
    digest = hashlib.sha1(values.dtype.str.encode() + values.tobytes()).hexdigest()[:16]
    name = f"pegasus.table.{values.dtype.name}.{digest}"
    if name in module.globals:
        return module.globals[name]
    element = llvm_type(DType.from_numpy(values.dtype))
    array = ir.ArrayType(element, len(values))
    table = ir.GlobalVariable(module, array, name=name)
    table.global_constant = True
    table.linkage = "internal"
    table.align = max(values.dtype.itemsize, 4)
    table.initializer = ir.Constant(array, [v.item() for v in values])
    return table


def table_load(b: ir.IRBuilder, table: ir.GlobalVariable, index: ir.Value) -> ir.Value:
    return b.load(b.gep(table, [const(0), index], inbounds=True))
