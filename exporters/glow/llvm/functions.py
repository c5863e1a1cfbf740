"""Declarations and slots inside an LLVM function: ``intrinsic`` declares an LLVM intrinsic once per module,
``entry_alloca`` puts a stack slot in the entry block (where LLVM promotes it to registers)."""

from __future__ import annotations

from llvmlite import ir


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """An LLVM intrinsic by full name (``llvm.fabs.f32``), declared once per module. Only intrinsics that
    every target expands inline are used (no library calls)."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ret, args), name=name)


def entry_alloca(b: ir.IRBuilder, typ: ir.Type) -> ir.Value:
    """A stack slot in the function's entry block (where LLVM promotes it to registers)."""
    current = b.block
    b.position_at_start(b.function.entry_basic_block)
    slot = b.alloca(typ)
    b.position_at_end(current)
    return slot
