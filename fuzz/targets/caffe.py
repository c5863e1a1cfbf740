"""Caffe: the prototxt reader (protobuf text format) and the caffemodel reader (binary protobuf, each layer's
blobs), the converters, the import passes and NAME.json/.data (what `pegasus import caffe` does).

A corpus item is a folder (m.prototxt + m.caffemodel). The prototxt is mutated as text; the structure-aware
mutator parses either file with pegasus's own Caffe messages and changes one scalar field (a dim, a count, a
kernel size, an enum, a name) or one repeated field (a blob's data cut or grown, a dim added or removed), then
serialises it again in the file's own form."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor

from fuzz.targets import target

_INTS = [0, 1, 2, 3, -1, 7, 255, 2**20, 2**27, 2**31 - 1, -(2**31)]
_FLOATS = [0.0, -1.0, 1e-45, 1e38, float("nan"), float("inf"), -float("inf"), 0.5]
_STRINGS = ["", "data", "conv1", "prob", "sum", "x" * 300, "../x"]


def _fields(message: Any, found: list) -> list:
    for field, value in message.ListFields():
        found.append((message, field))
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for inner in (value if field.is_repeated else [value]):
                _fields(inner, found)
    return found


def _scalar(field: FieldDescriptor, rng: random.Random) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values] + [0])
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(_FLOATS)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if field.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(_STRINGS)
    unsigned = field.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED32,
                              FieldDescriptor.TYPE_FIXED64)
    value = rng.choice(_INTS)
    if unsigned:
        value = abs(value) % 2**32
    return value


def _change(message: Any, field: FieldDescriptor, rng: random.Random) -> None:
    repeated = field.is_repeated
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if repeated:
            items = getattr(message, field.name)
            if rng.random() < 0.5 or len(items) < 2:
                items.add().CopyFrom(items[rng.randrange(len(items))])
            else:
                del items[rng.randrange(len(items))]
        else:
            message.ClearField(field.name)
        return
    if repeated:
        items = getattr(message, field.name)
        action = rng.randrange(3)
        if action == 0 and items:
            del items[rng.randrange(len(items)):]
        elif action == 1:
            items.append(_scalar(field, rng))
        elif items:
            items[rng.randrange(len(items))] = _scalar(field, rng)
        return
    if rng.random() < 0.2:
        message.ClearField(field.name)
    else:
        setattr(message, field.name, _scalar(field, rng))


def mutate_caffe(data: bytes, rng: random.Random) -> bytes:
    from pegasus.importers.caffe.proto import message_classes

    net = message_classes()["NetParameter"]()
    text = not data.startswith(b"\n") and data.lstrip()[:1].isalpha()
    if text:
        text_format.Parse(data.decode("utf-8"), net)
    else:
        net.ParseFromString(data)
    found = _fields(net, [])
    message, field = rng.choice(found)
    _change(message, field, rng)
    return text_format.MessageToString(net).encode() if text else net.SerializeToString()


@target("caffe", text=True, structured=mutate_caffe)
def read_caffe(path: Path, scratch: Path) -> None:
    from pegasus.importers.caffe.loader import import_caffe
    from pegasus.ir.serialize import save

    save(import_caffe(path / "m.prototxt", path / "m.caffemodel"), scratch / "m.json", scratch / "m.data")
