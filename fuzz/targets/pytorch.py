"""PyTorch: ``pt2`` (a ``torch.export.save`` archive imported as `pegasus import pytorch` does, read entirely as
data: the zip through pegasus/safezip.py, the JSON program, the weights' payload configs and storages, pickled
tensors through tensor_pickle.py; then converted and written as NAME.json/.data) and ``pytorch_guard`` (the
archive guard, archive.inspect_model, on TorchScript archives and torch.save files; a torch.save zip's tensors
are also materialised through tensor_pickle.py as the .pt2 reader does). The TorchScript reader itself starts a
sandboxed process per file (~2 s), too slow to run per mutant: it is fuzzed by hand (see the fuzz report).

The structure-aware mutator opens the zip and changes one thing, then writes a consistent zip again (so the
mutant gets past the CRC and header checks to the reader behind them): one value of a JSON member (a number, a
string, a key dropped, a list item duplicated, a container swapped for another kind), a few bytes of a weights
storage or a pickle, or one field of the zip's own headers (a local or central size, a name length, an offset)."""

from __future__ import annotations

import io
import json
import random
import struct
import warnings
import zipfile
from pathlib import Path

from fuzz.mutate import mutate as mutate_bytes
from fuzz.targets import target

_NUMBERS = [0, -1, 1, 2, 3, 7, 2**31, 2**32 + 1, 2**63, -2**63, 10**30, 1e308, 0.5, float("nan"), float("inf")]
_STRINGS = ["", "x", "Tensor", "torch.ops.aten.add.Tensor", "torch.ops.aten.no_such.default", "os.system",
            "../../etc/passwd", "s0", "s0 + 1", "__import__('os')", "float32", "data/weights/../x", "a" * 200]


# ---- JSON ----------------------------------------------------------------------------------------------
def _paths(value, path: tuple, out: list, depth: int = 0) -> None:
    out.append(path)
    if depth > 60:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _paths(item, (*path, key), out, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _paths(item, (*path, index), out, depth + 1)


def _replacement(old, rng: random.Random):
    choice = rng.randrange(8)
    if choice == 0:
        return None
    if choice == 1:
        return [] if isinstance(old, dict) else {}
    if isinstance(old, bool) or choice == 2:
        return rng.choice([True, False, 0, "", [old]])
    if isinstance(old, (int, float)):
        return rng.choice(_NUMBERS + [old + 1, old - 1, -old, old * 1000])
    if isinstance(old, str):
        return rng.choice(_STRINGS + [old[: rng.randrange(len(old) + 1)], old + "_", old * 2])
    if isinstance(old, list) and old:
        return rng.choice([old[:-1], old + [old[-1]], old[::-1], [old[0]] * 1000])
    if isinstance(old, dict) and old:
        keys = list(old)
        dropped = rng.choice(keys)
        return {k: v for k, v in old.items() if k != dropped}
    return rng.choice(_NUMBERS + _STRINGS)


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    """Change one value of the JSON document ``data`` (a leaf, or a container's items)."""
    document = json.loads(data)
    paths: list = []
    _paths(document, (), paths)
    path = rng.choice(paths[1:] or paths)
    if not path:
        return json.dumps(_replacement(document, rng)).encode()
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = _replacement(parent[path[-1]], rng)
    return json.dumps(document, allow_nan=True).encode()


# ---- zip -----------------------------------------------------------------------------------------------
def _rewrite(members: list[tuple[zipfile.ZipInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w") as archive:
        warnings.simplefilter("ignore", UserWarning)          # a duplicated member is one of the mutations
        for info, data in members:
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.compress_type = info.compress_type
            archive.writestr(copy, data)
    return out.getvalue()


def _patch_header(data: bytes, rng: random.Random) -> bytes:
    """One field of a local or central header (or the end record) set to an interesting value."""
    buffer = bytearray(data)
    spots = []
    for signature, fields in ((b"PK\x03\x04", (14, 18, 22, 26, 28)), (b"PK\x01\x02", (16, 20, 24, 28, 30, 42)),
                              (b"PK\x05\x06", (8, 10, 12, 16, 20))):
        start = buffer.find(signature)
        while start >= 0:
            spots += [(start + offset, 2 if offset in (26, 28, 30, 8, 10, 20) or (signature == b"PK\x01\x02"
                                                                                   and offset in (28, 30)) else 4)
                      for offset in fields]
            start = buffer.find(signature, start + 4)
    if not spots:
        raise ValueError("no zip headers")
    pos, size = rng.choice(spots)
    value = rng.choice([0, 1, 0xFFFF, 0xFFFFFFFF, 0x7FFFFFFF, 2**16, len(data), len(data) * 2, 3])
    buffer[pos:pos + size] = struct.pack("<H" if size == 2 else "<I", value & (0xFFFF if size == 2 else 0xFFFFFFFF))
    return bytes(buffer)


def mutate_zip(data: bytes, rng: random.Random) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    if not members:
        raise ValueError("an empty zip")
    action = rng.randrange(10)
    if action == 0:
        return _patch_header(_rewrite(members), rng)
    if action == 1:                                   # drop, duplicate or rename a member
        index = rng.randrange(len(members))
        info, blob = members[index]
        choice = rng.randrange(3)
        if choice == 0:
            del members[index]
        elif choice == 1:
            members.insert(index, (info, blob))
        else:
            folder = info.filename.rsplit("/", 1)[0]
            members[index] = (zipfile.ZipInfo(f"{folder}/{rng.choice(['x', 'data.pkl', '..', 'model.json'])}"), blob)
        return _rewrite(members)
    jsons = [i for i, (info, _) in enumerate(members) if info.filename.endswith(".json")]
    index = rng.choice(jsons) if jsons and action < 7 else rng.randrange(len(members))
    info, blob = members[index]
    if info.filename.endswith(".json"):
        blob = mutate_json(blob, rng)
    elif blob:
        blob = mutate_bytes(blob, rng)
    members[index] = (info, blob)
    return _rewrite(members)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    if data[:4] != b"PK\x03\x04":
        raise ValueError("a bare pickle: mutate its bytes")
    return mutate_zip(data, rng)


# ---- targets -------------------------------------------------------------------------------------------
@target("pt2", structured=_mutate)
def read_pt2(path: Path, scratch: Path) -> None:
    from pegasus.importers.pytorch.loader import import_pytorch
    from pegasus.ir.serialize import save

    save(import_pytorch(path), scratch / "m.json", scratch / "m.data")


@target("pytorch_guard", structured=_mutate)
def guard(path: Path, scratch: Path) -> None:
    from pegasus.errors import PegasusError
    from pegasus.importers.pytorch.archive import inspect_model
    from pegasus.importers.pytorch.pt2_weights import TorchSave
    from pegasus.importers.pytorch.tensor_pickle import PickledTensor

    data = path.read_bytes()
    if data[:4] == b"PK\x03\x04":
        try:                                          # a torch.save zip: its tensors as the .pt2 reader reads them
            saved = TorchSave(str(path), str(path))
            try:
                value = saved.value()
                tensors = [value] if isinstance(value, PickledTensor) else []
                for item in value.values() if isinstance(value, dict) else []:
                    inner = item.values() if isinstance(item, dict) else [item]
                    tensors += [t for t in inner if isinstance(t, PickledTensor)]
                for tensor in tensors:
                    saved.array(tensor, "a tensor")
            finally:
                saved.close()
        except PegasusError:
            pass
    inspect_model(path)
