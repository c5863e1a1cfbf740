"""NAME.json + NAME.data, pegasus's own model files, are exchanged between users and read as untrusted input:
malformed JSON (deep nesting, huge integers, wrong types), bad shapes, a layer cycle, constants that point
outside the .data file, a symbolic link or a FIFO standing in for the .data file, and layers whose results would
exceed the tensor budget are each refused with one line (exit 2) by ``inference`` and ``export glow``, nothing is
written and no byte of a linked file reaches an output. A well-formed file still runs and gives x + w.

The files are written here with plain ``json``; the ideas come from ``shared/security/round2/ir``.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np

from tests.security.harness import assert_refused, run_many

SECRET = b"CANARY-SECRET-0123456789abcdef!!"   # 32 bytes = 8 float32
WEIGHTS = np.arange(8, dtype=np.float32)


def base_doc() -> dict:
    """y = x + w over [1, 8] floats, w the 32 bytes at offset 0 of NAME.data."""
    def tensor(**extra):
        return {"shape": [1, 8], "dtype": "float32", **extra}
    return {"format": "pegasus-model", "format_version": 1, "name": "m", "source": {},
            "inputs": [{"name": "x", **tensor()}], "outputs": [{"name": "y", **tensor()}],
            "layers": [{"name": "add", "op": "Add", "inputs": ["x", "w"], "outputs": ["y"], "attributes": {}}],
            "tensors": {"x": tensor(), "w": tensor(constant={"offset": 0, "bytes": 32}), "y": tensor()},
            "data": {"bytes": 32}}


def _variant(change) -> str:
    doc = copy.deepcopy(base_doc())
    result = change(doc)
    return result if isinstance(result, str) else json.dumps(doc)


def _set(path: list, value):
    def change(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


def _pad_layers(declared: int):
    def change(doc):
        doc["layers"] = [{"name": "pad", "op": "Pad", "inputs": ["x"], "outputs": ["p"],
                          "attributes": {"pads": [0, 0, 0, 1 << 33]}},
                         {"name": "sum", "op": "ReduceSum", "inputs": ["p"], "outputs": ["y"], "attributes": {}}]
        doc["tensors"]["p"] = {"shape": [1, declared], "dtype": "float32"}
        doc["tensors"]["y"] = {"shape": [1, 1], "dtype": "float32"}
        doc["outputs"][0] = {"name": "y", **doc["tensors"]["y"]}
    return change


def _cycle(doc):
    doc["layers"] = [{"name": "a", "op": "Relu", "inputs": ["t2"], "outputs": ["t1"], "attributes": {}},
                     {"name": "b", "op": "Relu", "inputs": ["t1"], "outputs": ["t2"], "attributes": {}},
                     {"name": "add", "op": "Add", "inputs": ["x", "t2"], "outputs": ["y"], "attributes": {}}]
    doc["tensors"]["t1"] = doc["tensors"]["t2"] = {"shape": [1, 8], "dtype": "float32"}


#: name -> (json text, words of the refusal)
CASES = {
    "deep_nesting": (_variant(lambda d: json.dumps(d)[:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}"),
                     ["nested too deeply"]),
    "huge_integer": (_variant(lambda d: json.dumps(d).replace('"format_version": 1',
                                                              '"format_version": ' + "9" * 5000)), ["digits"]),
    "data_string": (_variant(_set(["data"], "oops")), ['"data" must be an object']),
    "tensors_list": (_variant(_set(["tensors"], [1, 2])), ['"tensors" must be an object']),
    "layers_object": (_variant(_set(["layers"], {"a": 1})), ['"layers" must be a list']),
    "inputs_string": (_variant(_set(["inputs"], "x")), ['"inputs" must be a list']),
    "layer_cycle": (_variant(_cycle), ["layer 'a' reads 't2' before it is defined"]),
    "negative_dim": (_variant(_set(["tensors", "y", "shape"], [-1, 8])), ["tensor 'y'", "negative dimension"]),
    "float_dim": (_variant(_set(["tensors", "x", "shape"], [1.5, 8])), ["tensor 'x'", "not an integer"]),
    "string_shape": (_variant(_set(["tensors", "x", "shape"], "abc")), ["tensor 'x' shape must be a list"]),
    "nan_dim": (_variant(lambda d: json.dumps(d).replace('"shape": [1, 8], "dtype": "float32", "constant"',
                                                         '"shape": [NaN, 8], "dtype": "float32", "constant"')),
                ["tensor 'w'", "not an integer"]),
    "unknown_dtype": (_variant(_set(["tensors", "w", "dtype"], "object")), ["tensor 'w'", "unknown dtype"]),
    "unknown_op": (_variant(_set(["layers", 0, "op"], "Exec")), ["unknown op 'Exec'"]),
    "unknown_tensor": (_variant(_set(["layers", 0, "inputs"], ["x", "nowhere"])), ["'nowhere'", "not in"]),
    "offset_beyond": (_variant(_set(["tensors", "w", "constant"], {"offset": 1 << 40, "bytes": 32})),
                      ["tensor 'w'", "only 32"]),
    "offset_negative": (_variant(_set(["tensors", "w", "constant"], {"offset": -16, "bytes": 32})),
                        ["tensor 'w'", "offset -16"]),
    "bytes_wrong": (_variant(_set(["tensors", "w", "constant"], {"offset": 0, "bytes": 16})),
                    ["tensor 'w'", "needs 32 bytes"]),
    "constant_over_budget": (_variant(_set(["tensors", "w"], {"shape": [1 << 28], "dtype": "float32",
                                                               "constant": {"offset": 0, "bytes": 1 << 30}})),
                             ["tensor 'w'", "1.0 GiB"]),
    "type_disagrees": (_variant(_set(["tensors", "y", "shape"], [1, 4])), ["'y'", "Add gives"]),
    # Pad by 2^33: declared as such it is refused where computed; declared small it disagrees with its op
    "pad_declared_huge": (_variant(_pad_layers(8 + (1 << 33))), ["layer 'pad'", "32.0 GiB"]),
    "pad_declared_small": (_variant(_pad_layers(8)), ["'p'", "Pad gives"]),
}


def _write(folder: Path, name: str, text: str, data: bytes | None = None) -> Path:
    (folder / f"{name}.json").write_text(text)
    if data is not None:
        (folder / f"{name}.data").write_bytes(data)
    return folder / f"{name}.json"


def test_malformed_model_files_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 8), np.float32))
    argv = []
    for name, (text, _) in CASES.items():
        json_path = _write(tmp_path, name, text, WEIGHTS.tobytes())
        argv.append(["inference", "--model", json_path, "--model-data", json_path.with_suffix(".data"),
                     "--input", "x.npy", "--output-dir", f"out_{name}"])
    results = run_many(argv, cwd=tmp_path, address_space=4 * 2**30)
    for (name, (_, words)), result in zip(CASES.items(), results):
        try:
            assert_refused(result, *words)
        except AssertionError as exc:
            raise AssertionError(f"case {name}: {exc}") from None
        assert not (tmp_path / f"out_{name}").exists(), name


def test_linked_or_special_data_file_refused_and_never_copied(tmp_path):
    """A .data that is a symbolic link (to a secret, with no data.bytes to betray it) or a FIFO is refused by
    export glow and inference; the well-formed twin with a real file runs and gives x + w."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    doc = base_doc()
    del doc["data"]
    text = json.dumps(doc)
    linked = _write(tmp_path, "linked", text)
    os.symlink(secret, tmp_path / "linked.data")
    fifo = _write(tmp_path, "fifo", text)
    os.mkfifo(tmp_path / "fifo.data")
    ok = _write(tmp_path, "ok", json.dumps(base_doc()), WEIGHTS.tobytes())
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    np.save(tmp_path / "x.npy", x)

    def commands(json_path: Path, name: str) -> list[list]:
        data = json_path.with_suffix(".data")
        return [["export", "glow", "--model", json_path, "--model-data", data, "--output-path", f"bundle_{name}/m"],
                ["inference", "--model", json_path, "--model-data", data, "--input", "x.npy",
                 "--output-dir", f"out_{name}"]]

    results = run_many(commands(linked, "linked") + commands(fifo, "fifo") + commands(ok, "ok")[1:], cwd=tmp_path,
                       timeout=120)
    for result in results[:2]:
        assert_refused(result, "linked.data", "symbolic link")
    for result in results[2:4]:
        assert_refused(result, "fifo.data", "not a regular file")
    for name in ("linked", "fifo"):
        assert not (tmp_path / f"bundle_{name}").exists() and not (tmp_path / f"out_{name}").exists()
    assert results[4].code == 0, results[4].stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out_ok" / "outputs.npz")["y"].reshape(1, 8), x + WEIGHTS)
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink() and path != secret:
            assert SECRET[:8] not in path.read_bytes(), f"secret bytes in {path}"
