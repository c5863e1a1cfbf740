"""Per-layer parameter tables in the weights, so that layers of the same shape share one function.

A quantized layer reads arrays derived from the model's numbers at export time — per-channel requantisation
multipliers and shifts, an average's divisors. Compiled into the code as read-only data, they made every layer
function distinct: DS-CNN's four identical depthwise layers were four copies of the same 1.3 KB of
instructions. Here they are model data, as weights are: a layer's tables form one block placed after the
graph's constants in the constant region (``MemoryPlan.add_parameters``), and the layer function reads them
through one pointer argument. Functions whose instructions are then the same text are compiled once
(``codegen._shared``). Arrays that depend only on shapes (im2col tap offsets, pooling divisors) stay in the
code, one copy per distinct content (``shape_ops.constant_table``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.llvm.barriers import opaque
from pegasus.exporters.glow.llvm.tables import table_load

I32 = ir.IntType(32)
#: each table starts on this boundary within the block (the widest element, i64, and LDRD want 8)
TABLE_ALIGN = 8


class LayerParameters:
    """The tables one layer function reads from its parameter block (``pointer``: an ``i8*`` argument)."""

    def __init__(self, pointer: ir.Value, dims: dict[tuple[int, int], int] | None = None):
        """``dims``: the (input position, axis) -> size the kernel reads at run time (registry.runtime_dims),
        the block's first table."""
        self.pointer = pointer
        self.data = bytearray()
        self._dims = list(dims or {})
        self._dims_table = None
        #: the run-time dimensions the kernel has read (codegen checks it read every one it declared)
        self.dims_read: set[tuple[int, int]] = set()
        self.data += dims_table(dims or {})

    def dim(self, b: ir.IRBuilder, key: tuple[int, int]) -> ir.Value:
        """The size ``key`` (input position, axis) as an i32 loaded from the block's first table."""
        if self._dims_table is None:
            with b.goto_entry_block():
                self._dims_table = opaque(b, b.bitcast(self.pointer, I32.as_pointer()))
        self.dims_read.add(key)
        return b.load(b.gep(self._dims_table, [ir.Constant(I32, self._dims.index(key))], inbounds=True))

    def table(self, b: ir.IRBuilder, values: tuple[int, ...], ty: ir.IntType) -> ir.Value:
        """A ``ty*`` to ``values`` stored little-endian in the block."""
        offset = -(-len(self.data) // TABLE_ALIGN) * TABLE_ALIGN
        self.data += bytes(offset - len(self.data))
        self.data += np.asarray([int(v) for v in values], dtype=f"<i{ty.width // 8}").tobytes()
        with b.goto_entry_block():
            raw = b.gep(self.pointer, [ir.Constant(I32, offset)], inbounds=True)
            # laundered: LLVM keeps each table's own base instead of folding offsets from the argument
            # (MobileNetV1 on Cortex-M7: 10.79 -> 10.65 M instructions)
            return opaque(b, b.bitcast(raw, ty.as_pointer()))


def dims_table(dims: dict[tuple[int, int], int]) -> bytes:
    """A block's first table: the run-time sizes ``dims`` as little-endian i32, padded to ``TABLE_ALIGN`` (no
    bytes without any). Layers sharing a function have as many, so the tables after them start alike."""
    table = np.asarray(list(dims.values()), dtype="<i4").tobytes()
    return table + bytes(-len(table) % TABLE_ALIGN)


def load_channel(b: ir.IRBuilder, table: ir.Value, index: ir.Value) -> ir.Value:
    """``table[index]``: a code table (``constant_table``'s global array) or a parameter table (a pointer)."""
    if isinstance(table, ir.GlobalVariable):
        return table_load(b, table, index)
    return b.load(b.gep(table, [index], inbounds=True))
