"""The Caffe converters' registry and context: the shared mechanism (importers/common/converters.py) plus
what only Caffe has — weights that live outside the graph, in each layer's blobs.

Converters register with ``@converter("Convolution")`` (the layer type as the prototxt writes it) and read
their parameter message with ``param(node, "convolution_param")``. ``ctx.blobs(node, [BlobSpec...])`` gives
the layer's weights, checked against the shapes the prototxt implies (Caffe's legacy 4-D blob shapes are
accepted as Caffe accepts them). Without a caffemodel, every blob is drawn from a generator seeded once per
import (Acuity does the same), so a prototxt alone still gives a model to try the tools on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.caffe.reader import Blob
from pegasus.importers.common.converters import ConverterTable, ImportContext, SourceNode
from pegasus.ir.builder import GraphBuilder
from pegasus.limits import check_tensor

TABLE = ConverterTable("Caffe")
RANDOM_SEED = 0
#: values drawn at a time for a random blob
_DRAW_SLICE = 2**20


converter = TABLE.converter


def param(node: SourceNode, field_name: str) -> Any:
    """The layer's ``field_name`` parameter message (its defaults when the prototxt leaves it out)."""
    return node.attrs["layer"].param(field_name)


@dataclass(frozen=True)
class BlobSpec:
    """One blob a layer needs: what it is (for messages), the shape the prototxt implies, and how to draw
    it without a caffemodel (``kind``: weight, bias, mean, var, factor, scale, slope)."""

    what: str
    shape: tuple[int, ...]
    kind: str = "weight"


def _legacy_shape(shape: Sequence[int]) -> tuple[int, ...] | None:
    """``shape`` in Caffe's legacy num/channels/height/width form (padded with leading 1s); None above 4-D."""
    return None if len(shape) > 4 else (1,) * (4 - len(shape)) + tuple(shape)


class CaffeContext(ImportContext):
    """The shared context plus the caffemodel's blobs by layer name (None: seeded random weights)."""

    def __init__(self, builder: GraphBuilder, blobs: dict[str, list[Blob]] | None, weights_file: str = ""):
        """``weights_file`` names the caffemodel (or, without one, the prototxt) in errors about blobs."""
        super().__init__(builder)
        self._blobs = blobs
        self._file = weights_file
        self._rng = np.random.default_rng(RANDOM_SEED) if blobs is None else None
        #: layers that received random weights (no caffemodel given)
        self.randomised: list[str] = []

    def blobs(self, node: SourceNode, specs: Sequence[BlobSpec]) -> list[np.ndarray]:
        """The layer's blobs as float32 arrays of the expected shapes, in order."""
        if not specs:
            return []
        layer = f"layer '{node.name}' ({node.op_type}, line {node.attrs['layer'].line})"
        for spec in specs:   # what the prototxt implies (the loader names it), before drawing or comparing anything
            check_tensor(spec.shape, 4, f"{layer}: blob {spec.what}")
        if self._blobs is None:
            self.randomised.append(node.name)
            return [self._draw(spec) for spec in specs]
        found = self._blobs.get(node.name)
        expected = ", ".join(spec.what for spec in specs)
        if not found:
            raise PegasusError(f"{layer} has no blobs; it needs {len(specs)} ({expected})", where=self._file)
        if len(found) != len(specs):
            raise PegasusError(f"{layer} has {len(found)} blobs, the prototxt implies {len(specs)} ({expected})",
                               where=self._file)
        arrays = []
        for index, (blob, spec) in enumerate(zip(found, specs)):
            fits = blob.shape == spec.shape or (blob.legacy and blob.shape == _legacy_shape(spec.shape))
            if not fits:
                raise PegasusError(f"{layer}: blob {index} ({spec.what}) has shape {list(blob.shape)}, the prototxt "
                                   f"implies {list(spec.shape)}", where=self._file)
            arrays.append(blob.data.reshape(spec.shape))
        return arrays

    def _draw(self, spec: BlobSpec) -> np.ndarray:
        """Random values for ``spec`` (its size already within the budget), drawn in float64 a slice at a time
        into the float32 result: the same values as one draw, without a float64 copy of the whole blob."""
        shape = spec.shape
        if spec.kind == "factor":
            return np.ones(shape, np.float32)
        law, a, b = _law(spec)
        draw = getattr(self._rng, law)   # Generator.normal(loc, scale, n) / .uniform(low, high, n)
        values = np.empty(math.prod(shape), np.float32)
        for start in range(0, values.size, _DRAW_SLICE):
            values[start:start + _DRAW_SLICE] = draw(a, b, min(_DRAW_SLICE, values.size - start))
        return values.reshape(shape)


def _law(spec: BlobSpec) -> tuple[str, float, float]:
    """The distribution a random blob of ``spec.kind`` is drawn from."""
    if spec.kind == "weight":
        fan_in = math.prod(spec.shape[1:]) if len(spec.shape) > 1 else 1
        return "normal", 0.0, 1.0 / np.sqrt(max(fan_in, 1))
    laws = {"bias": ("normal", 0.0, 0.1), "mean": ("normal", 0.0, 0.1), "var": ("uniform", 0.5, 1.5),
            "scale": ("uniform", 0.5, 1.5), "slope": ("uniform", 0.05, 0.3)}
    if spec.kind not in laws:
        raise ValueError(f"unknown blob kind {spec.kind}")
    return laws[spec.kind]
