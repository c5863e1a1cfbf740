"""Samples for a model's inputs, as inference and calibration read them.

Samples come either from files named on the command line (``--input a.npy#b.npy``) or from the
dataset file(s) of an input meta, and are preprocessed as the meta says. ``batch_size`` ×
``iterations`` samples are produced, cycling through the dataset when it is shorter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import cycle, islice
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.ir.graph import Graph
from pegasus.runtime.inputmeta import InputMeta, PortMeta
from pegasus.runtime.inputs import read_dataset, read_sample


def ports_for(graph: Graph, meta: InputMeta | None) -> list[PortMeta | None]:
    """The meta's port of each graph input (None where the meta says nothing)."""
    if meta is None:
        return [None] * len(graph.inputs)
    by_name = {port.name: port for port in meta.ports}
    unknown = sorted(set(by_name) - set(graph.inputs))
    if unknown:
        raise PegasusError(f"input meta names {unknown}, which are not model inputs ({graph.inputs})",
                           where=str(meta.path))
    return [by_name.get(name) for name in graph.inputs]


def sample_files(graph: Graph, meta: InputMeta | None, inputs: Sequence[str] | None) -> list[list[Path]]:
    """One list of files (one per graph input) per sample."""
    count = len(graph.inputs)
    if inputs:
        samples = [[Path(p) for p in item.split("#")] for item in inputs]
        for files in samples:
            if len(files) != count:
                raise PegasusError(f"--input '{'#'.join(map(str, files))}' gives {len(files)} file(s) for "
                                   f"{count} model input(s) {graph.inputs}; join them with '#'")
        return samples
    if meta is None or not meta.databases:
        raise PegasusError("no input given: pass sample files with --input FILE (.npy/.pb/.tensor/image) or an "
                           "input meta with a dataset via --with-input-meta NAME_inputmeta.yml")
    order = _port_order(graph, meta)
    if meta.separated:
        columns = [read_dataset(db, 1) for db in meta.databases]
        lengths = {db.name: len(column) for db, column in zip(meta.databases, columns)}
        if len(set(lengths.values())) > 1:
            raise PegasusError(f"separated datasets differ in length ({lengths}): line i of each is sample i",
                               where=str(meta.path))
        rows = [[column[i][0] for column in columns] for i in range(len(columns[0]))]
    else:
        rows = read_dataset(meta.databases[0], count)
    return [[row[column] for column in order] for row in rows]


def _port_order(graph: Graph, meta: InputMeta) -> list[int]:
    """For each graph input, the position of its port in the meta (datasets list files in port order)."""
    names = [port.name for port in meta.ports]
    if sorted(names) != sorted(graph.inputs):
        raise PegasusError(f"input meta describes ports {names} but the model's inputs are {graph.inputs}",
                           where=str(meta.path))
    return [names.index(name) for name in graph.inputs]


def sample_count(files: list[list[Path]], batch_size: int | None, iterations: int | None) -> int:
    batch = batch_size or 1
    if batch < 1 or (iterations is not None and iterations < 1):
        raise PegasusError("--batch-size and --iterations must be positive")
    return batch * iterations if iterations else len(files)


def iterate_samples(graph: Graph, meta: InputMeta | None, inputs: Sequence[str] | None = None, *,
                    batch_size: int | None = None, iterations: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Feeds (input name → array) for ``batch_size × iterations`` samples (default: every sample once)."""
    ports = ports_for(graph, meta)
    files = sample_files(graph, meta, inputs)
    for sample in islice(cycle(files), sample_count(files, batch_size, iterations)):
        yield {name: read_sample(path, graph.type_of(name), port, name)
               for name, path, port in zip(graph.inputs, sample, ports)}
