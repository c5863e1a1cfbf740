"""TensorFlow: frozen GraphDefs (``tf_graphdef``) and SavedModel folders (``tf_savedmodel``: saved_model.pb, the
checkpoint index and its data shard), each imported as `pegasus import tensorflow` does and written as
NAME.json/.data.

The structure-aware mutator parses a protobuf (GraphDef, SavedModel), picks one field anywhere in it (a dim, a
dtype, a tensor's bytes, an attribute, a node name or input, a count) and changes it, or drops, duplicates or
clears a repeated field, then serialises; for a checkpoint index (a LevelDB table) it changes one field of a
BundleEntryProto or of the header (or drops, duplicates, renames an entry) and writes the table again with valid
block checksums, so the mutant gets past the table's own checks to the checkpoint reader behind them."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from fuzz.mutate import INTERESTING_32, INTERESTING_64
from fuzz.targets import target

#: every corpus graph reads its input from ``x`` and writes ``y``; a bool placeholder ``training`` (the cond
#: graphs) is fed False
GRAPH_INPUTS, GRAPH_OUTPUTS = ["x"], ["y"]
_INTS = [0, 1, -1, 2, 3, -5, 7, 2**31 - 1, -2**31, 2**32, 2**40, 2**62, 2**63 - 1, -2**63]
_FLOATS = [0.0, -0.0, 1e-45, 1e38, 3.4e38, float("nan"), float("inf"), float("-inf"), -1.0]
_STRINGS = ["", "x", "y", "x:1", "^x", "y:7", "Const", "NoSuchOp", "a/../b", "\x00", "x" * 300, "training",
            "serving_default", "VarHandleOp", "RestoreV2", "StatefulPartitionedCall", "conv/kernel"]


# ---- protobuf fields -----------------------------------------------------------------------------------
def _slots(message, out: list, depth: int = 0) -> None:
    """Every (message, field descriptor) set in ``message`` and its sub-messages, map values included."""
    if depth > 40:
        return
    for field, value in message.ListFields():
        out.append((message, field))
        if field.type != field.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            if value_field.type == value_field.TYPE_MESSAGE:
                for item in value.values():
                    _slots(item, out, depth + 1)
        elif field.is_repeated:
            for item in value:
                _slots(item, out, depth + 1)
        else:
            _slots(value, out, depth + 1)


def _new_scalar(field, old, rng: random.Random):
    kinds = field.cpp_type
    if kinds in (field.CPPTYPE_INT32, field.CPPTYPE_INT64, field.CPPTYPE_UINT32, field.CPPTYPE_UINT64):
        bits = 32 if kinds in (field.CPPTYPE_INT32, field.CPPTYPE_UINT32) else 64
        signed = kinds in (field.CPPTYPE_INT32, field.CPPTYPE_INT64)
        value = rng.choice(_INTS + INTERESTING_32 + INTERESTING_64 + [old + 1, old - 1, old * 2])
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        return min(max(value, low), high)
    if kinds == field.CPPTYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values] + [0, 99, 1000, -1])
    if kinds in (field.CPPTYPE_FLOAT, field.CPPTYPE_DOUBLE):
        return rng.choice(_FLOATS)
    if kinds == field.CPPTYPE_BOOL:
        return not old
    if field.type == field.TYPE_STRING:
        return rng.choice(_STRINGS + [old[: rng.randrange(len(old) + 1)], old + ":1", old * 2])
    data = bytearray(old)                                   # bytes: a tensor's content, a serialised proto
    action = rng.randrange(4)
    if action == 0 or not data:
        return bytes(data) + bytes(rng.choice([1, 4, 64, 4096]))
    if action == 1:
        return bytes(data[: rng.randrange(len(data))])
    if action == 2:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    pos = rng.randrange(max(1, len(data) - 3)) & ~3
    data[pos:pos + 4] = struct.pack("<f", rng.choice(_FLOATS))
    return bytes(data[: len(old)])


def mutate_message(message, rng: random.Random) -> None:
    """Change one field of ``message`` (in place)."""
    slots: list = []
    _slots(message, slots)
    if not slots:                                   # an empty sub-message: nothing to change
        return
    owner, field = rng.choice(slots)
    value = getattr(owner, field.name)
    if field.is_repeated:
        count = len(value)
        action = rng.randrange(5)
        if action == 0 or count == 0:
            owner.ClearField(field.name)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = rng.choice(list(value))
            del value[key]
        elif action == 1:
            del value[rng.randrange(count)]
        elif action == 2:
            item = value[rng.randrange(count)]
            if field.type == field.TYPE_MESSAGE:
                value.add().CopyFrom(item)
            else:
                value.append(item)
        elif field.type == field.TYPE_MESSAGE:
            mutate_message(value[rng.randrange(count)], rng)
        else:
            index = rng.randrange(count)
            value[index] = _new_scalar(field, value[index], rng)
        return
    if field.type == field.TYPE_MESSAGE:
        if rng.random() < 0.2:
            owner.ClearField(field.name)
        else:
            mutate_message(value, rng)
        return
    setattr(owner, field.name, _new_scalar(field, value, rng))


# ---- checkpoint index (a LevelDB table) -----------------------------------------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def write_table(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table of ``entries`` (one data block, a restart at every entry), checksums valid."""
    from pegasus.importers.tensorflow.crc32c import crc32c, masked
    from pegasus.importers.tensorflow.sstable import MAGIC

    def block(items: list[tuple[bytes, bytes]]) -> bytes:
        body, restarts = bytearray(), []
        for key, value in items:
            restarts.append(len(body))
            body += _varint(0) + _varint(len(key)) + _varint(len(value)) + key + value
        restarts = restarts or [0]
        body += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
        return bytes(body)

    out = bytearray()

    def append(content: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(content))
        out.extend(content + b"\0" + struct.pack("<I", masked(crc32c(content + b"\0"))))
        return handle

    data = append(block(entries))
    meta = append(block([]))
    index = append(block([(entries[-1][0] if entries else b"", data)]))
    footer = meta + index
    out += footer + bytes(40 - len(footer)) + struct.pack("<Q", MAGIC)
    return bytes(out)


def _mutate_index(data: bytes, rng: random.Random) -> bytes:
    from pegasus.importers.tensorflow.sstable import read_table
    from pegasus.importers.tensorflow.tfapi import tensorflow

    api = tensorflow()
    entries = read_table(data, "index")
    index = rng.randrange(len(entries))
    key, value = entries[index]
    action = rng.randrange(6)
    if action == 0:
        del entries[index]
    elif action == 1:
        entries.insert(index, (key, value))
    elif action == 2:
        entries[index] = (rng.choice([b"", key + b"x", key[:-1], b"\xff\xfe", key * 2]), value)
    else:
        message = (api.BundleHeaderProto if key == b"" else api.BundleEntryProto)()
        message.ParseFromString(value)
        mutate_message(message, rng)
        entries[index] = (key, message.SerializeToString())
    return write_table(entries)


def _structured(kind: str):
    def mutate(data: bytes, rng: random.Random) -> bytes:
        from pegasus.importers.tensorflow.sstable import MAGIC
        from pegasus.importers.tensorflow.tfapi import tensorflow

        if len(data) >= 8 and struct.unpack("<Q", data[-8:])[0] == MAGIC:
            return _mutate_index(data, rng)
        if kind == "graph" or data[:1] == b"\x0a" or data[:1] == b"\x08":
            message = (tensorflow().GraphDef if kind == "graph" else tensorflow().SavedModel)()
            message.ParseFromString(data)
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                mutate_message(message, rng)
            return message.SerializeToString()
        raise ValueError("a data shard: mutate its bytes")
    return mutate


def _save(graph, scratch: Path) -> None:
    from pegasus.ir.serialize import save

    save(graph, scratch / "m.json", scratch / "m.data")


@target("tf_graphdef", structured=_structured("graph"))
def read_graphdef(path: Path, scratch: Path) -> None:
    import numpy as np

    from pegasus.importers.tensorflow.loader import import_tensorflow
    from pegasus.importers.tensorflow.reader import read_tensorflow

    model = read_tensorflow(path)
    training = model.producer("training")
    predef = {"training": np.array(False)} if training is not None and training.op_type == "Placeholder" else None
    _save(import_tensorflow(model, inputs=GRAPH_INPUTS, outputs=GRAPH_OUTPUTS, predef=predef), scratch)


@target("tf_savedmodel", structured=_structured("saved"))
def read_saved_model(path: Path, scratch: Path) -> None:
    from pegasus.importers.tensorflow.loader import import_tensorflow

    _save(import_tensorflow(path), scratch)
