"""Darknet: the cfg reader (text), the weights reader (header, float32 values) and the converters that take each
layer's floats from it, then the import passes and NAME.json/.data (what `pegasus import darknet` does).

A corpus item is a folder (m.cfg + m.weights). The cfg is mutated as text (numbers, lines, nesting); the
structure-aware mutator changes one option of the cfg (a size, a count, a layer reference, an activation) or,
for the weights, the header fields or the length."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from fuzz.mutate import mutate
from fuzz.targets import target

_VALUES = ["0", "-1", "-2", "1", "2", "3", "7", "65536", "268435456", "2147483648", "-2147483649", "1e9", "nan",
           "inf", "", "a", "1,2", "-1,-100", "0,0,0", "linear", "mish", "swish", "logistic", "relu6"]


def mutate_darknet(data: bytes, rng: random.Random) -> bytes:
    if not data.lstrip().startswith(b"["):   # the weights: header fields, then the length
        data = bytearray(data)
        if rng.random() < 0.5 and len(data) >= 20:
            field = rng.choice([(0, "<i"), (4, "<i"), (8, "<i"), (12, "<q")])
            data[field[0]:field[0] + struct.calcsize(field[1])] = struct.pack(
                field[1], rng.choice([0, 1, 2, 10, 1000, -1, 2**31 - 1]) if field[1] == "<i" else rng.choice([0, -1]))
        else:
            cut = rng.choice([4, 8, 12, rng.randrange(1, 64)])
            data = data[:-cut] if rng.random() < 0.7 else data + bytes(cut)
        return bytes(data)
    lines = data.decode("utf-8", "replace").split("\n")
    options = [i for i, line in enumerate(lines) if "=" in line]
    index = rng.choice(options)
    key = lines[index].split("=", 1)[0]
    action = rng.randrange(4)
    if action == 0:
        lines[index] = f"{key}={rng.choice(_VALUES)}"
    elif action == 1:
        del lines[index]
    elif action == 2:   # a section repeated or dropped
        headers = [i for i, line in enumerate(lines) if line.startswith("[")][1:]
        start = rng.choice(headers)
        end = next((i for i in headers if i > start), len(lines))
        block = lines[start:end]
        lines[start:end] = block * 2 if rng.random() < 0.5 else []
    else:
        lines.insert(rng.randrange(1, len(lines)), f"{rng.choice(['groups', 'stride', 'dilation', 'pad', 'from', 'layers', 'batch_normalize', 'stride_x', 'size', 'reverse', 'flatten'])}={rng.choice(_VALUES)}")  # noqa: E501
    text = "\n".join(lines).encode()
    return mutate(text, rng, True, rounds=1) if rng.random() < 0.2 else text


@target("darknet", text=True, structured=mutate_darknet)
def read_darknet(path: Path, scratch: Path) -> None:
    from pegasus.importers.darknet.loader import import_darknet
    from pegasus.ir.serialize import save

    save(import_darknet(path / "m.cfg", path / "m.weights"), scratch / "m.json", scratch / "m.data")
