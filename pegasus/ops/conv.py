"""Op family: convolutions (Conv, ConvTranspose) over NCHW tensors with 1, 2 or 3 spatial axes.

The geometry (auto_pad, pads, strides, dilations) is resolved by ``spatial.window`` and
``spatial.transposed_window``, shared with the pooling ops. The reference kernels turn every
convolution into a few large matrix products (im2col for Conv, col2im for ConvTranspose), grouped
convolutions being a batch of products, so a whole ImageNet network runs in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pegasus.ir.tensor import TensorType
from pegasus.ops.layout import channels_last_op
from pegasus.ops.registry import OpDef, ShapeError, register
from pegasus.ops.spatial import Window, WindowAttrs, prod, spatial_sizes, transposed_window, window, window_view

#: Conv works on blocks of output rows so that the im2col matrix stays below this many elements.
_COLS_LIMIT = 1 << 23


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """Accumulate float16 in float32 (and keep float64); cast back to the input's type at the end."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _check_weights(x: TensorType, w: TensorType, b: TensorType | None, group: int, transposed: bool) -> int:
    """Check X, W, B of a (transposed) convolution; returns the number of output channels."""
    spatial_sizes(x.shape, "X")
    if w.rank != x.rank:
        raise ShapeError(f"W has rank {w.rank}, X has rank {x.rank}")
    if group < 1:
        raise ShapeError(f"group must be >= 1, got {group}")
    channels = x.shape[1]
    if transposed:
        if w.shape[0] != channels or channels % group:
            raise ShapeError(f"W {list(w.shape)} must be (C={channels}, M/group, k...) "
                             f"with C divisible by group={group}")
        out_channels = w.shape[1] * group
    else:
        if w.shape[1] * group != channels or w.shape[0] % group:
            raise ShapeError(f"W {list(w.shape)} must be (M, C/group={channels}/{group}, k...) "
                             f"with M divisible by group")
        out_channels = w.shape[0]
    if b is not None and tuple(b.shape) != (out_channels,):
        raise ShapeError(f"B has shape {list(b.shape)}, expected [{out_channels}]")
    return out_channels


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is not None:
        y += b.astype(y.dtype).reshape((-1,) + (1,) * (y.ndim - 2))
    return y


def conv_nd(x: np.ndarray, w: np.ndarray, win: Window, group: int) -> np.ndarray:
    """Grouped N-d convolution (no bias): im2col over blocks of output rows, one batched matmul each."""
    n_batch, channels = x.shape[:2]
    out_ch, n = w.shape[0], len(win.kernel)
    cg, mg, taps = channels // group, out_ch // group, prod(win.kernel)
    view = window_view(x, win, 0)  # (N, C, *out, *kernel)
    order = (0, 1) + tuple(range(2 + n, 2 + 2 * n)) + tuple(range(2, 2 + n))
    weights = w.reshape(group, mg, cg * taps)
    y = np.empty((n_batch, group, mg) + win.out, dtype=x.dtype)
    row = prod(win.out[1:])
    step = max(1, _COLS_LIMIT // max(1, n_batch * channels * taps * row))
    for r0 in range(0, win.out[0], step):
        block = view[:, :, r0:r0 + step].transpose(order)
        rows = block.shape[-n]
        cols = block.reshape(n_batch, group, cg * taps, rows * row)
        y[:, :, :, r0:r0 + rows] = np.matmul(weights, cols).reshape((n_batch, group, mg, rows) + win.out[1:])
    return y.reshape((n_batch, out_ch) + win.out)


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, win: Window, group: int) -> np.ndarray:
    """Grouped N-d transposed convolution (no bias): one batched matmul, then col2im tap by tap."""
    n_batch, channels = x.shape[:2]
    in_sizes = x.shape[2:]
    cg, mg, taps = channels // group, w.shape[1], prod(win.kernel)
    weights = w.reshape(group, cg, mg * taps).transpose(0, 2, 1)  # (G, Mg*K, Cg)
    cols = np.matmul(weights, x.reshape(n_batch, group, cg, prod(in_sizes)))
    cols = cols.reshape((n_batch, group * mg, taps) + tuple(in_sizes))
    shift = tuple(max(0, -b) for b in win.pads_begin)  # a negative pad extends the output with zeros
    full = [(i - 1) * s + e for i, s, e in zip(in_sizes, win.strides, win.extent)]
    size = tuple(max(f + h, b + h + o) for f, h, b, o in zip(full, shift, win.pads_begin, win.out))
    buf = np.zeros((n_batch, group * mg) + size, dtype=x.dtype)
    for t, ks in enumerate(np.ndindex(*win.kernel)):
        index = tuple(slice(h + k * d, h + k * d + (i - 1) * s + 1, s)
                      for h, k, d, i, s in zip(shift, ks, win.dilations, in_sizes, win.strides))
        buf[(slice(None), slice(None)) + index] += cols[:, :, t]
    crop = tuple(slice(b + h, b + h + o) for b, h, o in zip(win.pads_begin, shift, win.out))
    return buf[(slice(None), slice(None)) + crop]


class _ConvolutionBase(OpDef):
    """Shape rule and float kernel shared by Conv and ConvTranspose; each supplies geometry and compute."""

    num_inputs = (2, 3)
    transposed = False

    @classmethod
    def infer(cls, attrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        x, w = inputs[0], inputs[1]
        out_channels = _check_weights(x, w, inputs[2] if len(inputs) > 2 else None, attrs.group, cls.transposed)
        win = cls.geometry(attrs, x.shape, w.shape)
        return [TensorType((x.shape[0], out_channels) + win.out, x.dtype)]

    @classmethod
    def reference(cls, attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        dtype = _compute_dtype(x.dtype)
        win = cls.geometry(attrs, x.shape, w.shape)
        y = cls.compute(x.astype(dtype, copy=False), w.astype(dtype, copy=False), win, attrs.group)
        return [_add_bias(y, b).astype(x.dtype, copy=False)]


@register
@channels_last_op
class Conv(_ConvolutionBase):
    """Y = X ⊛ W + B (cross-correlation, ONNX Conv-22); kernel_shape defaults to W's spatial shape."""

    name = "Conv"
    bias_input = 2

    @staticmethod
    def weight_axis(attrs, index: int, rank: int) -> int | None:
        return 0 if index == 1 else None   # W is (M, C/group, k...)

    @dataclass(frozen=True)
    class Attrs(WindowAttrs):
        group: int = 1

    @staticmethod
    def geometry(attrs: Attrs, x_shape: Sequence[int], w_shape: Sequence[int]) -> Window:
        return window(attrs, x_shape[2:], w_shape[2:])

    @staticmethod
    def compute(x: np.ndarray, w: np.ndarray, win: Window, group: int) -> np.ndarray:
        return conv_nd(x, w, win, group)


@register
@channels_last_op
class ConvTranspose(_ConvolutionBase):
    """Y = transpose of Conv applied to X with W (C, M/group, k...), plus B (ONNX ConvTranspose-22)."""

    name = "ConvTranspose"
    bias_input = 2

    @staticmethod
    def weight_axis(attrs, index: int, rank: int) -> int | None:
        return 1 if index == 1 else None   # W is (C, M/group, k...)

    @dataclass(frozen=True)
    class Attrs(WindowAttrs):
        group: int = 1
        output_padding: tuple[int, ...] = ()
        output_shape: tuple[int, ...] = ()

    transposed = True

    @staticmethod
    def geometry(attrs: Attrs, x_shape: Sequence[int], w_shape: Sequence[int]) -> Window:
        return transposed_window(attrs, x_shape[2:], w_shape[2:], attrs.output_padding, attrs.output_shape)

    @staticmethod
    def compute(x: np.ndarray, w: np.ndarray, win: Window, group: int) -> np.ndarray:
        return conv_transpose_nd(x, w, win, group)
