"""Reads a Keras model file as data: the model's config (JSON) and its weight arrays, never through Keras.

Nothing in the file is deserialized by Keras, unpickled or run, so a file written by Keras 2 (tf.keras
2.x) imports where Keras 3 refuses it, and importing needs only h5py (no TensorFlow, no Keras).

- ``.h5``/``.hdf5`` (Keras 2, and Keras 3's legacy format): the attributes ``model_config`` (JSON) and
  ``keras_version``; weights under ``model_weights/<layer>``, whose attribute ``weight_names`` lists the
  layer's arrays in ``layer.weights`` order (``kernel:0``/``kernel``, ``bias``...). A nested model's group
  holds the weights of all its layers, named ``<inner layer>/<weight>`` (Keras 3 prefixes a nested
  Sequential's own name): each is routed to the inner layer its name mentions.
- ``.keras`` (Keras 3): a zip of ``config.json``, ``metadata.json`` (``keras_version``) and
  ``model.weights.h5``, whose groups are not named after layers but after their classes in the order
  Keras walks the model (``layers/conv2d_1/vars/0``, ``layers/functional/layers/dense/vars/1``, an RNN's
  ``cell/vars``, a Bidirectional's ``forward_layer`` and ``backward_layer``, a TimeDistributed's
  ``layer``): the same walk over the config finds each layer's arrays.

Either way the result is ``KerasFile.weights``: per layer path (``("conv2d",)``, ``("backbone", "conv1")``
for a layer of nested model ``backbone``) the arrays in ``layer.weights`` order.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.limits import FLAG, max_tensor_bytes
from pegasus.safezip import open_archive

try:
    import h5py

    from pegasus.importers.keras.h5data import H5_ERRORS, H5Reader, h5_name
    from pegasus.importers.keras.h5heap import check_global_heaps, check_global_heaps_of
except ImportError:  # pragma: no cover - depends on the installed extras
    h5py = None

H5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"
MODEL_CLASSES = ("Functional", "Model", "Sequential")

LayerPath = tuple[str, ...]


@dataclass
class KerasFile:
    """A Keras model read as data: ``config`` is the model's ``{"class_name", "config"}``; ``version`` the
    ``keras_version`` that wrote it."""

    path: Path
    config: dict[str, Any]
    version: str
    weights: dict[LayerPath, list[np.ndarray]]
    format: str   # "h5" or "keras"

    @property
    def major(self) -> int:
        """Keras' major version (2 or 3), which decides the meaning of hard_sigmoid, gelu and node indices."""
        match = re.match(r"\s*(\d+)", self.version)
        return int(match.group(1)) if match else 2


# ---- the config tree (shared with graph.py) -----------------------------------------------------------
def is_model(layer: dict[str, Any]) -> bool:
    """A layer that is itself a Functional or Sequential model (its config lists layers)."""
    return layer.get("class_name") in MODEL_CLASSES and isinstance(layer.get("config", {}).get("layers"), list)


def is_operation(layer: dict[str, Any]) -> bool:
    """A Keras 3 operation (``x + 3.0``, ``keras.ops.mean``) recorded in a functional model, not a layer: its
    module is keras.src.ops.*, or, in a legacy .h5 config without modules, its config has neither the
    ``trainable`` flag nor the dtype a layer's has. It owns no weights and is no layer of the weights file."""
    module = layer.get("module")
    if module is not None:
        return str(module).startswith(("keras.src.ops", "keras.ops"))
    config, calls = layer.get("config"), layer.get("inbound_nodes")
    return isinstance(config, dict) and "trainable" not in config and config.get("dtype") is None and \
        bool(calls) and isinstance(calls[0], dict)


def wrapped_model(layer: dict[str, Any]) -> dict[str, Any] | None:
    """The model a TimeDistributed wraps (a per-frame CNN), else None."""
    inner = layer.get("config", {}).get("layer") if layer.get("class_name") == "TimeDistributed" else None
    return inner if isinstance(inner, dict) and is_model(inner) else None


def layer_name(layer: dict[str, Any]) -> str:
    return str(layer.get("name") or layer.get("config", {}).get("name", ""))


def model_layers(model: dict[str, Any]) -> list[dict[str, Any]]:
    return list(model.get("config", {}).get("layers", []))


def _subtree_names(layer: dict[str, Any]) -> set[str]:
    names = {layer_name(layer)}
    for inner in model_layers(layer) if is_model(layer) else []:
        names |= _subtree_names(inner)
    return names


# ---- reading ----------------------------------------------------------------------------------------
def read_keras(path: str | Path) -> KerasFile:
    """Read ``path`` (.h5/.hdf5/.keras, recognized by content) as data."""
    if h5py is None:
        raise PegasusError("importing Keras models needs h5py: pip install 'pegasus-nn[keras]'")
    path = require_file(path, "Keras model")
    with path.open("rb") as f:
        head = f.read(8)
    if head.startswith(ZIP_MAGIC):
        return _read_zip(path)
    if head == H5_MAGIC:
        return _read_h5(path)
    hint = ""
    if head[4:8] == b"TFL3":
        hint = " (it looks like a TFLite model: use 'pegasus import tflite')"
    elif head[:1] == b"\x08":
        hint = " (it looks like an ONNX model: use 'pegasus import onnx')"
    size = path.stat().st_size
    raise PegasusError(f"not a Keras model: neither an HDF5 file (.h5) nor a .keras zip archive ({size} bytes){hint}",
                       where=str(path))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _json(text: Any, what: str, path: Path) -> dict[str, Any]:
    try:
        value = json.loads(_text(text))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PegasusError(f"the model config ({what}) is not valid JSON: {exc}", where=str(path)) from None
    if not isinstance(value, dict) or "class_name" not in value:
        raise PegasusError(f"the model config ({what}) does not describe a Keras model", where=str(path))
    return value


def _read_h5(path: Path) -> KerasFile:
    check_global_heaps_of(path)
    h5 = H5Reader(path, path.stat().st_size)
    try:
        with h5py.File(path, "r") as f:
            config_text = h5.attr(f, "model_config")
            if config_text is None:
                weights_only = h5.attr(f, "layer_names") is not None or h5.child(f, "layers") is not None
                what = "weights only (saved with save_weights)" if weights_only else "no Keras model config"
                raise PegasusError(f"this HDF5 file holds {what}: save the whole model with model.save('m.h5') "
                                   "or model.save('m.keras')", where=str(path))
            config = _sequential_lists(_json(config_text, "model_config", path))
            version = _text(h5.attr(f, "keras_version", ""))
            group = h5.child(f, "model_weights") or f
            version = version or _text(h5.attr(group, "keras_version", ""))
            weights: dict[LayerPath, list[np.ndarray]] = {}
            for layer in _top_layers(config):
                name = layer_name(layer)
                found = h5.child(group, name) if name else None
                if isinstance(found, h5py.Group):
                    _route(weights, (name,), wrapped_model(layer) or layer, _h5_named(found, h5))
    except PegasusError:
        raise
    except H5_ERRORS as exc:   # opening the file (every read inside goes through H5Reader, which names it)
        raise PegasusError(f"cannot read the HDF5 file ({' '.join(str(exc).split())}); is it truncated?",
                           where=str(path)) from None
    return KerasFile(path, config, version or _guess_version(config), weights, "h5")


def _sequential_lists(layer: Any) -> Any:
    """Keras up to 2.1 wrote a Sequential's config as the bare list of its layers (the first one holding
    ``batch_input_shape``), later ones as ``{"name", "layers"}``: the later form, at every depth."""
    if isinstance(layer, dict):
        config = layer.get("config")
        if layer.get("class_name") == "Sequential" and isinstance(config, list):
            config = {"name": layer.get("name") or "sequential", "layers": config}
        if isinstance(config, dict) and isinstance(config.get("layers"), list):
            config = {**config, "layers": [_sequential_lists(inner) for inner in config["layers"]]}
        return {**layer, "config": config} if "config" in layer else layer
    return layer


def _top_layers(config: dict[str, Any]) -> list[dict[str, Any]]:
    if is_model(config):
        return model_layers(config)
    return [config]   # a single layer saved as a model: not importable, but the error comes later


def _h5_named(group, h5: H5Reader) -> list[tuple[str, np.ndarray]]:
    listed = h5.attr(group, "weight_names", [])
    if isinstance(listed, (str, bytes)) or not hasattr(listed, "__iter__"):
        raise PegasusError(f"attribute 'weight_names' of '{h5_name(group)}' is not a list of names",
                           where=str(h5.file))
    names = [_text(n) for n in listed]
    missing = [n for n in names if h5.child(group, n) is None]
    if missing:
        raise PegasusError(f"weight '{missing[0]}' of layer '{h5_name(group).rsplit('/', 1)[-1]}' is listed but not "
                           "stored (is the file truncated?)", where=str(h5.file))
    return [(n, h5.array(group, n)) for n in names]


def _route(out: dict[LayerPath, list[np.ndarray]], path: LayerPath, layer: dict[str, Any],
           named: list[tuple[str, np.ndarray]]) -> None:
    """Store ``named`` (weight name, array) as layer ``path``'s; a nested model's go to its inner layers by
    the layer name their weight name mentions."""
    if not is_model(layer):
        out[path] = [array for _, array in named]
        return
    children = model_layers(layer)
    owner = {}
    for child in children:
        for name in _subtree_names(child):
            owner.setdefault(name, child)
    direct = {layer_name(child): child for child in children}
    routed: dict[str, list[tuple[str, np.ndarray]]] = {}
    for weight_name, array in named:
        parts = weight_name.split("/")
        index = next((i for i, part in enumerate(parts[:-1]) if part in owner), None)
        if index is None:
            raise PegasusError(f"weight '{weight_name}' of nested model '{path[-1]}' names none of its layers")
        part = parts[index]
        child = direct.get(part) or owner[part]
        rest = parts[index + 1:] if part == layer_name(child) else parts[index:]
        routed.setdefault(layer_name(child), []).append(("/".join(rest), array))
    for name, weights in routed.items():
        _route(out, path + (name,), direct[name], weights)


def _guess_version(config: dict[str, Any]) -> str:
    """Files without ``keras_version``: Keras 3 writes call arguments as dicts, Keras 2 as lists."""
    for layer in model_layers(config):
        for node in layer.get("inbound_nodes", []):
            return "3" if isinstance(node, dict) else "2"
    return "2"


# ---- .keras (Keras 3 zip) ---------------------------------------------------------------------------
def _read_zip(path: Path) -> KerasFile:
    """The archive is validated first by pegasus.safezip (member names, duplicates, local headers against the
    central directory, overlaps); its members are then read with zipfile, each no larger than its compressed
    bytes plus one tensor budget (model.weights.h5 holds every weight, so one tensor's budget cannot bound it)."""
    open_archive(path).close()
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "config.json" not in names:
                raise PegasusError("this zip archive holds no config.json: not a .keras model", where=str(path))
            config = _json(_member(archive, "config.json", path), "config.json", path)
            meta = json.loads(_member(archive, "metadata.json", path)) if "metadata.json" in names else {}
            if "model.weights.h5" not in names:
                other = sorted(n for n in names if n.startswith("model.weights"))
                raise PegasusError("the archive holds no model.weights.h5" + (f" (it has {', '.join(other)}: "
                                   "sharded or npz weights are not supported)" if other else ""), where=str(path))
            blob = _member(archive, "model.weights.h5", path)
    except PegasusError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise PegasusError(f"cannot read the .keras zip archive ({exc}); is it truncated?", where=str(path)) from None
    weights: dict[LayerPath, list[np.ndarray]] = {}
    check_global_heaps(blob, path, "model.weights.h5 in the archive")
    try:
        with h5py.File(io.BytesIO(blob), "r") as store:
            _walk_model(store, config, (), weights, H5Reader(path, len(blob), "model.weights.h5 in the archive"))
    except PegasusError:
        raise
    except H5_ERRORS as exc:   # opening it (every read inside goes through H5Reader, which names it)
        raise PegasusError(f"cannot read model.weights.h5 in the archive ({' '.join(str(exc).split())})",
                           where=str(path)) from None
    version = str(meta.get("keras_version", "3")) if isinstance(meta, dict) else "3"
    return KerasFile(path, config, version, weights, "keras")


def _member(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """A member's bytes, once its declared size is seen to be within what it can hold: its compressed bytes
    plus one tensor budget (zipfile stops at the declared size)."""
    info = archive.getinfo(name)
    if info.file_size > info.compress_size + max_tensor_bytes():
        raise PegasusError(f"archive member {name} declares {info.file_size:,} bytes from {info.compress_size:,} "
                           f"compressed, more than {FLAG} allows (a zip bomb?)", where=str(path))
    return archive.read(info)


def snake_case(name: str) -> str:
    """Keras' ``naming.to_snake_case``: how the weights file names a layer of a given class."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _container_keys(model: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(group name, layer config) for a model's layers in the order Keras saves them: Sequential leaves out its
    InputLayer, and the operations a functional model records (``x + 3.0``: keras.ops classes such as ``Add``,
    not layers) are not saved; repeated class names get _1, _2 ..."""
    layers = [layer for layer in model_layers(model) if not is_operation(layer)]
    if model.get("class_name") == "Sequential":
        layers = [layer for layer in layers if layer.get("class_name") != "InputLayer"]
    used: dict[str, int] = {}
    keys = []
    for layer in layers:
        base = snake_case(str(layer.get("class_name", "")))
        if base in used:
            used[base] += 1
            keys.append((f"{base}_{used[base]}", layer))
        else:
            used[base] = 0
            keys.append((base, layer))
    return keys


def _group(h5: H5Reader, group, name: str):
    """``group[name]`` when ``group`` is given and holds a group of that name, else None."""
    found = h5.child(group, name) if group is not None else None
    return found if isinstance(found, h5py.Group) else None


def _walk_model(group, model: dict[str, Any], path: LayerPath, out: dict[LayerPath, list[np.ndarray]],
                h5: H5Reader) -> None:
    container = _group(h5, group, "layers")
    for key, layer in _container_keys(model):
        child = _group(h5, container, key)
        name = layer_name(layer)
        if is_model(layer):
            _walk_model(child, layer, path + (name,), out, h5)
            continue
        inner = wrapped_model(layer)
        if inner is not None:   # its layers' weights under the wrapper's path, as graph.py inlines them
            _walk_model(_group(h5, child, "layer"), inner, path + (name,), out, h5)
            continue
        own = _group(h5, child, "vars")
        if own is not None:
            stored = _text(h5.attr(own, "name", name))
            if stored != name:
                raise PegasusError(f"model.weights.h5 stores '{stored}' where the config has layer '{name}' "
                                   f"({'/'.join(path + (name,))}): the archive's weights do not match its config",
                                   where=str(h5.file))
        out[path + (name,)] = _saveable(child, h5, str(layer.get("class_name", "")))


#: classes whose sub-objects Keras saves in an order other than sorted by attribute name
_CHILD_ORDER = {"Bidirectional": ("forward_layer", "backward_layer"),
                "MultiHeadAttention": ("query_dense", "key_dense", "value_dense", "output_dense")}


def _saveable(group, h5: H5Reader, class_name: str = "") -> list[np.ndarray]:
    """A saved object's arrays: its own ``vars/0..n``, then its sub-objects' (an RNN's cell, a wrapper's
    layer), as ``layer.weights`` lists them. A group met twice (hard links) is refused."""
    if group is None:
        return []
    if not h5.first_visit(group):
        raise PegasusError(f"model.weights.h5 links group '{h5_name(group)}' more than once (a loop or a shared "
                           "group, which Keras never writes)", where=str(h5.file))
    arrays = []
    own = _group(h5, group, "vars")
    if own is not None:
        arrays += [h5.array(own, str(i)) for i in range(h5.count(own))]
    children = [k for k in h5.groups(group) if k != "vars"]
    order = _CHILD_ORDER.get(class_name)
    children = [c for c in order if c in children] if order else sorted(children)
    for child in children:
        arrays += _saveable(_group(h5, group, child), h5)
    return arrays
