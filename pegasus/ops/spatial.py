"""Sliding-window geometry shared by Conv, ConvTranspose and the pooling ops.

ONNX spreads one idea over several ops: a kernel slides over the spatial axes (NCHW: every axis after
the channel axis) with strides, dilations and padding given either explicitly (``pads``) or by rule
(``auto_pad``), and pooling adds ``ceil_mode``. ``window``/``transposed_window`` resolve those
attributes once into a ``Window`` (explicit kernel, strides, dilations, begin/end pads, output sizes),
which ``infer``, the reference kernels, and later the exporters all read, so the padding rules exist
in exactly one place. ``window_view`` gives the taps of every output position as a strided NumPy view,
which the kernels reduce with vectorised calls (no Python loop per pixel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pegasus.ops.layout import LayoutAttrs
from pegasus.ops.registry import ShapeError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class WindowAttrs(LayoutAttrs):
    """ONNX attributes common to sliding-window ops; an empty tuple means the ONNX default
    (kernel from the weights, strides and dilations 1, pads 0). ``channels_last`` (pegasus/ops/layout.py)
    says the activations are (N, D1, ..., Dn, C)."""

    auto_pad: str = "NOTSET"
    dilations: tuple[int, ...] = ()
    kernel_shape: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()


@dataclass(frozen=True)
class Window:
    """Resolved geometry over n spatial axes. Output position o of axis i reads input positions
    ``o * strides[i] - pads_begin[i] + k * dilations[i]`` for k in range(kernel[i]); for ConvTranspose
    ``out`` and the pads describe the cropped output (see ``transposed_window``)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """Span of the dilated kernel along each axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def _per_axis(values: Sequence[int], n: int, default: int, what: str) -> tuple[int, ...]:
    if not values:
        return (default,) * n
    if len(values) != n:
        raise ShapeError(f"{what} has {len(values)} values, expected {n} (one per spatial axis)")
    if any(v < 1 for v in values):
        raise ShapeError(f"{what} must be positive, got {list(values)}")
    return tuple(int(v) for v in values)


def _common(attrs: WindowAttrs, n: int, kernel: Sequence[int] | None):
    if attrs.auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad '{attrs.auto_pad}' is not one of {', '.join(AUTO_PADS)}")
    if attrs.kernel_shape:
        if kernel is not None and tuple(attrs.kernel_shape) != tuple(kernel):
            raise ShapeError(f"kernel_shape {list(attrs.kernel_shape)} does not match the weights' {list(kernel)}")
        kernel = attrs.kernel_shape
    if not kernel:
        raise ShapeError("kernel_shape is required")
    kernel = _per_axis(kernel, n, 1, "kernel_shape")
    strides = _per_axis(attrs.strides, n, 1, "strides")
    dilations = _per_axis(attrs.dilations, n, 1, "dilations")
    pads = tuple(int(p) for p in attrs.pads) or (0,) * (2 * n)
    if len(pads) != 2 * n:
        raise ShapeError(f"pads has {len(pads)} values, expected {2 * n} (begin and end per spatial axis)")
    if any(p < 0 for p in pads):
        raise ShapeError(f"pads must not be negative, got {list(pads)}")
    return kernel, strides, dilations, pads[:n], pads[n:]


def _split(total: int, upper: bool) -> tuple[int, int]:
    """Split padding between begin and end; SAME_UPPER puts the odd one at the end. A negative
    total (a ConvTranspose output_shape beyond the full result) extends the end, like output_padding."""
    if total < 0:
        return 0, total
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def window(attrs: WindowAttrs, in_sizes: Sequence[int], kernel: Sequence[int] | None = None,
           ceil_mode: bool = False) -> Window:
    """Geometry of a forward sliding window (Conv, MaxPool, AveragePool).

    ``kernel`` is the weights' spatial shape (Conv) when kernel_shape is absent. With explicit pads the
    output size is floor (or ceil) of (in + pads - extent) / stride + 1, and with ceil_mode a window
    that would start in the end padding is dropped. SAME_* gives ceil(in / stride) outputs, padding
    split evenly (the odd one at the end for SAME_UPPER, at the begin for SAME_LOWER); VALID pads nothing.
    """
    n = len(in_sizes)
    kernel, strides, dilations, begin, end = _common(attrs, n, kernel)
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    out = []
    if attrs.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, s, e in zip(in_sizes, strides, extent):
            o = -(-size // s)
            b, f = _split(max(0, (o - 1) * s + e - size), attrs.auto_pad == "SAME_UPPER")
            out.append(o)
            begin.append(b)
            end.append(f)
    else:
        if attrs.auto_pad == "VALID":
            begin = end = (0,) * n
        for size, s, e, b, f in zip(in_sizes, strides, extent, begin, end):
            span = size + b + f - e
            o = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and span >= 0 and (o - 1) * s >= size + b:
                o -= 1
            out.append(o)
    if any(o < 1 for o in out):
        raise ShapeError(f"the window (kernel {list(kernel)}, dilations {list(dilations)}) does not fit the "
                         f"input's spatial shape {list(in_sizes)} with pads {list(begin) + list(end)}")
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))


def transposed_window(attrs: WindowAttrs, in_sizes: Sequence[int], kernel: Sequence[int],
                      output_padding: Sequence[int] = (), output_shape: Sequence[int] = ()) -> Window:
    """Geometry of ConvTranspose: the full result has stride*(in-1) + output_padding + extent
    positions per axis and the output crops ``pads_begin`` from its start and ``pads_end`` from its end.

    An explicit output_shape (or SAME_*, whose output is in*stride, at most the full size as in
    onnxruntime) fixes the output size and the total padding is split as the ONNX spec says:
    SAME_UPPER puts the smaller half at the begin, otherwise the larger half goes there.
    """
    n = len(in_sizes)
    kernel, strides, dilations, begin, end = _common(attrs, n, kernel)
    extra = tuple(int(p) for p in output_padding) or (0,) * n
    if len(extra) != n:
        raise ShapeError(f"output_padding has {len(extra)} values, expected {n}")
    full = [s * (size - 1) + p + (k - 1) * d + 1
            for size, s, p, k, d in zip(in_sizes, strides, extra, kernel, dilations)]
    shape = tuple(int(v) for v in output_shape)[-n:] if output_shape else ()
    if shape and len(shape) != n:
        raise ShapeError(f"output_shape {list(output_shape)} needs one value per spatial axis ({n})")
    if not shape and attrs.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = tuple(min(size * s, f) for size, s, f in zip(in_sizes, strides, full))
    if shape:
        pairs = [_split(f - o, attrs.auto_pad == "SAME_UPPER") for f, o in zip(full, shape)]
        begin, end = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    elif attrs.auto_pad == "VALID":
        begin = end = (0,) * n
    out = tuple(f - b - e for f, b, e in zip(full, begin, end))
    if any(o < 1 for o in out):
        raise ShapeError(f"ConvTranspose output size {list(out)} is not positive")
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), out)


def spatial_sizes(shape: Sequence[int], what: str = "input") -> tuple[int, ...]:
    """The spatial sizes of an (N, C, D1, ..., Dn) shape, n >= 1."""
    if len(shape) < 3:
        raise ShapeError(f"{what} must be (N, C, D1, ...) with at least one spatial axis, got {list(shape)}")
    return tuple(shape[2:])


def window_view(x: np.ndarray, win: Window, fill: float | int) -> np.ndarray:
    """A read-only view (N, C, *out, *kernel) of the taps of every output position; taps outside x
    (padding, or the end overrun of ceil_mode) read ``fill``."""
    n = len(win.kernel)
    widths = [(0, 0), (0, 0)]
    for size, s, o, e, b in zip(x.shape[2:], win.strides, win.out, win.extent, win.pads_begin):
        widths.append((b, max(0, (o - 1) * s + e - b - size)))
    if any(w != (0, 0) for w in widths):
        x = np.pad(x, widths, constant_values=fill)
    axes = tuple(range(2, 2 + n))
    view = np.lib.stride_tricks.sliding_window_view(x, win.extent, axis=axes)
    index = (slice(None), slice(None))
    index += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(win.out, win.strides))
    index += tuple(slice(None, None, d) for d in win.dilations)
    return view[index]


def tap_counts(win: Window, in_sizes: Sequence[int], include_pads: bool) -> np.ndarray:
    """Number of taps of each output window inside the input (or inside the explicit pads when
    ``include_pads``), shaped ``win.out``: the divisor of AveragePool."""
    total = np.ones((), dtype=np.int64)
    for size, k, s, d, b, e, o in zip(in_sizes, win.kernel, win.strides, win.dilations,
                                      win.pads_begin, win.pads_end, win.out):
        lo, hi = (-b, size + e) if include_pads else (0, size)
        pos = np.arange(o)[:, None] * s - b + np.arange(k)[None, :] * d
        count = ((pos >= lo) & (pos < hi)).sum(axis=1)
        total = np.multiply.outer(total, count)
    return total


def flat_positions(win: Window, in_sizes: Sequence[int], tap: np.ndarray, column_major: bool) -> np.ndarray:
    """Flat spatial index of a chosen tap per output position (``tap``: flat kernel index, any leading
    shape ending in ``win.out``); row-major over the input's spatial axes, or column-major."""
    coords = np.unravel_index(tap, win.kernel)
    flat = np.zeros(tap.shape, dtype=np.int64)
    n = len(in_sizes)
    weights = np.cumprod((1,) + tuple(in_sizes[:-1])) if column_major else \
        np.cumprod((1,) + tuple(in_sizes[::-1])[:-1])[::-1]
    for i in range(n):
        shape = [1] * tap.ndim
        shape[tap.ndim - n + i] = win.out[i]
        start = (np.arange(win.out[i]) * win.strides[i] - win.pads_begin[i]).reshape(shape)
        flat += (start + coords[i] * win.dilations[i]) * int(weights[i])
    return flat


def prod(values: Sequence[int]) -> int:
    return math.prod(int(v) for v in values)
