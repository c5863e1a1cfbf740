"""Data-movement ops: they rearrange, copy or select elements without arithmetic.

Parameters that ONNX passes as tensors (a Reshape's shape, a Slice's bounds, Pad's pads...) are
attributes here, because a static microcontroller bundle needs them at compile time. The helpers
``resolve_reshape``, ``resolve_slice`` and ``resolve_squeeze_axes`` state each ONNX rule once; the ops
use them in ``infer``/``reference`` and converters use them to store the canonical (explicit) form.
Reshape, Flatten, Squeeze and Unsqueeze only relabel the shape, so they are marked ``alias``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops.common import broadcast_shape, normalize_axes, normalize_axis
from pegasus.ops.registry import OpDef, ShapeError, register

Shape = tuple[int, ...]


# ---- shared shape rules --------------------------------------------------------------------------
def resolve_reshape(in_shape: Sequence[int], shape: Sequence[int], allowzero: bool = False) -> Shape:
    """ONNX Reshape target with 0 (copy the input dim, unless ``allowzero``) and -1 (inferred) resolved."""
    copies = [i for i, d in enumerate(shape) if d == 0 and not allowzero]
    if copies and copies[-1] >= len(in_shape):
        raise ShapeError(f"reshape target {list(shape)} copies dimension {copies[-1]} of a rank-{len(in_shape)} input")
    out = [int(in_shape[i]) if i in copies else int(d) for i, d in enumerate(shape)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise ShapeError(f"invalid reshape target {list(shape)}")
    total = math.prod(in_shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ShapeError(f"cannot infer -1 in {list(shape)} for input shape {list(in_shape)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ShapeError(f"cannot reshape {list(in_shape)} ({total} elements) to {out}")
    return tuple(out)


def resolve_squeeze_axes(in_shape: Sequence[int], axes: Sequence[int]) -> Shape:
    """Sorted non-negative Squeeze axes; empty ``axes`` means every dimension of size 1."""
    if not axes:
        return tuple(i for i, d in enumerate(in_shape) if d == 1)
    resolved = tuple(sorted(set(normalize_axes(axes, len(in_shape)))))
    bad = [a for a in resolved if in_shape[a] != 1]
    if bad:
        raise ShapeError(f"cannot squeeze axes {bad} of shape {list(in_shape)}: size is not 1")
    return resolved


def resolve_unsqueeze_axes(in_rank: int, axes: Sequence[int]) -> Shape:
    """Sorted non-negative Unsqueeze axes, counted in the output's rank."""
    resolved = tuple(sorted(normalize_axes(axes, in_rank + len(axes))))
    if len(set(resolved)) != len(resolved):
        raise ShapeError(f"duplicate Unsqueeze axes {list(axes)}")
    return resolved


def resolve_slice(in_shape: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                  axes: Sequence[int] = (), steps: Sequence[int] = ()) -> tuple[Shape, Shape, Shape]:
    """Full-rank (starts, ends, steps) clamped by the ONNX Slice rules, in a form the rules leave as is.

    The only negative value left is an end of -(dim + 1), meaning "through index 0" for a negative step.
    """
    rank = len(in_shape)
    axes = tuple(axes) or tuple(range(len(starts)))
    steps = tuple(steps) or (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError("Slice starts, ends, axes and steps must have the same length")
    out_starts, out_ends, out_steps = [0] * rank, list(in_shape), [1] * rank
    for start, end, axis, step in zip(starts, ends, normalize_axes(axes, rank), steps):
        dim = in_shape[axis]
        if step == 0:
            raise ShapeError("Slice step cannot be 0")
        start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
        lo, hi = (0, dim) if step > 0 else (-1, dim - 1)
        out_starts[axis] = int(max(min(start, hi), 0))
        end = min(max(end, lo), hi)
        out_ends[axis] = int(end if end >= 0 else -dim - 1)
        out_steps[axis] = int(step)
    return tuple(out_starts), tuple(out_ends), tuple(out_steps)


def _same_dtype(inputs: Sequence[TensorType | None], shape: Sequence[int]) -> list[TensorType]:
    return [TensorType(tuple(int(d) for d in shape), inputs[0].dtype)]


# ---- pure reshapes (alias: the output is the input's bytes) --------------------------------------
class _Reshaping(OpDef):
    """Base of ops that only change the shape; subclasses define ``out_shape(attrs, shape)``."""

    alias = True

    @staticmethod
    def out_shape(attrs: Any, shape: Shape) -> Shape:
        raise NotImplementedError

    @classmethod
    def infer(cls, attrs, inputs):
        return _same_dtype(inputs, cls.out_shape(attrs, inputs[0].shape))

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        return [x.reshape(cls.out_shape(attrs, x.shape)).copy()]


@register
class Reshape(_Reshaping):
    """y = x viewed with the explicit shape ``shape`` (ONNX Reshape with 0/-1 already resolved)."""

    name = "Reshape"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        shape: Shape = ()

    @staticmethod
    def out_shape(attrs, shape):
        if any(d < 0 for d in attrs.shape):
            raise ShapeError(f"Reshape shape {list(attrs.shape)} must be explicit (no -1)")
        return resolve_reshape(shape, attrs.shape, allowzero=True)


@register
class Flatten(_Reshaping):
    """y = x as 2-D: (prod(shape[:axis]), prod(shape[axis:])) (ONNX Flatten)."""

    name = "Flatten"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axis: int = 1

    @staticmethod
    def out_shape(attrs, shape):
        if not -len(shape) <= attrs.axis <= len(shape):
            raise ShapeError(f"Flatten axis {attrs.axis} is out of range for rank {len(shape)}")
        axis = attrs.axis + len(shape) if attrs.axis < 0 else attrs.axis
        return math.prod(shape[:axis]), math.prod(shape[axis:])


@register
class Squeeze(_Reshaping):
    """y = x without the size-1 dimensions ``axes`` (all size-1 dimensions when empty) (ONNX Squeeze)."""

    name = "Squeeze"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axes: Shape = ()

    @staticmethod
    def out_shape(attrs, shape):
        axes = resolve_squeeze_axes(shape, attrs.axes)
        return tuple(d for i, d in enumerate(shape) if i not in axes)


@register
class Unsqueeze(_Reshaping):
    """y = x with size-1 dimensions inserted at ``axes`` of the output (ONNX Unsqueeze)."""

    name = "Unsqueeze"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axes: Shape = ()

    @staticmethod
    def out_shape(attrs, shape):
        axes = resolve_unsqueeze_axes(len(shape), attrs.axes)
        rest = iter(shape)
        return tuple(1 if i in axes else next(rest) for i in range(len(shape) + len(axes)))


# ---- copies that rearrange elements --------------------------------------------------------------
@register
class Transpose(OpDef):
    """y = x with dimensions permuted: y.shape[i] = x.shape[perm[i]]; empty perm reverses (ONNX Transpose)."""

    name = "Transpose"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        perm: Shape = ()

    @staticmethod
    def _perm(attrs, rank: int) -> Shape:
        perm = attrs.perm or tuple(reversed(range(rank)))
        if sorted(perm) != list(range(rank)):
            raise ShapeError(f"perm {list(perm)} is not a permutation of {rank} axes")
        return perm

    @classmethod
    def infer(cls, attrs, inputs):
        shape = inputs[0].shape
        return _same_dtype(inputs, [shape[p] for p in cls._perm(attrs, len(shape))])

    @classmethod
    def reference(cls, attrs, inputs):
        return [np.transpose(inputs[0], cls._perm(attrs, inputs[0].ndim)).copy()]


@register
class Expand(OpDef):
    """y = x broadcast against ``shape`` (ONNX Expand: bidirectional broadcasting)."""

    name = "Expand"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        shape: Shape = ()

    @staticmethod
    def infer(attrs, inputs):
        return _same_dtype(inputs, broadcast_shape(inputs[0].shape, attrs.shape))

    @staticmethod
    def reference(attrs, inputs):
        x = inputs[0]
        return [np.broadcast_to(x, broadcast_shape(x.shape, attrs.shape)).copy()]


@register
class Tile(OpDef):
    """y = x repeated ``repeats[i]`` times along axis i (ONNX Tile); empty repeats copies x."""

    name = "Tile"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        repeats: Shape = ()

    @staticmethod
    def _repeats(attrs, shape: Shape) -> Shape:
        repeats = attrs.repeats or (1,) * len(shape)
        if len(repeats) != len(shape) or any(r < 0 for r in repeats):
            raise ShapeError(f"repeats {list(repeats)} must be {len(shape)} non-negative values")
        return repeats

    @classmethod
    def infer(cls, attrs, inputs):
        shape = inputs[0].shape
        return _same_dtype(inputs, [d * r for d, r in zip(shape, cls._repeats(attrs, shape))])

    @classmethod
    def reference(cls, attrs, inputs):
        return [np.tile(inputs[0], cls._repeats(attrs, inputs[0].shape))]


@register
class Concat(OpDef):
    """y = the inputs joined along ``axis`` (ONNX Concat)."""

    name = "Concat"
    num_inputs = (1, None)

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axis: int = 0

    @staticmethod
    def infer(attrs, inputs):
        first = inputs[0].shape
        axis = normalize_axis(attrs.axis, len(first))
        for t in inputs[1:]:
            if len(t.shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(t.shape, first))
                                                  if i != axis):
                raise ShapeError(f"cannot concatenate {list(t.shape)} with {list(first)} on axis {axis}")
        total = sum(t.shape[axis] for t in inputs)
        return _same_dtype(inputs, first[:axis] + (total,) + first[axis + 1:])

    @staticmethod
    def reference(attrs, inputs):
        return [np.concatenate(inputs, axis=attrs.axis)]


@register
class Split(OpDef):
    """y_i = consecutive chunks of x along ``axis`` with explicit sizes ``split`` (ONNX Split)."""

    name = "Split"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        split: Shape = ()
        axis: int = 0

    @staticmethod
    def infer(attrs, inputs):
        shape = inputs[0].shape
        axis = normalize_axis(attrs.axis, len(shape))
        if sum(attrs.split) != shape[axis] or any(s < 0 for s in attrs.split):
            raise ShapeError(f"split sizes {list(attrs.split)} do not add up to dimension {shape[axis]}")
        return [TensorType(shape[:axis] + (s,) + shape[axis + 1:], inputs[0].dtype) for s in attrs.split]

    @staticmethod
    def reference(attrs, inputs):
        cuts = np.cumsum(attrs.split)[:-1]
        return [part.copy() for part in np.split(inputs[0], cuts, axis=attrs.axis)]


@register
class Slice(OpDef):
    """y = x[start:end:step] on each axis in ``axes`` (ONNX Slice, with its clamping rules)."""

    name = "Slice"
    value_preserving = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        starts: Shape = ()
        ends: Shape = ()
        axes: Shape = ()
        steps: Shape = ()

    @staticmethod
    def _slices(attrs, shape: Shape) -> tuple[slice, ...]:
        starts, ends, steps = resolve_slice(shape, attrs.starts, attrs.ends, attrs.axes, attrs.steps)
        return tuple(slice(b, None if e < 0 else e, s) for b, e, s in zip(starts, ends, steps))

    @classmethod
    def infer(cls, attrs, inputs):
        shape = inputs[0].shape
        return _same_dtype(inputs, [len(range(d)[s]) for d, s in zip(shape, cls._slices(attrs, shape))])

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        return [x[cls._slices(attrs, x.shape)].copy()]


@register
class Pad(OpDef):
    """y = x padded by ``pads`` ([begin_0.., end_0..], negative crops) in mode constant|reflect|edge|wrap."""

    name = "Pad"
    keeps_input_grid = True

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        pads: Shape = ()  # empty: no padding
        mode: str = "constant"
        constant_value: float = 0.0

    @staticmethod
    def _pads(attrs, shape: Shape) -> Shape:
        pads = attrs.pads or (0,) * (2 * len(shape))
        if len(pads) != 2 * len(shape):
            raise ShapeError(f"pads {list(pads)} must have 2 x rank = {2 * len(shape)} values")
        if attrs.mode not in ("constant", "reflect", "edge", "wrap"):
            raise ShapeError(f"unknown Pad mode '{attrs.mode}'")
        return pads

    @classmethod
    def infer(cls, attrs, inputs):
        shape = inputs[0].shape
        pads = cls._pads(attrs, shape)
        out = [d + b + e for d, b, e in zip(shape, pads, pads[len(shape):])]
        if any(d < 0 for d in out):
            raise ShapeError(f"pads {list(pads)} crop more than shape {list(shape)}")
        return _same_dtype(inputs, out)

    @classmethod
    def reference(cls, attrs, inputs):
        x = inputs[0]
        rank = x.ndim
        pads = cls._pads(attrs, x.shape)
        begins, ends = pads[:rank], pads[rank:]
        crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(x.shape, begins, ends))
        x = x[crop]
        widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
        if attrs.mode == "constant":
            return [np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs.constant_value, x.dtype))]
        return [np.pad(x, widths, mode=attrs.mode)]


class _BlockMove(OpDef):
    """Base of DepthToSpace/SpaceToDepth: one reshape, transpose, reshape; mode DCR or CRD."""

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        blocksize: int = 1
        mode: str = "DCR"

    @staticmethod
    def plan(attrs, shape: Shape) -> tuple[Shape, Shape, Shape]:
        """(split shape, permutation, output shape)."""
        raise NotImplementedError

    @classmethod
    def infer(cls, attrs, inputs):
        if len(inputs[0].shape) != 4 or attrs.mode not in ("DCR", "CRD") or attrs.blocksize < 1:
            raise ShapeError(f"{cls.name} needs a 4-D NCHW input, blocksize >= 1 and mode DCR or CRD")
        return _same_dtype(inputs, cls.plan(attrs, inputs[0].shape)[2])

    @classmethod
    def reference(cls, attrs, inputs):
        split, perm, out = cls.plan(attrs, inputs[0].shape)
        return [np.transpose(inputs[0].reshape(split), perm).reshape(out)]


@register
class DepthToSpace(_BlockMove):
    """Moves channel blocks into bs x bs spatial blocks (ONNX DepthToSpace)."""

    name = "DepthToSpace"
    value_preserving = True

    @staticmethod
    def plan(attrs, shape):
        n, c, h, w = shape
        bs = attrs.blocksize
        if c % (bs * bs):
            raise ShapeError(f"channels {c} are not divisible by blocksize^2 = {bs * bs}")
        out = (n, c // (bs * bs), h * bs, w * bs)
        if attrs.mode == "DCR":
            return (n, bs, bs, c // (bs * bs), h, w), (0, 3, 4, 1, 5, 2), out
        return (n, c // (bs * bs), bs, bs, h, w), (0, 1, 4, 2, 5, 3), out


@register
class SpaceToDepth(_BlockMove):
    """Moves bs x bs spatial blocks into channels (ONNX SpaceToDepth, the inverse of DepthToSpace)."""

    name = "SpaceToDepth"
    value_preserving = True

    @staticmethod
    def plan(attrs, shape):
        n, c, h, w = shape
        bs = attrs.blocksize
        if h % bs or w % bs:
            raise ShapeError(f"spatial size {h}x{w} is not divisible by blocksize {bs}")
        split, out = (n, c, h // bs, bs, w // bs, bs), (n, c * bs * bs, h // bs, w // bs)
        return split, (0, 3, 5, 1, 2, 4) if attrs.mode == "DCR" else (0, 1, 3, 5, 2, 4), out


@register
class Gather(OpDef):
    """y = take(data, indices, axis); negative indices count from the end (ONNX Gather)."""

    name = "Gather"
    value_preserving = True
    num_inputs = (2, 2)

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        axis: int = 0

    @staticmethod
    def infer(attrs, inputs):
        data, indices = inputs
        if indices.dtype not in (DType.INT32, DType.INT64):
            raise ShapeError(f"Gather indices must be int32 or int64, got {indices.dtype.value}")
        axis = normalize_axis(attrs.axis, len(data.shape))
        return _same_dtype(inputs, data.shape[:axis] + indices.shape + data.shape[axis + 1:])

    @staticmethod
    def reference(attrs, inputs):
        data, indices = inputs
        axis = normalize_axis(attrs.axis, data.ndim)
        if indices.size and not (-data.shape[axis] <= indices.min() and indices.max() < data.shape[axis]):
            raise IndexError(f"Gather indices out of range for dimension {data.shape[axis]}")
        return [np.take(data, indices.astype(np.int64), axis=axis)]


# ---- ops whose result is known at compile time ---------------------------------------------------
@register
class ShapeOf(OpDef):
    """y = int64 shape of x, dims [start:end] (ONNX Shape); reads no values, so it always folds."""

    name = "Shape"
    needs_values = False

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        start: int = 0
        end: int | None = None

    @staticmethod
    def dims(attrs, shape: Shape) -> Shape:
        rank = len(shape)
        end = rank if attrs.end is None else attrs.end
        start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (attrs.start, end))
        return tuple(shape[start:end])

    @classmethod
    def infer(cls, attrs, inputs):
        return [TensorType((len(cls.dims(attrs, inputs[0].shape)),), DType.INT64)]

    @classmethod
    def reference(cls, attrs, inputs):
        return [np.array(cls.dims(attrs, inputs[0].shape), dtype=np.int64)]


@register
class Size(OpDef):
    """y = int64 number of elements of x (ONNX Size); reads no values, so it always folds."""

    name = "Size"
    needs_values = False

    @staticmethod
    def infer(attrs, inputs):
        return [TensorType((), DType.INT64)]

    @staticmethod
    def reference(attrs, inputs):
        return [np.array(inputs[0].size, dtype=np.int64)]


class _Generator(OpDef):
    """Base of ops without inputs whose output is fixed by attributes; ``make(attrs)`` builds it and
    ``out_type(attrs)`` says its type without building it (so a huge one is refused before it exists)."""

    num_inputs = (0, 0)

    @staticmethod
    def make(attrs: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def out_type(attrs: Any) -> TensorType:
        raise NotImplementedError

    @classmethod
    def infer(cls, attrs, inputs):
        return [cls.out_type(attrs)]

    @classmethod
    def reference(cls, attrs, inputs):
        return [cls.make(attrs)]


@register
class ConstantOfShape(_Generator):
    """y = a tensor of shape ``shape`` filled with ``value`` of type ``dtype`` (ONNX ConstantOfShape)."""

    name = "ConstantOfShape"

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        shape: Shape = ()
        value: float = 0.0
        dtype: str = "float32"

    @staticmethod
    def out_type(attrs):
        if any(d < 0 for d in attrs.shape):
            raise ShapeError(f"ConstantOfShape shape {list(attrs.shape)} has a negative dimension")
        return TensorType(tuple(int(d) for d in attrs.shape), DType(attrs.dtype))

    @staticmethod
    def make(attrs):
        return np.full(attrs.shape, attrs.value, dtype=DType(attrs.dtype).numpy)


@register
class Range(_Generator):
    """y[i] = start + i * delta for i < max(ceil((limit - start) / delta), 0) (ONNX Range)."""

    name = "Range"

    @dataclasses.dataclass(frozen=True)
    class Attrs:
        start: float = 0
        limit: float = 0
        delta: float = 1
        dtype: str = "float32"

    @staticmethod
    def count(attrs) -> int:
        if attrs.delta == 0:
            raise ShapeError("Range delta cannot be 0")
        dtype = DType(attrs.dtype).numpy
        start, limit, delta = (np.asarray(v, dtype) for v in (attrs.start, attrs.limit, attrs.delta))
        if dtype.kind == "f":
            with np.errstate(all="ignore"):
                steps = np.ceil((limit - start) / delta)
            if not np.isfinite(steps):
                raise ShapeError(f"Range from {attrs.start} to {attrs.limit} by {attrs.delta} has no finite length")
            count = int(steps)
        else:  # exact integer ceil division
            count = -((int(start) - int(limit)) // int(delta))
        return max(count, 0)

    @classmethod
    def out_type(cls, attrs):
        return TensorType((cls.count(attrs),), DType(attrs.dtype))

    @classmethod
    def make(cls, attrs):
        dtype = DType(attrs.dtype).numpy
        start, delta = (np.asarray(v, dtype) for v in (attrs.start, attrs.delta))
        return (start + np.arange(cls.count(attrs), dtype=dtype) * delta).astype(dtype)
