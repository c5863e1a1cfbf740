"""Channels-last tensors for the spatial ops (Conv, ConvTranspose, pooling and their integer twins).

ONNX and PyTorch lay activations out channels first (N, C, D1, ..., Dn); TFLite, TensorFlow and Keras
lay them out channels last (N, D1, ..., Dn, C). Rather than surrounding every layer of a channels-last
model with transposes (a buffer and a pass over memory each, which the model never asked for), a
spatial op carries the layout of its activation input and output as the attribute ``channels_last``:
the imported graph keeps the framework's shapes from input to output, and kernels read the layout they
are given. Weights keep one layout whatever the activations' (Conv: (M, C/group, k1, ..., kn)), so
per-channel quantization, BatchNorm folding and the integer rules see the same weights for every
framework.

An op opts in with ``@channels_last_op``: its shape rule and reference kernel are written once for
channels first, and the decorator runs them on the channels-first view of input 0 and turns output 0
back (the inner call sees ``channels_last=False``, so helpers it shares with other ops are not
turned twice). Kernels that work on channels-last data natively read ``attrs.channels_last`` themselves; the
exporter wraps any other in transposes (exporters/glow/lower.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pegasus.ir.tensor import TensorType


@dataclass(frozen=True)
class LayoutAttrs:
    """``channels_last``: input 0 and output 0 are (N, D1, ..., Dn, C) instead of (N, C, D1, ..., Dn)."""

    channels_last: bool = False


def to_first_perm(rank: int) -> tuple[int, ...]:
    """The transpose permutation taking a channels-last tensor of ``rank`` to channels first."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def to_last_perm(rank: int) -> tuple[int, ...]:
    """The transpose permutation taking a channels-first tensor of ``rank`` to channels last."""
    return (0,) + tuple(range(2, rank)) + (1,)


def first_shape(shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    """``shape`` in channels-first order (unchanged when it already is)."""
    shape = tuple(shape)
    return tuple(shape[p] for p in to_first_perm(len(shape))) if channels_last and len(shape) > 2 else shape


def last_shape(shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    shape = tuple(shape)
    return tuple(shape[p] for p in to_last_perm(len(shape))) if channels_last and len(shape) > 2 else shape


def channel_axis(rank: int, channels_last: bool) -> int:
    return rank - 1 if channels_last else 1


def _retype(ttype: TensorType | None, shape_fn, channels_last: bool) -> TensorType | None:
    if ttype is None:
        return None
    return TensorType(shape_fn(ttype.shape, channels_last), ttype.dtype, ttype.quant)


def channels_last_op(cls):
    """Class decorator: run the op's channels-first ``infer``/``reference`` on channels-last data when
    ``attrs.channels_last`` is set (input 0 is viewed channels first, output 0 is turned back)."""
    infer, reference = cls.infer, cls.reference

    def wrapped_infer(attrs: Any, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        if not attrs.channels_last:
            return infer(attrs, inputs)
        outs = infer(replace(attrs, channels_last=False), [_retype(inputs[0], first_shape, True), *inputs[1:]])
        return [_retype(outs[0], last_shape, True), *outs[1:]]

    def wrapped_reference(attrs: Any, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        if not attrs.channels_last:
            return reference(attrs, inputs)
        x = inputs[0]
        first = np.ascontiguousarray(x.transpose(to_first_perm(x.ndim)))
        outs = reference(replace(attrs, channels_last=False), [first, *inputs[1:]])
        y = outs[0]
        return [np.ascontiguousarray(y.transpose(to_last_perm(y.ndim))), *outs[1:]]

    cls.infer = staticmethod(wrapped_infer)
    cls.reference = staticmethod(wrapped_reference)
    cls.layout_sensitive = True
    return cls
