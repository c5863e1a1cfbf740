"""Helpers the Caffe layer converters share: chains of element-wise steps, per-axis constants, axes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ImportContext, SourceNode


def emit_chain(ctx: ImportContext, node: SourceNode, x: str, steps: Sequence[tuple[str, np.ndarray | None, dict]],
               output: str | None = None) -> str:
    """Apply ``steps`` (op, constant second operand or None, attributes) to ``x`` in order; the last one
    writes ``output`` (default: the node's first output) and is layer ``node.name``, the others are layers
    ``<node.name>/<op>``. No steps: an Identity."""
    steps = list(steps) or [("Identity", None, {})]
    output = output or node.outputs[0]
    for index, (op, constant, attrs) in enumerate(steps):
        inputs = [x] if constant is None else [x, ctx.add_constant(f"{node.name}/{op.lower()}",
                                                                   np.asarray(constant, np.float32))]
        last = index == len(steps) - 1
        x = ctx.emit(op, inputs, attrs, node=node, outputs=[output] if last else None,
                     suffix="" if last else f"/{op.lower()}")[0]
    return x


def along(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """``values`` (covering axes axis.. of a rank-``rank`` tensor) shaped to broadcast against it."""
    return np.asarray(values).reshape(values.shape + (1,) * (rank - axis - values.ndim))


def canonical_axis(node: SourceNode, axis: int, rank: int, what: str = "axis") -> int:
    """Caffe's CanonicalAxisIndex: a negative axis counts from the end."""
    if not -rank <= axis < rank:
        raise PegasusError(f"{node.describe()}: {what} {axis} is out of range for a {rank}-D input")
    return axis % rank


def spatial_values(node: SourceNode, what: str, repeated: Sequence[int], height: int | None, width: int | None,
                   n: int, default: int | None) -> tuple[int, ...]:
    """A window parameter (kernel, pad, stride, dilation) per spatial axis: ``what_h``/``what_w`` when
    given (2-D only), else one value for every axis or one per axis, else ``default``."""
    if height is not None or width is not None:
        if n != 2 or height is None or width is None:
            raise PegasusError(f"{node.describe()}: {what}_h and {what}_w go together, on 2-D inputs only")
        return (int(height), int(width))
    values = [int(v) for v in repeated]
    if not values:
        if default is None:
            raise PegasusError(f"{node.describe()}: {what} is required")
        return (default,) * n
    if len(values) == 1:
        return (values[0],) * n
    if len(values) != n:
        raise PegasusError(f"{node.describe()}: {what} has {len(values)} values for {n} spatial axes")
    return tuple(values)


def optional(message, field_name: str) -> int | None:
    """A scalar field's value when the prototxt sets it, else None."""
    return getattr(message, field_name) if message.HasField(field_name) else None
