"""The tensors of a torch.export archive (and of any ``torch.save`` zip), read as data.

``torch.export.save`` (torch 2.13) writes each parameter, buffer and tensor constant as the raw bytes of its
storage (``data/weights/weight_N``, ``data/constants/tensor_N``) and describes it in a payload config
(``data/weights/model_weights_config.json``: name -> path_name, use_pickle, tensor_meta with dtype, sizes,
strides and storage offset); a tensor subclass is pickled instead (``use_pickle``: a ``torch.save`` zip).
Older archives hold the whole state_dict as one ``torch.save`` zip (``data/weights/model.pt``, or
``serialized_state_dict.pt`` at the top of a torch 2.7 archive). Every member is found through
``Archive.member`` (the archive's folder plus a plain relative path), every pickle read by tensor_pickle.py,
and every array built by ``strided_array`` (sizes checked against the budget and the bytes present).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from pegasus import limits
from pegasus.errors import PegasusError
from pegasus.importers.pytorch import tensor_pickle
from pegasus.importers.pytorch.pt2_json import Reader
from pegasus.importers.pytorch.tensor_pickle import ITEMSIZE, PickledTensor
from pegasus.safezip import Archive, open_archive


def read_json(archive: Archive, name: str, what: str) -> Any:
    """The JSON value of member ``name`` (a one-line error for bytes that are not JSON)."""
    data = archive.read(name, what)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PegasusError(f"{archive.relative(name)} is not valid JSON ({str(exc)[:80]})",
                           where=archive.where) from None


class TorchSave:
    """A ``torch.save`` zip (nested in a .pt2 or a file of its own): its pickle's value, tensors materialised on
    request from its ``data/<key>`` storages."""

    def __init__(self, source: bytes | str, where: str):
        self.archive = open_archive(source, where)
        self.where = where
        if not self.archive.root or not self.archive.has(f"{self.archive.root}/data.pkl"):
            raise PegasusError("a zip archive that is not a torch.save file (no data.pkl)", where=where)
        order = f"{self.archive.root}/byteorder"
        if self.archive.has(order) and self.archive.read(order, "byteorder").strip() != b"little":
            raise PegasusError("tensors saved big-endian are not read", where=where)
        self.pickle = self.archive.read(self.archive.member("data.pkl"), "data.pkl")

    def value(self) -> Any:
        return tensor_pickle.load(self.pickle, f"{self.where}: data.pkl")

    def array(self, tensor: PickledTensor, what: str) -> np.ndarray:
        storage = self.archive.read(self.archive.member("data", tensor.storage.key, what=what), what)
        return tensor_pickle.materialize(tensor, storage, what, self.where)

    def close(self) -> None:
        self.archive.close()


def state_dict(blob: bytes, where: str, wanted: set[str]) -> dict[str, np.ndarray]:
    """The tensors named in ``wanted`` of a pickled state_dict (a ``torch.save`` zip's bytes)."""
    saved = TorchSave(blob, where)
    try:
        value = saved.value()
        if not isinstance(value, dict):
            raise PegasusError(f"the state_dict is {type(value).__name__}, not a dict of tensors", where=where)
        found = {}
        for key in wanted & set(value):
            if not isinstance(value[key], PickledTensor):
                raise PegasusError(f"'{key}' in the state_dict is not a tensor", where=where)
            found[key] = saved.array(value[key], key)
        return found
    finally:
        saved.close()


def payloads(archive: Archive, folder: str, config_name: str, wanted: set[str]) -> dict[str, np.ndarray]:
    """The tensors named in ``wanted`` that payload config ``data/<folder>/<config_name>`` describes."""
    member = archive.member("data", folder, config_name, what="payload config")
    reader = Reader(archive.where, archive.relative(member))
    config = reader.obj(reader.get(reader.obj(read_json(archive, member, "payload config"), "the file"), "config",
                                   "the file"), "config")
    found = {}
    for name in wanted & set(config):
        what = f"'{name}'"
        entry = reader.obj(config[name], what)
        path_name = reader.str(reader.get(entry, "path_name", what), f"{what} path_name")
        if folder == "constants" and not path_name.startswith("tensor_"):
            raise PegasusError(f"constant {what} is a pickled Python object ({path_name[:40]}), not a tensor: refused",
                               where=archive.where)
        source = archive.member("data", folder, path_name, what=what)
        if reader.bool(reader.get(entry, "use_pickle", what, False), f"{what} use_pickle"):
            found[name] = _pickled(archive, source, what)
        else:
            found[name] = _raw(archive, source, reader, reader.get(entry, "tensor_meta", what), what)
    return found


def _pickled(archive: Archive, member: str, what: str) -> np.ndarray:
    where = f"{archive.where}: {archive.relative(member)}"
    saved = TorchSave(archive.read(member, what), where)
    try:
        value = saved.value()
        if not isinstance(value, PickledTensor):
            raise PegasusError(f"{what} is a pickled {type(value).__name__}, not a tensor", where=where)
        return saved.array(value, what)
    finally:
        saved.close()


def _raw(archive: Archive, member: str, reader: Reader, meta: Any, what: str) -> np.ndarray:
    """A tensor stored as its storage's raw bytes, shaped by its tensor_meta (as torch's as_strided would)."""
    dtype, sizes, strides, offset = reader.strided(meta, f"{what} tensor_meta")
    if dtype not in ITEMSIZE:
        raise PegasusError(f"{what} has dtype {dtype}, which pegasus does not read", where=archive.where)
    nbytes = archive.size(member)
    if nbytes == 0:  # torch writes no bytes for a tensor without data (fake or empty) and reads zeros of its size
        limits.check_tensor(sizes, ITEMSIZE[dtype], what, archive.where)
        return np.zeros(sizes, {"bfloat16": "float32"}.get(dtype, dtype))
    if nbytes % ITEMSIZE[dtype]:
        raise PegasusError(f"{what}: {nbytes} bytes are not a whole number of {dtype} elements", where=archive.where)
    storage, numel = archive.read(member, what), nbytes // ITEMSIZE[dtype]
    return tensor_pickle.strided_array(storage, dtype, numel, offset, sizes, strides, what, archive.where)
