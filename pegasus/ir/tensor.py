"""What the IR knows about one tensor: its static type and, for constants, its value.

Shapes are fully static tuples of ints: a microcontroller bundle has a fixed memory plan, so every
symbolic dimension is resolved at import (``--input-size-list``/``--define-symbol``).
Quantization parameters belong to the tensor type, as in Glow, not to a side table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pegasus.ir.dtypes import DType


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: real = scale * (q - zero_point); per-channel when ``axis`` is set."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None


@dataclass(frozen=True)
class TensorType:
    """Static shape and element type of a tensor."""

    shape: tuple[int, ...]
    dtype: DType
    quant: QuantParams | None = None

    @property
    def size(self) -> int:
        return math.prod(int(d) for d in self.shape)   # exact: an int64 product wraps past 2**63 silently

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        return cls(tuple(int(d) for d in array.shape), DType.from_numpy(array.dtype))

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(map(str, self.shape))}]"


@dataclass
class Tensor:
    """A named value in the graph; ``data`` is set for constants (weights, folded subgraphs)."""

    name: str
    type: TensorType
    data: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @classmethod
    def constant(cls, name: str, array: np.ndarray) -> Tensor:
        array = np.asarray(array, order="C")  # (ascontiguousarray would turn scalars into 1-D)
        return cls(name, TensorType.of(array), array)
