"""Keras: the .h5 reader (HDF5 attributes, the model_config JSON, weight datasets) and the .keras reader (a zip
of config.json, metadata.json and model.weights.h5), then the conversion and import passes and NAME.json/.data
(what `pegasus import keras` does).

The structure-aware mutators change one thing a parser would otherwise rarely reach intact: one value of the
model config's JSON (a dim, a count, a name, a class, a list emptied or repeated), one attribute
(``weight_names``, ``keras_version``), or one weight dataset (rewritten with another shape, dtype or values,
or removed); for a .keras zip, config.json or model.weights.h5 (as above, or its bytes) in a re-written zip."""

from __future__ import annotations

import io
import json
import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from fuzz.mutate import mutate
from fuzz.targets import target

#: values put in place of one JSON value
_JSON_VALUES: list[Any] = [0, -1, 1, 2, 3, 7, 2**31, 2**40, -(2**31), 1e308, 0.5, float("nan"), float("inf"), None,
                           True, "", "same", "valid", "relu", "Dense", "Conv2D", "LSTM", "InputLayer", "Add",
                           "float64", "int8", "channels_first", [], [None], [1, 2], [0, 0, 0, 0], {}, {"a": 1}]


def _leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every value of a JSON tree (containers included)."""
    found = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _leaves(inner, path + (key,))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _leaves(inner, path + (index,))
    return found


def mutate_json(tree: Any, rng: random.Random) -> Any:
    """``tree`` with one value replaced, removed, or (in a list) repeated."""
    paths = [p for p in _leaves(tree) if p]
    if not paths:
        return rng.choice(_JSON_VALUES)
    path = rng.choice(paths)
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    key, action = path[-1], rng.randrange(6)
    if action == 0:
        del parent[key]
    elif action == 1 and isinstance(parent, list):
        parent.insert(key, parent[key])
    elif action == 2 and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
        parent[key] = parent[key] * rng.choice([-1, 0, 2, 1000, 2**20])
    elif action == 3 and isinstance(parent[key], str):
        parent[key] = parent[key] + rng.choice(["_1", "/x", "\x00", "../"])
    else:
        parent[key] = rng.choice(_JSON_VALUES)
    return tree


def _mutate_h5_object(store: Any, rng: random.Random) -> None:
    import h5py

    objects: list[Any] = []
    store.visititems(lambda name, obj: objects.append(obj))
    attributed = [o for o in [store, *objects] if len(o.attrs)]
    datasets = [o for o in objects if isinstance(o, h5py.Dataset)]
    if datasets and (rng.random() < 0.5 or not attributed):
        dataset = rng.choice(datasets)
        parent, name, data = dataset.parent, dataset.name.rsplit("/", 1)[-1], dataset[()]
        del parent[name]
        action = rng.randrange(4)
        if action == 0:
            return
        if action == 1:   # another shape
            shape = list(np.shape(data)) or [1]
            shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 17])
            if rng.random() < 0.3:
                shape.append(rng.choice([1, 2]))
            data = np.resize(np.asarray(data), shape)
        elif action == 2:   # another dtype
            data = np.asarray(data).astype(rng.choice([np.float16, np.float64, np.int8, np.int64, np.bool_]))
        else:   # values no trained model holds
            data = np.asarray(data, np.float32).copy()
            data.reshape(-1)[: max(1, data.size // 3)] = rng.choice([np.nan, np.inf, -np.inf, 1e38, 0.0])
        parent.create_dataset(name, data=data)
        return
    holder = rng.choice(attributed)
    key = rng.choice(list(holder.attrs))
    value = holder.attrs[key]
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(text, str):
        try:
            holder.attrs[key] = json.dumps(mutate_json(json.loads(text), rng))
            return
        except ValueError:
            holder.attrs[key] = rng.choice(["", "3.1", "x" * 100, "2"])
            return
    if isinstance(value, np.ndarray) and value.size and rng.random() < 0.7:
        items = list(value)
        action = rng.randrange(3)
        if action == 0:
            items.pop(rng.randrange(len(items)))
        elif action == 1:
            items.insert(rng.randrange(len(items)), items[rng.randrange(len(items))])
        else:
            items[rng.randrange(len(items))] = rng.choice([b"", b"nothing:0", b"../x", b"/abs"])
        items = [i if isinstance(i, bytes) else str(i).encode() for i in items]
        holder.attrs[key] = np.array(items) if items else np.array([], dtype="S1")
        return
    del holder.attrs[key]


def mutate_h5(data: bytes, rng: random.Random) -> bytes:
    """An HDF5 file with one attribute or dataset changed (see the module docstring)."""
    import h5py

    buffer = io.BytesIO(data)
    with h5py.File(buffer, "r+") as store:
        _mutate_h5_object(store, rng)
    return buffer.getvalue()


def mutate_keras_zip(data: bytes, rng: random.Random) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    index = rng.randrange(len(members))
    info, blob = members[index]
    if info.filename.endswith(".json"):
        blob = json.dumps(mutate_json(json.loads(blob), rng)).encode()
    elif info.filename.endswith(".h5"):
        blob = mutate_h5(blob, rng) if rng.random() < 0.6 else mutate(blob, rng)
    members[index] = (info, blob)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info, blob in members:
            archive.writestr(info, blob)
    return out.getvalue()


def _import(path: Path, scratch: Path) -> None:
    from pegasus.importers.keras.loader import import_keras
    from pegasus.ir.serialize import save

    save(import_keras(path), scratch / "m.json", scratch / "m.data")


@target("keras_h5", structured=mutate_h5)
def read_keras_h5(path: Path, scratch: Path) -> None:
    _import(path, scratch)


@target("keras_zip", structured=mutate_keras_zip)
def read_keras_zip(path: Path, scratch: Path) -> None:
    _import(path, scratch)
