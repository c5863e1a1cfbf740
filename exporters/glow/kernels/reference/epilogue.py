"""The element-wise work a float convolution does to each accumulator vector before storing it: the unary layers
fused after it (Relu, Clip, Sigmoid...) and a residual sum's other operand (exporters/glow/fuse.py), read at the
store's own index and lanes, with a software prefetch of that operand where it does not fit this CPU's L2.

Every float convolution kernel applies it at its store sites (conv.py's row tiles, conv_plane.py's plane tiles,
conv_lanes.py's channel-lane tiles, conv_channels_last.py, and conv_pool.py's fused tiles before they pool), so one
definition serves them all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pegasus.exporters.glow.kernels.reference.elementwise import apply_unary
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.simd import prefetch_span
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.exporters.glow.llvm.types import Value
from pegasus.ops.facts import has_fact

#: bytes of a residual operand above which the kernels prefetch it (``Epilogue.prefetch``): larger than this
#: CPU's 1 MB L2, it comes from L3 or memory. ResNet-50 in the model: 256@56 (3.2 MB) 1,300 -> 1,200 kcycles
#: per layer with it, 512@28 (1.6 MB) the same, 1024@14 (0.8 MB, in L2) 1,270 -> 1,330
PREFETCH_BYTES = 1 << 20


def residual_prefetched(target, residual: TensorRef | None) -> bool:
    """Whether the kernels prefetch a residual operand (``PREFETCH_BYTES``; hosted CPUs only)."""
    return residual is not None and not target.is_cortex_m and residual.type.nbytes > PREFETCH_BYTES


@dataclass(frozen=True)
class Epilogue:
    """Element-wise layers fused after a convolution, as (op, attrs): applied, in order, to each
    accumulator vector before it is stored or pooled (the formulas of kernels/reference/elementwise.py). A residual
    sum (the ``residual_sum`` op fact, fuse.py) adds ``residual`` (Y's shape) at the vector's store: ``flat``,
    ``count`` and ``stride`` are the store's, so exactly the lanes stored are read."""

    layers: tuple[tuple[str, Any], ...] = ()
    math: Any = None
    residual: TensorRef | None = None
    prefetches: bool = False     # whether ``prefetch`` asks for the residual's lines (hosted CPUs)

    def __call__(self, num: Numeric, value: Value, flat: Value | None = None, count: int | None = None,
                 stride: int = 1) -> Value:
        for op, attrs in self.layers:
            if has_fact(op, "residual_sum"):
                value = num.add(value, self._operand(num, flat, value.type.count, count, stride))
            else:
                value = apply_unary(num.b, self.math, op, attrs, value, num.dtype)
        return value

    def prefetch(self, num: Numeric, flat: Value, lanes: int) -> None:
        """Ask for the residual's cache lines of the ``lanes`` elements from ``flat``: a tile's, before its
        accumulation, which then hides their latency (channels first, every output channel of a run of blocks
        is a stream of its own, more than the hardware prefetchers follow: ResNet-50's 1x1 64 -> 256 on 56x56
        with its sum took 0.98 ms without, 0.60 unfused)."""
        if self.residual is not None and self.prefetches:
            prefetch_span(num.b, self.residual, flat, 0, lanes - 1)

    def _operand(self, num: Numeric, flat: Value | None, lanes: int, count: int | None, stride: int) -> Value:
        assert self.residual is not None and flat is not None, "a residual sum is added where Y is stored"
        if count is None or count >= lanes:
            return num.load(self.residual, flat, lanes, stride)
        return num.load_lanes(self.residual, flat, lanes, stride, tuple(lane < count for lane in range(lanes)))


def layer_epilogue(k: Any) -> tuple[Any, Epilogue]:
    """(the context of the layer's head, its ``Epilogue``) for a float convolution layer ``k.layer``: a fused
    group's element-wise nodes (fuse.py), a residual sum's other operand taken off the inputs (it comes after the
    head's own: ``Layer.inputs``); none for a layer of one node."""
    layer = k.layer
    if layer is None or not layer.fused:
        return k, Epilogue()
    heads = len(layer.nodes[0].inputs)
    residual = k.inputs[heads] if layer.residual else None
    epilogue = Epilogue(tuple((node.op, node.attrs) for node in layer.epilogue), k.math, residual,
                        prefetches=residual_prefetched(k.target, residual))
    return replace(k, inputs=k.inputs[:heads]), epilogue
