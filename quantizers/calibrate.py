"""Calibration: run the float reference over the calibration samples and observe every tensor.

Samples are grouped into batches of ``batch_size``; each observer sees one batch at a time (that is
what moving_average averages over). A progress bar (tqdm) shows the samples done. With
``keep_values`` a bounded random subset of each tensor's values is kept for the searches that need
real data (--MLE). NaN and infinite values (an attention mask of -inf) are left out of the ranges and
reported: quantized, they saturate to the ends of the tensor's grid.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

import numpy as np
from tqdm import tqdm

from pegasus.ir.graph import Graph
from pegasus.quantizers.observers import Observer, make_observer
from pegasus.runtime import interpreter

#: values kept per tensor for --MLE
KEPT_VALUES = 65536


@dataclass
class Calibration:
    """Observed (min, max) per tensor, and (optionally) sample values per tensor."""

    ranges: dict[str, tuple[float, float]]
    values: dict[str, np.ndarray] = field(default_factory=dict)
    samples: int = 0
    #: tensors that held NaN or ±inf (ignored by the observers; such values saturate to the grid's ends)
    nonfinite: list[str] = field(default_factory=list)


def _batches(feeds: Iterable[dict[str, np.ndarray]], size: int) -> Iterator[list[dict[str, np.ndarray]]]:
    iterator = iter(feeds)
    while batch := list(islice(iterator, size)):
        yield batch


def observed_tensors(graph: Graph) -> list[str]:
    """Every tensor computed at run time: graph inputs and layer outputs."""
    names = list(graph.inputs)
    for node in graph.nodes:
        names.extend(o for o in node.outputs if o and graph.type_of(o).dtype.is_float)
    return list(dict.fromkeys(names))


def calibrate(graph: Graph, feeds: Iterable[dict[str, np.ndarray]], *, total: int, batch_size: int = 1,
              algorithm: str = "normal", signed: bool = False, moving_average_weight: float = 0.01,
              first_quantize_bits: int = 11, keep_values: bool = False, seed: int = 0,
              progress: bool = True, only: Iterable[str] | None = None) -> Calibration:
    """Observe every float tensor computed at run time (or those in ``only``) over ``total`` samples."""
    names = [n for n in observed_tensors(graph) if graph.type_of(n).dtype.is_float]
    if only is not None:
        wanted = set(only)
        names = [n for n in names if n in wanted]
    observers: dict[str, Observer] = {
        name: make_observer(algorithm, signed=signed, moving_average_weight=moving_average_weight,
                            first_quantize_bits=first_quantize_bits) for name in names}
    rng = np.random.default_rng(seed)
    kept: dict[str, list[np.ndarray]] = {name: [] for name in names} if keep_values else {}
    done = 0
    nonfinite: set[str] = set()
    with tqdm(total=total, desc="calibrating", unit="sample", disable=not progress, leave=False) as bar:
        for batch in _batches(feeds, batch_size):
            seen: dict[str, list[np.ndarray]] = {name: [] for name in names}
            for sample in batch:
                env = interpreter.run(graph, sample, keep_all=True)
                for name in names:
                    seen[name].append(np.asarray(env[name], dtype=np.float32).ravel())
                bar.update(1)
            done += len(batch)
            for name in names:
                values = np.concatenate(seen[name])
                finite = np.isfinite(values)
                if not finite.all():  # e.g. an attention mask of -inf: quantized to the grid's end
                    nonfinite.add(name)
                    values = values[finite]
                observers[name].update(values)
                if keep_values:
                    share = max(1, KEPT_VALUES * len(batch) // max(total, 1))
                    kept[name].append(values if values.size <= share else rng.choice(values, share, replace=False))
    ranges = {name: tuple(float(v) for v in observer.range()) for name, observer in observers.items()}
    values = {name: np.concatenate(parts) for name, parts in kept.items() if parts}
    return Calibration(ranges, values, done, sorted(nonfinite))
