"""What fuzzing the Keras, Caffe and Darknet readers found (issue 35), each case regenerated here.

Issue 35 defect 5: a damaged Keras .h5 (a bit flipped in an HDF5 structure) stopped `import keras` with h5py's
RuntimeError ("... (bad local heap signature)", "Can't get deprecated info for object") as an internal error;
now every h5py call goes through the reader's H5Reader, which names the file and the object being read. A
global heap collection whose free-space object has size 0 made HDF5 itself loop forever while reading the
model config (no signal can interrupt it): it is now refused before h5py opens the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from tests.security.harness import assert_refused, run_many


def _plain_h5(path: Path) -> Path:
    """A Keras 2-style .h5 (a Dense layer), with old-style groups: each keeps its names in a local heap."""
    config = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 4], "dtype": "float32", "name": "in"}},
        {"class_name": "Dense", "config": {"name": "dense", "units": 3, "activation": "linear", "use_bias": True,
                                           "trainable": True, "dtype": "float32"}}]}}
    with h5py.File(path, "w", libver="earliest") as f:
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "2.15.0"
        group = f.create_group("model_weights").create_group("dense")
        group.attrs["weight_names"] = np.array([b"dense/kernel:0", b"dense/bias:0"])
        group.create_dataset("dense/kernel:0", data=np.arange(12, dtype=np.float32).reshape(4, 3))
        group.create_dataset("dense/bias:0", data=np.ones(3, np.float32))
    return path


def _offsets(data: bytes, signature: bytes) -> list[int]:
    found, at = [], data.find(signature)
    while at >= 0:
        found.append(at)
        at = data.find(signature, at + 1)
    return found


def _bad_local_heaps(folder: Path) -> list[tuple[Path, str]]:
    """The plain file with one group's local heap signature broken, for each heap but the root group's."""
    data = _plain_h5(folder / "plain.h5").read_bytes()
    cases = []
    for index, at in enumerate(_offsets(data, b"HEAP")[1:]):
        damaged = bytearray(data)
        damaged[at:at + 4] = b"PAEH"
        path = folder / f"heap{index}.h5"
        path.write_bytes(bytes(damaged))
        cases.append((path, "/model_weights"))
    return cases


def _looping_global_heap(folder: Path) -> Path:
    """The plain file with the free-space object of its global heap (which holds model_config) of size 0."""
    data = bytearray(_plain_h5(folder / "plain.h5").read_bytes())
    start = data.find(b"GCOL")
    end = start + int.from_bytes(data[start + 8:start + 16], "little")
    at = start + 16
    while at + 16 <= end:
        index, size = int.from_bytes(data[at:at + 2], "little"), int.from_bytes(data[at + 8:at + 16], "little")
        if index == 0:
            data[at + 8:at + 16] = bytes(8)
            break
        at += 16 + ((size + 7) & ~7)
    assert at + 16 <= end, "no free-space object found"
    path = folder / "gcol.h5"
    path.write_bytes(bytes(data))
    return path


def test_damaged_h5_is_one_line_naming_file_and_object(tmp_path):
    heaps = _bad_local_heaps(tmp_path)
    assert len(heaps) >= 3
    looping = _looping_global_heap(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cases = [(path, ("cannot read", path.name, where, "bad local heap")) for path, where in heaps]
    cases.append((looping, ("gcol.h5", "global heap", "byte")))
    cases.append((tmp_path / "plain.h5", None))
    argvs = [["import", "keras", "--model", path, "--output-model", out / f"{path.stem}.json",
              "--output-data", out / f"{path.stem}.data"] for path, _ in cases]
    results = run_many(argvs, cwd=tmp_path, timeout=120)
    for (path, words), result in zip(cases, results):
        if words is None:
            assert result.code == 0, result.stderr
            continue
        assert_refused(result, *words)
        assert not (out / f"{path.stem}.json").exists()
