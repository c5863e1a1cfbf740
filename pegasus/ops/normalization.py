"""Op family: normalizations (BatchNormalization, InstanceNormalization, LayerNormalization, LRN).

BatchNormalization keeps scale, bias, mean and variance as graph inputs (usually constants) so the
fold_batchnorm pass can merge them into a preceding Conv/Gemm/MatMul. Statistics are computed in
float32 (float64 for float64 inputs) and the result is cast back to X's type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import broadcast_shape, normalize_axis
from pegasus.ops.registry import OpDef, ShapeError, register


def _acc(x: np.ndarray) -> np.ndarray:
    """X in the precision statistics are computed in."""
    return x.astype(np.float64 if x.dtype == np.float64 else np.float32, copy=False)


def _per_channel(p: np.ndarray, rank: int) -> np.ndarray:
    """A (C, ...) parameter aligned with axis 1 of a rank-``rank`` tensor."""
    return _acc(p).reshape(p.shape + (1,) * (rank - 1 - p.ndim))


def _check_channel_params(x: TensorType, params: Sequence[TensorType], names: str) -> None:
    if x.rank < 2:
        raise ShapeError(f"X must be (N, C, ...), got {list(x.shape)}")
    for name, p in zip(names.split(), params):
        if p.rank < 1 or p.shape[0] != x.shape[1] or p.rank >= x.rank or \
                tuple(p.shape[1:]) != tuple(x.shape[2:2 + p.rank - 1]):
            raise ShapeError(f"{name} has shape {list(p.shape)}, expected [{x.shape[1]}] (one per channel)")


@register
class BatchNormalization(OpDef):
    """Y = scale * (X - mean) / sqrt(var + epsilon) + B per channel (BatchNormalization-15). With
    training_mode, mean/var are X's batch statistics and the running statistics are also returned."""

    name = "BatchNormalization"
    num_inputs = (5, 5)

    @dataclass(frozen=True)
    class Attrs:
        epsilon: float = 1e-5
        momentum: float = 0.9
        training_mode: int = 0

    @staticmethod
    def infer(attrs: Attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x, *params = inputs
        _check_channel_params(x, params, "scale B input_mean input_var")
        y = [TensorType(x.shape, x.dtype)]
        return y + [params[2], params[3]] if attrs.training_mode else y

    @staticmethod
    def affine(attrs: Attrs, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
               var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inference mode as a per-channel affine map Y = slope * X + offset (float64): what the passes that
        fold it into a linear layer and the integer lowering use."""
        scale, bias, mean, var = (np.asarray(p, dtype=np.float64).reshape(-1) for p in (scale, bias, mean, var))
        slope = scale / np.sqrt(var + float(attrs.epsilon))
        return slope, bias - mean * slope

    @staticmethod
    def reference(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, scale, bias, mean, var = inputs
        xa = _acc(x)
        if attrs.training_mode:
            axes = (0,) + tuple(range(2, x.ndim))
            batch_mean, batch_var = xa.mean(axis=axes), xa.var(axis=axes)
            running = [(m * attrs.momentum + b * (1 - attrs.momentum)).astype(m.dtype)
                       for m, b in ((mean, batch_mean), (var, batch_var))]
            mean, var = batch_mean, batch_var
        inv = _per_channel(scale, x.ndim) / np.sqrt(_per_channel(var, x.ndim) + attrs.epsilon)
        y = (xa - _per_channel(mean, x.ndim)) * inv + _per_channel(bias, x.ndim)
        return [y.astype(x.dtype)] + (running if attrs.training_mode else [])


@register
class InstanceNormalization(OpDef):
    """Y = scale * (X - mean) / sqrt(var + epsilon) + B, statistics per (n, c) over the spatial axes
    (InstanceNormalization-22)."""

    name = "InstanceNormalization"
    num_inputs = (3, 3)

    @dataclass(frozen=True)
    class Attrs:
        epsilon: float = 1e-5

    @staticmethod
    def infer(attrs: Attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x, scale, bias = inputs
        _check_channel_params(x, [scale, bias], "scale B")
        if scale.rank != 1 or bias.rank != 1:
            raise ShapeError(f"scale and B must be 1-D [{x.shape[1]}]")
        return [TensorType(x.shape, x.dtype)]

    @staticmethod
    def reference(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, scale, bias = inputs
        xa = _acc(x)
        axes = tuple(range(2, x.ndim))
        mean, var = xa.mean(axis=axes, keepdims=True), xa.var(axis=axes, keepdims=True)
        y = (xa - mean) / np.sqrt(var + attrs.epsilon) * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
        return [y.astype(x.dtype)]


@register
class LayerNormalization(OpDef):
    """Y = (X - mean) * InvStdDev * Scale + B, statistics over axes [axis, rank) computed in
    stash_type; also returns Mean and InvStdDev = 1 / sqrt(var + epsilon) (LayerNormalization-17)."""

    name = "LayerNormalization"
    num_inputs = (2, 3)

    @dataclass(frozen=True)
    class Attrs:
        axis: int = -1
        epsilon: float = 1e-5
        stash_type: int = 1  # an ONNX TensorProto element type; 1 = float32

    @staticmethod
    def infer(attrs: Attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x, *params = inputs
        axis = normalize_axis(attrs.axis, x.rank)
        for p in params:
            if p is not None and broadcast_shape(p.shape, x.shape) != x.shape:
                raise ShapeError(f"Scale/B {list(p.shape)} does not broadcast to X {list(x.shape)}")
        stats = TensorType(tuple(x.shape[:axis]) + (1,) * (x.rank - axis), DType.from_onnx(attrs.stash_type))
        return [TensorType(x.shape, x.dtype), stats, stats]

    @staticmethod
    def reference(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        stash = DType.from_onnx(attrs.stash_type).numpy
        xs = x.astype(stash)
        axes = tuple(range(normalize_axis(attrs.axis, x.ndim), x.ndim))
        mean = xs.mean(axis=axes, keepdims=True)
        inv_std = (1 / np.sqrt(((xs - mean) ** 2).mean(axis=axes, keepdims=True) + attrs.epsilon)).astype(stash)
        y = (xs - mean) * inv_std * scale.astype(stash)
        if bias is not None:
            y = y + bias.astype(stash)
        return [y.astype(x.dtype), mean, inv_std]


@register
class LRN(OpDef):
    """Y = X / (bias + alpha / size * sum of X² over the `size` channels around c) ** beta (LRN-13)."""

    name = "LRN"

    @dataclass(frozen=True)
    class Attrs:
        size: int = 0
        alpha: float = 1e-4
        beta: float = 0.75
        bias: float = 1.0

    @staticmethod
    def infer(attrs: Attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x = inputs[0]
        if attrs.size < 1:
            raise ShapeError(f"LRN size must be a positive integer, got {attrs.size}")
        if x.rank < 2:
            raise ShapeError(f"X must be (N, C, ...), got {list(x.shape)}")
        return [TensorType(x.shape, x.dtype)]

    @staticmethod
    def reference(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        xa = _acc(x)
        before = (attrs.size - 1) // 2
        widths = [(0, 0), (before, attrs.size - 1 - before)] + [(0, 0)] * (x.ndim - 2)
        squares = np.pad(xa * xa, widths)
        total = np.lib.stride_tricks.sliding_window_view(squares, attrs.size, axis=1).sum(axis=-1)
        return [(xa / (attrs.bias + attrs.alpha / attrs.size * total) ** attrs.beta).astype(x.dtype)]
