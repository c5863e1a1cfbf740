"""A tensor as kernels see it: ``TensorRef``, a typed pointer with its static shape (flat indices, loads,
stores) and, for an integer constant, its bounds (``constant_bounds``); and the layout arithmetic kernels share:
``strides_of`` (row-major element strides), ``flat_spatial`` (an (N, C, D1, ...) tensor seen as (N, C, D1*...)),
``batch_steps`` (where each batch matrix of a broadcast matrix product starts)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from pegasus.exporters.glow.llvm.types import I32, llvm_type
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType


def strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for dim in reversed(shape):
        strides.append(running)
        running *= dim
    return tuple(reversed(strides))


@dataclass
class TensorRef:
    """A tensor of the layer as a typed pointer with its static shape."""

    ptr: ir.Value
    type: TensorType
    #: (min, max) of an integer constant's values as exported (None: not a constant, or not integers): lets a
    #: kernel prove a sum cannot overflow instead of testing it at run time
    bounds: tuple[int, int] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def strides(self) -> tuple[int, ...]:
        return strides_of(self.type.shape)

    @property
    def element(self) -> ir.Type:
        return llvm_type(self.type.dtype)

    def flat(self, builder: ir.IRBuilder, indices: list[ir.Value | int]) -> ir.Value:
        """Flat element index of multi-dimensional ``indices`` (ints are folded)."""
        total: ir.Value = ir.Constant(I32, 0)
        for index, stride in zip(indices, self.strides):
            if stride == 0 or (isinstance(index, int) and index == 0):
                continue
            term = ir.Constant(I32, index * stride) if isinstance(index, int) else (
                index if stride == 1 else builder.mul(index, ir.Constant(I32, stride), flags=("nsw",)))
            total = term if isinstance(total, ir.Constant) and total.constant == 0 else builder.add(
                total, term, flags=("nsw",))
        return total

    def address(self, builder: ir.IRBuilder, flat: ir.Value | int) -> ir.Value:
        flat = ir.Constant(I32, flat) if isinstance(flat, int) else flat
        return builder.gep(self.ptr, [flat], inbounds=True)

    def load(self, builder: ir.IRBuilder, flat: ir.Value | int) -> ir.Value:
        return builder.load(self.address(builder, flat))

    def store(self, builder: ir.IRBuilder, value: ir.Value, flat: ir.Value | int) -> None:
        builder.store(value, self.address(builder, flat))


def batch_steps(shape: tuple[int, ...], batch: tuple[int, ...], matrix: int) -> list[int]:
    """Flat step of each output batch axis in an operand whose batch axes broadcast to ``batch``."""
    own = (1,) * (len(batch) - len(shape) + 2) + tuple(shape[:-2])
    strides = strides_of(own)
    return [stride * matrix if size > 1 else 0 for size, stride in zip(own, strides)]


def flat_spatial(ref: TensorRef, ptr: ir.Value | None = None) -> TensorRef:
    """``ref`` (N, C, D1, ...) seen as (N, C, D1*...) at ``ptr`` (default: its own)."""
    shape = ref.shape
    return TensorRef(ref.ptr if ptr is None else ptr, TensorType((*shape[:2], math.prod(shape[2:])), ref.type.dtype))


def constant_bounds(graph: Graph, name: str) -> tuple[int, int] | None:
    """(min, max) of a non-empty integer constant (TensorRef.bounds)."""
    tensor = graph.tensors.get(name)
    if tensor is None or not tensor.is_constant or not tensor.type.dtype.is_integer or not tensor.type.size:
        return None
    values = graph.value_of(name)
    return int(values.min()), int(values.max())
