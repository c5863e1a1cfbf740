"""The TensorFlow importer tests' harness: each model is built by TensorFlow once, with TensorFlow's own outputs
on random inputs, and cached on disk; pegasus is checked against those outputs.

Cache: ``~/.cache/pegasus-tests/tensorflow/<builder>-<key>/`` holds the model (a .pb, a SavedModel folder, a
.meta with its checkpoint...), ``case.json`` (which file to import, the import options) and ``arrays.npz``
(the inputs fed to TensorFlow and what it answered). The key is the TFLite tests' (a hash of the builder's
source with the private helpers it calls, and of the TensorFlow version), so a changed builder or a new
TensorFlow rebuilds it and nothing else. A case is built in a temporary folder and renamed, so two pytest-xdist
workers building it at once both end with one whole folder. Builders import TensorFlow themselves.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.importers.tensorflow.loader import import_tensorflow
from pegasus.runtime.interpreter import run
from tests.importers.tflite.harness import assert_matches, cache_key

CACHE = Path.home() / ".cache" / "pegasus-tests" / "tensorflow"


@dataclass
class Case:
    """A built model: the path to import, the import options, the feeds and TensorFlow's outputs by name."""

    folder: Path
    model: Path
    options: dict
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]


def save_case(folder: Path, model: str, options: dict, feeds: dict[str, np.ndarray],
              expected: dict[str, np.ndarray]) -> None:
    """Called by builders: record what to import and TensorFlow's answers."""
    (folder / "case.json").write_text(json.dumps({"model": model, "options": options, "feeds": list(feeds),
                                                  "expected": list(expected)}))
    arrays = {f"feed/{k}": np.asarray(v) for k, v in feeds.items()}
    arrays.update({f"expected/{k}": np.asarray(v) for k, v in expected.items()})
    np.savez(folder / "arrays.npz", **arrays)


def _load(folder: Path) -> Case:
    meta = json.loads((folder / "case.json").read_text())
    with np.load(folder / "arrays.npz") as arrays:
        feeds = {k: arrays[f"feed/{k}"] for k in meta["feeds"]}
        expected = {k: arrays[f"expected/{k}"] for k in meta["expected"]}
    return Case(folder, folder / meta["model"], meta["options"], feeds, expected)


def cached_case(builder: Callable[[Path], None]) -> Case:
    """The case ``builder`` writes into a folder, built on the first request of any run and reused after."""
    folder = CACHE / f"{builder.__name__}-{cache_key(builder)}"
    if not (folder / "case.json").exists():
        temporary = CACHE / f".{folder.name}.{os.getpid()}.tmp"
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir(parents=True)
        builder(temporary)
        try:
            os.rename(temporary, folder)
        except OSError:            # another worker finished first
            shutil.rmtree(temporary, ignore_errors=True)
    return _load(folder)


def check_case(case: Case, *, rtol: float = 1e-4, atol: float = 1e-5, names: Sequence[str] | None = None,
               **options) -> float:
    """Import the case (its options, overridden by ``options``) and compare with TensorFlow's outputs; returns
    the largest absolute error."""
    options = {**case.options, **options}
    graph = import_tensorflow(options.pop("model", case.model), **options)
    got = run(graph, case.feeds)
    names = list(names or case.expected)
    assert set(names) <= set(graph.outputs), (names, graph.outputs)
    return assert_matches([case.expected[n] for n in names], [got[n] for n in names], names, rtol, atol)
