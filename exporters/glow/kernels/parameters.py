"""Per-layer parameter tables in the weights, so that layers of the same shape share one function.

A quantized layer reads arrays derived from the model's numbers at export time — per-channel requantisation
multipliers and shifts, an average's divisors. Compiled into the code as read-only data, they made every layer
function distinct: DS-CNN's four identical depthwise layers were four copies of the same 1.3 KB of
instructions. Here they are model data, as weights are: a layer's tables form one block placed after the
graph's constants in the constant region (``MemoryPlan.add_parameters``), and the layer function reads them
through one pointer argument. Functions whose instructions are then the same text are compiled once
(``codegen._shared``). Arrays that depend only on shapes (im2col tap offsets) stay in the code, one copy per
distinct content (``code_table``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

I32 = ir.IntType(32)
#: each table starts on this boundary within the block (the widest element, i64, and LDRD want 8)
TABLE_ALIGN = 8


class LayerParameters:
    """The tables one layer function reads from its parameter block (``pointer``: an ``i8*`` argument)."""

    def __init__(self, pointer: ir.Value):
        self.pointer = pointer
        self.data = bytearray()

    def table(self, b: ir.IRBuilder, values: tuple[int, ...], ty: ir.IntType) -> ir.Value:
        """A ``ty*`` to ``values`` stored little-endian in the block."""
        offset = -(-len(self.data) // TABLE_ALIGN) * TABLE_ALIGN
        self.data += bytes(offset - len(self.data))
        self.data += np.asarray([int(v) for v in values], dtype=f"<i{ty.width // 8}").tobytes()
        with b.goto_entry_block():
            raw = b.gep(self.pointer, [ir.Constant(I32, offset)], inbounds=True)
            pointer = b.bitcast(raw, ty.as_pointer())
            launder = ir.InlineAsm(ir.FunctionType(pointer.type, [pointer.type]), "", "=r,0", side_effect=False)
            return b.call(launder, [pointer])


def code_table(module: ir.Module, name: str, values: tuple[int, ...], ty: ir.IntType = I32) -> ir.GlobalVariable:
    """A constant array in the code's read-only data, one per distinct (type, values) in the module (named
    after its first user): layers of the same shape then refer to the same symbol and stay identical."""
    made = module.__dict__.setdefault("_pegasus_code_tables", {})
    key = (str(ty), tuple(int(v) for v in values))
    if key not in made:
        array_ty = ir.ArrayType(ty, len(values))
        table = ir.GlobalVariable(module, array_ty, name=module.get_unique_name(name))
        table.initializer = ir.Constant(array_ty, [ir.Constant(ty, v) for v in key[1]])
        table.global_constant = True
        table.linkage = "internal"
        table.unnamed_addr = True
        made[key] = table
    return made[key]


def load_channel(b: ir.IRBuilder, table: ir.Value, index: ir.Value) -> ir.Value:
    """``table[index]``: a code table (a global array) or a parameter table (a pointer)."""
    if isinstance(table, ir.GlobalVariable):
        return b.load(b.gep(table, [ir.Constant(I32, 0), index], inbounds=True))
    return b.load(b.gep(table, [index], inbounds=True))
