"""Sparse TFLite constants made dense, once, at import.

The TFLite converter's sparsity option stores a mostly-zero weight as its non-zero values plus metadata
(reader.py's ``Sparsity``): the tensor's dimensions, and any block dimensions, are walked in
``traversal_order``; each walked dimension is DENSE (every index) or SPARSE_CSR (the indices listed for
the position reached so far). The stored values are the leaves of that walk, in order. This is
TFLite's ``FormatConverter::SparseToDense`` (tensorflow/lite/kernels/internal/utils/
sparsity_format_converter.cc), done level by level with NumPy instead of recursively. The graph then
holds the dense weight, so the DENSIFY op that feeds it becomes an identity and a sparse weight read
directly by an op (a sparse FULLY_CONNECTED) is dense as well.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.tflite.reader import Sparsity


def _expand_dense(prev: np.ndarray, columns: list[np.ndarray], size: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Every position reached so far goes on to each of ``size`` indices."""
    index = np.tile(np.arange(size, dtype=np.int64), len(prev))
    return (np.repeat(prev, size) * size + index, [np.repeat(c, size) for c in columns] + [index])


def _expand_sparse(prev: np.ndarray, columns: list[np.ndarray], segments: np.ndarray,
                   indices: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each position p goes on to entries segments[p]..segments[p+1] of ``indices``."""
    if prev.size and (prev.max() + 1 >= segments.size):
        raise ValueError(f"array_segments has {segments.size} entries, position {int(prev.max())} needs more")
    starts, ends = segments[prev], segments[prev + 1]
    counts = ends - starts
    if (counts < 0).any() or (ends > indices.size).any():
        raise ValueError("array_segments are not increasing within array_indices")
    offsets = np.cumsum(counts) - counts
    entries = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(offsets, counts) + np.repeat(starts, counts)
    return entries, [np.repeat(c, counts) for c in columns] + [indices[entries]]


def densify(name: str, values: np.ndarray, shape: Sequence[int], sparsity: Sparsity) -> np.ndarray:
    """The dense tensor of ``shape`` whose non-zero ``values`` and layout ``sparsity`` describes."""
    rank, order, dims = len(shape), sparsity.traversal_order, sparsity.dim_metadata
    try:
        if len(dims) != len(order) or len(order) != rank + len(sparsity.block_map):
            raise ValueError(f"{len(order)} traversal dimensions and {len(dims)} dimension metadata for a "
                             f"rank-{rank} tensor with {len(sparsity.block_map)} block dimension(s)")
        prev, columns = np.zeros(1, np.int64), []
        total = math.prod(shape)  # a valid walk never reaches more positions than the dense tensor has elements
        for level, meta in enumerate(dims):
            if meta.format == "DENSE" and not 0 <= len(prev) * meta.dense_size <= total:
                raise ValueError(f"traversal dimension {level} has dense_size {meta.dense_size}, which walks more "
                                 f"positions than the tensor's {total} elements")
            if meta.format == "DENSE":
                prev, columns = _expand_dense(prev, columns, meta.dense_size)
            elif meta.format == "SPARSE_CSR" and meta.array_segments is not None and meta.array_indices is not None:
                prev, columns = _expand_sparse(prev, columns, meta.array_segments, meta.array_indices)
            else:
                raise ValueError(f"traversal dimension {level} has format {meta.format} without its index arrays")
        if len(prev) != values.size:
            raise ValueError(f"the metadata describes {len(prev)} stored values, the buffer holds {values.size}")
        index = [np.zeros(len(prev), np.int64) for _ in range(rank)]
        for level in range(rank):
            index[order[level]] = columns[level]
        for level in range(rank, len(order)):
            block = order[level] - rank
            size = dims[order[rank + block]].dense_size  # the block's size, as FormatConverter reads it
            index[sparsity.block_map[block]] = index[sparsity.block_map[block]] * size + columns[level]
        if any(((i < 0) | (i >= d)).any() for i, d in zip(index, shape)):
            raise ValueError("an index lies outside the tensor")
        dense = np.zeros(tuple(shape), values.dtype)
        dense[tuple(index)] = values
    except (ValueError, IndexError) as exc:
        raise PegasusError(f"sparse tensor '{name}' {list(shape)}: bad sparsity metadata ({exc})") from exc
    return dense
