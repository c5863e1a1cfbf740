"""The TFLite tests' harness: converted models cached on disk, and pegasus checked against the TFLite
interpreter on random inputs.

Cache: ``~/.cache/pegasus-tests/tflite/<builder>-<key>.tflite``, the key a hash of the builder's source
(with the private helpers it calls), of the helper modules it uses (convert.py, flatbuffer.py) and of the
installed TensorFlow version, so a changed builder or a new TensorFlow rebuilds it and nothing else. It
lives outside pytest's temporary folders so every pytest-xdist worker of a run (and the next run) finds
what another one built; a model is written to a temporary name and renamed, so two workers building the
same model at once both end with one whole file. Builders import TensorFlow themselves: a run that finds
every model cached never loads it.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from pegasus.importers.tflite.loader import import_tflite
from pegasus.runtime.interpreter import run
from tests.conftest import run_cli
from tests.importers.tflite import convert, flatbuffer

CACHE = Path.home() / ".cache" / "pegasus-tests" / "tflite"


def _tensorflow_version() -> str:
    for name in ("tensorflow-cpu", "tensorflow"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "no tensorflow"


def cache_key(builder: Callable[[], bytes]) -> str:
    """A hash of the builder's source, of the private helpers of its module it calls, of convert.py and
    flatbuffer.py, and of the TensorFlow version."""
    source = inspect.getsource(builder)
    module = inspect.getmodule(builder)
    helpers = [inspect.getsource(f) for name, f in sorted(vars(module).items())
               if name.startswith("_") and inspect.isfunction(f) and f"{name}(" in source]
    text = "\n".join([source, *helpers, inspect.getsource(convert), inspect.getsource(flatbuffer),
                      _tensorflow_version()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_model(builder: Callable[[], bytes]) -> Path:
    """The .tflite file ``builder`` makes, built on the first request of any run and reused after."""
    path = CACHE / f"{builder.__name__}-{cache_key(builder)}.tflite"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        data = builder()
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)
    return path


def interpreter(path: Path):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    return interp


def random_feeds(interp, rng: np.random.Generator, low: float = -3.0, high: float = 3.0,
                 int_high: int = 3) -> list[np.ndarray]:
    """One random array per model input: floats uniform in [low, high), integers in [0, int_high)."""
    feeds = []
    for detail in interp.get_input_details():
        shape, dtype = tuple(detail["shape"]), np.dtype(detail["dtype"])
        if dtype.kind == "f":
            feeds.append(rng.uniform(low, high, shape).astype(dtype))
        else:
            info = np.iinfo(dtype)
            feeds.append(rng.integers(max(0, info.min), min(int_high, info.max), shape, endpoint=False).astype(dtype))
    return feeds


def run_interpreter(interp, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    interp.reset_all_variables()   # recurrent state starts at zero on every run, as pegasus' does
    for detail, value in zip(interp.get_input_details(), feeds):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def assert_matches(expected: Sequence[np.ndarray], got: Sequence[np.ndarray], names: Sequence[str],
                   rtol: float, atol: float) -> float:
    """Integer outputs equal, float outputs within tolerance; returns the largest absolute float error."""
    worst = 0.0
    assert len(expected) == len(got)
    for want, have, name in zip(expected, got, names):
        assert have.shape == want.shape and have.dtype == want.dtype, (name, have.shape, have.dtype, want.shape,
                                                                      want.dtype)
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(have, want, err_msg=name)
        else:
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=name)
            worst = max(worst, float(np.max(np.abs(have.astype(np.float64) - want), initial=0.0)))
    return worst


def check_against_interpreter(path: Path, *, reference: Path | None = None, runs: int = 3, seed: int = 0,
                              rtol: float = 1e-4, atol: float = 1e-5, low: float = -3.0, high: float = 3.0,
                              notes: list[str] | None = None, **import_options) -> float:
    """Import ``path`` and compare pegasus' float reference with the TFLite interpreter running ``reference``
    (default: the same file) on ``runs`` random inputs, output by output (by tensor name: a cut's outputs
    are among the reference's); returns the largest absolute error."""
    from pegasus.importers.tflite.reader import read_tflite

    graph = import_tflite(path, note=notes.append if notes is not None else None, **import_options)
    interp = interpreter(reference or path)
    names = {t.index: t.name for t in read_tflite(reference or path).tensors}
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(runs):
        feeds = random_feeds(interp, rng, low, high)
        expected = dict(zip((names[d["index"]] for d in interp.get_output_details()), run_interpreter(interp, feeds)))
        assert set(graph.outputs) <= set(expected), (graph.outputs, list(expected))
        got = run(graph, dict(zip(graph.inputs, feeds)))
        worst = max(worst, assert_matches([expected[n] for n in graph.outputs], [got[n] for n in graph.outputs],
                                          graph.outputs, rtol, atol))
    return worst


def op_types(path: Path) -> dict[str, list[dict]]:
    """Builtin (or custom) op name -> the decoded options of each of its operators in the file."""
    from pegasus.importers.tflite.reader import read_tflite

    found: dict[str, list[dict]] = {}
    for node in read_tflite(path).nodes:
        found.setdefault(node.op_type, []).append(node.attrs)
    return found


def import_cli(path, folder):
    """``pegasus import tflite`` of ``path`` into ``folder``: (m.json, m.data, m.quantize)."""
    result = run_cli("import", "tflite", "--model", path, "--output-model", folder / "m.json")
    assert result.code == 0, result.stderr
    return folder / "m.json", folder / "m.data", folder / "m.quantize"
