"""What a kernel is handed: ``KernelContext`` (the layer's node, an IRBuilder in the layer's function, typed views
of its tensors, the math library, the target, its workspace) and ``piece``, how scratch requests are laid out in a
workspace. Kept apart from the registry so helpers and kernels can take a context without importing the
registry of every implementation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from pegasus.exporters.glow.llvm.functions import entry_alloca
from pegasus.exporters.glow.llvm.tables import constant_table
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import I32
from pegasus.ir.graph import Node


def piece(size: int) -> int:
    """Bytes a scratch piece of ``size`` takes in a workspace (pieces start 16-byte aligned)."""
    return -(-size // 16) * 16


@dataclass
class KernelContext:
    node: Node
    attrs: Any
    builder: ir.IRBuilder
    inputs: list[TensorRef | None]
    outputs: list[TensorRef | None]
    math: Any        # exporters.glow.llvm.mathlib.MathLib
    target: Any      # exporters.glow.target.Target
    workspace: ir.Value | None = None    # i8* to the layer's planned scratch bytes (see ``workspace``)
    workspace_size: int = 0
    _workspace_used: int = 0
    parameters: Any = None   # kernels.parameters.LayerParameters: where the layer's tables go (None: the code)
    layer: Any = None        # the layer (fuse.Layer or a block) this context computes
    choice: Any = None       # kernels.strategy.Choice: its implementation as the select stage chose it
    graph: Any = None        # the lowered graph (blocks read their stages from it)
    refs: Any = None         # tensor name -> TensorRef of the layer's arguments (blocks)
    share: Any = None        # codegen's function de-duplication (row chains share stage functions)

    @property
    def module(self) -> ir.Module:
        return self.builder.module

    def table(self, values: tuple[int, ...], ty: ir.IntType = I32) -> ir.Value:
        """An array of numbers derived from the model (per-channel multipliers, shifts, divisors): in the layer's
        parameter block in the weights when it has one (kernels/parameters.py), else in the code."""
        if self.parameters is None:
            return constant_table(self.module, np.asarray(values, f"<i{ty.width // 8}"))
        return self.parameters.table(self.builder, values, ty)

    def dim(self, position: int, axis: int) -> ir.Value:
        """Input ``position``'s size along ``axis`` as an i32 read at run time from the parameter block: one of
        the dimensions the op's ``runtime_dims`` named for this layer."""
        return self.parameters.dim(self.builder, (position, axis))

    def scratch(self, typ: ir.Type, size: int) -> ir.Value:
        """A ``typ*`` to ``size`` bytes of scratch: from the layer's workspace when it has one (16-byte
        aligned pieces, in request order), else a stack slot in the function's entry block."""
        b = self.builder
        if self.workspace is None:
            return entry_alloca(b, typ)
        offset = piece(self._workspace_used)
        if offset + size > self.workspace_size:
            raise AssertionError(f"layer '{self.node.name}' ({self.node.op}) asked for {offset + size} bytes of "
                                 f"workspace, {self.workspace_size} were planned")
        self._workspace_used = offset + size
        return b.bitcast(b.gep(self.workspace, [ir.Constant(I32, offset)], inbounds=True), typ.as_pointer())
