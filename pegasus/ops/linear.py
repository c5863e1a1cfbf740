"""Op family: matrix products (Gemm, MatMul), the fully connected layers of a network.

Gemm keeps ONNX's alpha/beta/transpose attributes so the importer stays a name mapping; a later
lowering turns it into MatMul + Add for the exporters. float16 is multiplied in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pegasus.ir.tensor import TensorType
from pegasus.ops.common import broadcast_shape
from pegasus.ops.registry import OpDef, ShapeError, register


def _widen(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype == np.float16 else a


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """numpy.matmul's shape rule: 1-D operands gain and then lose a unit axis; batch axes broadcast."""
    if not a or not b:
        raise ShapeError("MatMul operands must have rank >= 1")
    a2 = tuple(a) if len(a) > 1 else (1, a[0])
    b2 = tuple(b) if len(b) > 1 else (b[0], 1)
    if a2[-1] != b2[-2]:
        raise ShapeError(f"MatMul inner dimensions differ: {list(a)} @ {list(b)}")
    batch = broadcast_shape(a2[:-2], b2[:-2])
    return batch + a2[-2:-1] * (len(a) > 1) + b2[-1:] * (len(b) > 1)


@register
class MatMul(OpDef):
    """Y = A @ B with numpy.matmul semantics (batched, broadcast, 1-D operands) (MatMul-13)."""

    name = "MatMul"
    num_inputs = (2, 2)

    @staticmethod
    def weight_axis(attrs, index: int, rank: int) -> int | None:
        return rank - 1 if index == 1 and rank >= 2 else None   # B's columns are the outputs

    @staticmethod
    def infer(attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        a, b = inputs
        return [TensorType(matmul_shape(a.shape, b.shape), a.dtype)]

    @staticmethod
    def reference(attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        a, b = inputs
        return [np.matmul(_widen(a), _widen(b)).astype(a.dtype, copy=False)]


@register
class Gemm(OpDef):
    """Y = alpha * A' @ B' + beta * C, A' = A.T if transA, B' = B.T if transB; C broadcasts to Y (Gemm-13)."""

    name = "Gemm"
    bias_input = 2
    num_inputs = (2, 3)

    @staticmethod
    def weight_axis(attrs, index: int, rank: int) -> int | None:
        if index != 1:
            return None
        return 0 if attrs.transB else 1   # output column n is row n of B when transB

    @dataclass(frozen=True)
    class Attrs:
        alpha: float = 1.0
        beta: float = 1.0
        transA: int = 0
        transB: int = 0

    @staticmethod
    def infer(attrs: Attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        if a.rank != 2 or b.rank != 2:
            raise ShapeError(f"Gemm needs 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
        m, k = a.shape[::-1] if attrs.transA else a.shape
        kb, n = b.shape[::-1] if attrs.transB else b.shape
        if k != kb:
            raise ShapeError(f"Gemm inner dimensions differ: A' is {[m, k]}, B' is {[kb, n]}")
        if c is not None and broadcast_shape(c.shape, (m, n)) != (m, n):
            raise ShapeError(f"Gemm C {list(c.shape)} does not broadcast to {[m, n]}")
        return [TensorType((m, n), a.dtype)]

    @staticmethod
    def reference(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        a, b = _widen(inputs[0]), _widen(inputs[1])
        c = inputs[2] if len(inputs) > 2 else None
        y = (a.T if attrs.transA else a) @ (b.T if attrs.transB else b)
        if attrs.alpha != 1.0:
            y = attrs.alpha * y
        if c is not None:
            y = y + (attrs.beta * _widen(c) if attrs.beta != 1.0 else _widen(c))
        return [np.asarray(y).astype(inputs[0].dtype, copy=False)]
