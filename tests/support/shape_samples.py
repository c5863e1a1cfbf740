"""Random sample arrays of the data-movement kernel tests (tests/exporters/kernels/reference), shared with the
reduction and resize tests."""

from __future__ import annotations

import numpy as np

RNG = np.random.default_rng(11)


def sample(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """Values that tell positions apart (ints: -100..100 within the type's range)."""
    if dtype == "bool":
        return RNG.random(shape) > 0.5
    if np.dtype(dtype).kind == "f":
        return (RNG.standard_normal(shape) * 10).astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
