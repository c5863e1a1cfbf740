"""Keras files that reach outside themselves or declare more than they hold (issue 37).

Each crafted file is written here with h5py: a Dense layer whose kernel is HDF5 external storage, an
ExternalLink (on the dataset, and on the ``model_weights`` group), a SoftLink, a virtual dataset mapping
another file, a chunked dataset of 2^28 floats that takes no room, a small compressed dataset hard-linked
three times, a group that contains itself, a LayerNormalization/Normalization whose constants would be
made from a declared [65536, 65536] input; each as ``.h5`` and, where the format allows, as ``.keras`` (the
h5 inside a zip, opened from memory). The other file holds a unique marker, which must never reach the
output. All run in one pegasus process under the harness's address-space limit; each must exit 2 with one
line naming the dataset. The same files made legitimately import and compute ``x @ kernel + bias``.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from tests.security.harness import assert_refused, run_many
from tests.support.requirements import need_module

h5py = need_module("h5py")

MARKER = b"K37-SECRET-MARKER-0123456789abcd"   # 32 bytes: 8 float32
KERNEL = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
BIAS = np.array([0.5, -1.0, 2.0], np.float32)
INPUT = {"class_name": "InputLayer", "config": {"batch_shape": [None, 4], "dtype": "float32", "name": "inp"}}
DENSE = {"class_name": "Dense", "config": {"name": "d1", "trainable": True, "dtype": "float32", "units": 3,
                                           "activation": "linear", "use_bias": True}}


def _secret_files(folder: Path) -> tuple[Path, Path]:
    """A raw secret (48 bytes: a [4, 3] float32 kernel's worth) and an HDF5 file holding it as dataset /k."""
    secret = folder / "secret.bin"
    secret.write_bytes(MARKER + MARKER[:16])
    other = folder / "other.h5"
    with h5py.File(other, "w") as f:
        f["k"] = np.frombuffer(secret.read_bytes(), np.float32).reshape(4, 3)
    return secret, other


def _h5_model(path: Path, kernel, names=("kernel", "bias")) -> None:
    """A Keras 3 legacy .h5 of Sequential(Input(4), Dense(3)); ``kernel(group, file)`` writes the kernel."""
    config = {"class_name": "Sequential", "config": {"name": "seq", "layers": [INPUT, DENSE]}}
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "3.5.0"
        layer = f.create_group("model_weights/d1")
        layer.attrs["weight_names"] = [f"seq/d1/{n}" for n in names]
        kernel(layer.create_group("seq/d1"), f)
        layer["seq/d1/bias"] = BIAS


def _keras_model(path: Path, kernel) -> None:
    """The same model as a .keras zip; ``kernel(vars_group, file)`` writes ``layers/dense/vars/0``."""
    config = {"module": "keras", "class_name": "Sequential", "config": {"name": "seq", "layers": [
        {"module": "keras.layers", **INPUT}, {"module": "keras.layers", **DENSE}]}}
    weights = io.BytesIO()
    with h5py.File(weights, "w") as f:
        own = f.create_group("layers/dense/vars")
        own.attrs["name"] = "d1"
        kernel(own, f)
        own["1"] = BIAS
        f.create_group("vars")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.5.0"}))
        archive.writestr("model.weights.h5", weights.getvalue())


def _crafted(folder: Path) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(file name, extra arguments, words the refusal must contain) for every crafted file, written to folder."""
    secret, other = _secret_files(folder)

    def external(group, f, name="kernel"):
        group.create_dataset(name, (4, 3), "<f4", external=[(str(secret), 0, 48)])

    def ext_link(group, f, name="kernel"):
        group[name] = h5py.ExternalLink(str(other), "/k")

    def soft_link(group, f, name="kernel"):
        f["elsewhere"] = KERNEL
        group[name] = h5py.SoftLink("/elsewhere")

    def virtual(group, f, name="kernel"):
        layout = h5py.VirtualLayout((4, 3), "<f4")
        layout[:] = h5py.VirtualSource(str(other), "k", (4, 3))
        group.create_virtual_dataset(name, layout)

    def huge(group, f, name="kernel"):   # 2^28 floats (1 GiB, 3 GiB in .keras) that take no room in the file
        group.create_dataset(name, (2**28, 3) if name == "0" else (2**28,), "<f4", chunks=(2**14, 3) if name == "0"
                             else (2**16,), compression="gzip")

    def repeated(group, f):   # a 3 MiB compressed dataset three times (hard links): over the file size + budget
        group.create_dataset("kernel", data=np.zeros((2**18, 3), np.float32), chunks=(2**16, 3), compression="gzip")
        group["kernel2"], group["kernel3"] = group["kernel"], group["kernel"]

    cases = [("extstore.h5", external, (), ("external file", str(secret), "/model_weights/d1/seq/d1/kernel")),
             ("extlink.h5", ext_link, (), ("external link", str(other), "/model_weights/d1/seq/d1/kernel")),
             ("softlink.h5", soft_link, (), ("soft link", "/elsewhere", "/model_weights/d1/seq/d1/kernel")),
             ("virtual.h5", virtual, (), ("virtual dataset", "/model_weights/d1/seq/d1/kernel")),
             ("huge.h5", huge, (), ("/model_weights/d1/seq/d1/kernel", "[268435456]", "--max-tensor-bytes"))]
    out = []
    for name, kernel, extra, words in cases:
        _h5_model(folder / name, kernel)
        out.append((name, list(extra), (name,) + words))
        keras_name = name.replace(".h5", ".keras")
        _keras_model(folder / keras_name, lambda group, f, k=kernel: k(group, f, "0"))
        keras_words = tuple(w.replace("/model_weights/d1/seq/d1/kernel", "/layers/dense/vars/0")
                            .replace("[268435456]", "[268435456, 3]") for w in words)
        out.append((keras_name, [], (keras_name, "model.weights.h5") + keras_words))
    _h5_model(folder / "repeated.h5", repeated, ("kernel", "kernel2", "kernel3"))
    out.append(("repeated.h5", ["--max-tensor-bytes", "4M"], ("repeated.h5", "/model_weights/d1/seq/d1/kernel2",
                                                            "more than a")))
    with h5py.File(folder / "extgroup.h5", "w") as f:   # the whole weights group in another file
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {"name": "seq",
                                                                                   "layers": [INPUT, DENSE]}})
        f["model_weights"] = h5py.ExternalLink(str(other), "/")
    out.append(("extgroup.h5", [], ("extgroup.h5", "'/model_weights' is an external link", str(other))))

    big_input = {**INPUT, "config": {**INPUT["config"], "batch_shape": [None, 65536, 65536]}}
    for name, layer, words in (
            ("lnorm.h5", {"class_name": "LayerNormalization", "config": {"name": "ln", "dtype": "float32",
                          "axis": [1, 2], "center": False, "scale": False}}, ("'ln'", "gamma", "[65536, 65536]")),
            ("norm.h5", {"class_name": "Normalization", "config": {"name": "nm", "dtype": "float32", "axis": [1, 2],
                         "mean": 0.5, "variance": 2.0}}, ("'nm'", "mean and variance", "[4294967296]"))):
        with h5py.File(folder / name, "w") as f:   # no weights: the constant would be made from the config's shape
            f.attrs["model_config"] = json.dumps({"class_name": "Sequential", "config": {
                "name": "seq", "layers": [big_input, layer]}})
            f.attrs["keras_version"] = "3.5.0"
        out.append((name, [], (name,) + words))

    def loop(group, f):   # layers/dense holds itself: a walk over its sub-objects would never end
        group["0"] = KERNEL
        f["layers/dense/cell"] = f["layers/dense"]
    _keras_model(folder / "loop.keras", loop)
    out.append(("loop.keras", [], ("loop.keras", "/layers/dense", "more than once")))
    return out


def test_crafted_keras_files_are_refused_by_name(tmp_path):
    cases = _crafted(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    argvs = [["import", "keras", "--model", tmp_path / name, "--output-model", out / f"{name}.json",
              "--output-data", out / f"{name}.data", *extra] for name, extra, _ in cases]
    results = run_many(argvs, cwd=tmp_path)
    for (_, _, words), result in zip(cases, results):
        assert_refused(result, *words)
    written = [p for p in out.iterdir()]
    assert not written, f"outputs written for refused files: {written}"
    for path in tmp_path.rglob("*"):   # the marker is only where the test put it
        if path.is_file() and path.name not in ("secret.bin", "other.h5"):
            assert MARKER not in path.read_bytes(), path


def test_legitimate_files_still_import(tmp_path):
    """The same model stored plainly (a contiguous and a compressed kernel): imported, it computes x @ W + b."""
    from pegasus.importers.keras.loader import import_keras
    from pegasus.runtime.interpreter import run

    _h5_model(tmp_path / "plain.h5", lambda g, f: g.create_dataset("kernel", data=KERNEL))
    _h5_model(tmp_path / "gzip.h5", lambda g, f: g.create_dataset("kernel", data=KERNEL, compression="gzip"))
    _keras_model(tmp_path / "plain.keras", lambda g, f: g.create_dataset("0", data=KERNEL))
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    for name in ("plain.h5", "gzip.h5", "plain.keras"):
        graph = import_keras(tmp_path / name)
        (output,) = graph.outputs
        np.testing.assert_allclose(run(graph, {graph.inputs[0]: x})[output], x @ KERNEL + BIAS, rtol=1e-6, atol=1e-6)
    results = run_many([["import", "keras", "--model", tmp_path / "plain.keras", "--output-model",
                         tmp_path / "m.json", "--output-data", tmp_path / "m.data"]], cwd=tmp_path)
    assert results[0].code == 0, results[0].stderr
    assert (tmp_path / "m.data").stat().st_size >= KERNEL.nbytes + BIAS.nbytes
