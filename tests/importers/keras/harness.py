"""The Keras tests' harness: models built with Keras 3 (``keras``) and Keras 2 (``tf_keras``), saved once and
cached on disk with the framework's own outputs, and pegasus checked against those outputs.

Cache: ``~/.cache/pegasus-tests/keras/<builder>-<library>-<key>.{keras,h5,npz}``, the key a hash of the
builder's source (with the private helpers of models.py it calls), of this file's ``build`` and of the
installed keras, tf-keras and TensorFlow versions, so a changed builder or a new Keras rebuilds it and
nothing else. The ``.npz`` holds the random inputs and ``model.predict``'s outputs on them, so a run that
finds every model cached never imports TensorFlow. Files are written under temporary names and renamed,
so concurrent workers each end with whole files.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "pegasus-tests" / "keras"
#: library -> the formats a model built with it is saved in
FORMATS = {"keras": (".keras", ".h5"), "tf_keras": (".h5",)}


def _versions() -> str:
    found = []
    for name in ("keras", "tf-keras", "tensorflow-cpu", "tensorflow", "h5py"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"no {name}")
    return ", ".join(found)


def cache_key(builder: Callable, library: str) -> str:
    source = inspect.getsource(builder)
    module = inspect.getmodule(builder)
    helpers = [inspect.getsource(f) for name, f in sorted(vars(module).items())
               if name.startswith("_") and inspect.isfunction(f) and f"{name}(" in source]
    text = "\n".join([source, *helpers, inspect.getsource(build), library, _versions()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Built:
    """A cached model: its files by suffix, the inputs it was run on and the framework's outputs."""

    files: dict[str, Path]
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def library_module(library: str):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if library == "tf_keras":
        import tf_keras

        return tf_keras
    import keras

    return keras


def random_inputs(model, rng: np.random.Generator) -> list[np.ndarray]:
    """Batch-1 inputs: floats uniform in [-2, 2), integers in [0, 8); a dimension of any size (None) is 6."""
    feeds = []
    for tensor in model.inputs:
        shape = (1,) + tuple(6 if d is None else int(d) for d in tensor.shape[1:])
        dtype = np.dtype(getattr(tensor.dtype, "name", tensor.dtype))
        feeds.append(rng.integers(0, 8, shape).astype(dtype) if dtype.kind in "iu"
                     else rng.uniform(-2, 2, shape).astype(np.float32))
    return feeds


def build(builder: Callable, library: str, paths: dict[str, Path], reference: Path) -> None:
    """Build the model with ``library``, save it in every format, and store inputs and predictions."""
    K = library_module(library)
    K.utils.set_random_seed(1234)
    model = builder(K)
    rng = np.random.default_rng(7)
    feeds = random_inputs(model, rng)
    outputs = model.predict(feeds if len(feeds) > 1 else feeds[0], verbose=0)
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    for suffix, path in paths.items():
        temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp{suffix}")
        model.save(temporary)
        os.replace(temporary, path)
    arrays = {f"input_{i}": x for i, x in enumerate(feeds)} | {f"output_{i}": y for i, y in enumerate(outputs)}
    temporary = reference.with_name(f"{reference.stem}.{os.getpid()}.tmp.npz")
    np.savez(temporary, **arrays)
    os.replace(temporary, reference)


def cached_model(builder: Callable, library: str) -> Built:
    key = cache_key(builder, library)
    stem = f"{builder.__name__}-{library}-{key}"
    paths = {suffix: CACHE / f"{stem}{suffix}" for suffix in FORMATS[library]}
    reference = CACHE / f"{stem}.npz"
    if not reference.exists() or not all(p.exists() for p in paths.values()):
        CACHE.mkdir(parents=True, exist_ok=True)
        build(builder, library, paths, reference)
    with np.load(reference) as data:
        inputs = [data[f"input_{i}"] for i in range(sum(k.startswith("input_") for k in data.files))]
        outputs = [data[f"output_{i}"] for i in range(sum(k.startswith("output_") for k in data.files))]
    return Built(paths, inputs, outputs)


def check_import(path: Path, built: Built, rtol: float = 1e-4, atol: float = 1e-5, **options):
    """Import ``path`` and compare pegasus' float reference with the framework's outputs; returns the graph."""
    from pegasus.importers.keras.loader import import_keras
    from pegasus.runtime.interpreter import run

    graph = import_keras(path, **options)
    got = run(graph, dict(zip(graph.inputs, built.inputs)))
    assert len(graph.outputs) == len(built.outputs), (graph.outputs, len(built.outputs))
    for name, want in zip(graph.outputs, built.outputs):
        have = got[name]
        assert have.shape == want.shape, (name, have.shape, want.shape)
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=f"{path.name}: {name}")
    return graph
