"""Memory accesses LLVM must take as written: a volatile load (one access of its width: an i64 stays one LDRD
on Arm) and a pointer laundered through an empty inline-assembly statement (the same address, whose origin
LLVM no longer sees, so it neither forwards values stored through the original nor folds constant offsets
into the loads). The Cortex-M integer kernels use them where LLVM's own choices cost instructions
(kernels/integer/integer_im2col.py, kernels/parameters.py)."""

from __future__ import annotations

from llvmlite import ir


class _VolatileLoad(ir.LoadInstr):
    """``load volatile`` (llvmlite's LoadInstr has no such flag)."""

    def descr(self, buf):
        super().descr(buf)
        buf[-1] = buf[-1].replace("load ", "load volatile ", 1)


def volatile_load(b: ir.IRBuilder, pointer: ir.Value, align: int) -> ir.Value:
    """A volatile load at the builder's position."""
    load = _VolatileLoad(b.block, pointer)
    load.align = align
    b._insert(load)
    return load


def opaque(b: ir.IRBuilder, pointer: ir.Value) -> ir.Value:
    """``pointer`` through an empty inline assembly statement."""
    launder = ir.InlineAsm(ir.FunctionType(pointer.type, [pointer.type]), "", "=r,0", side_effect=False)
    return b.call(launder, [pointer])
