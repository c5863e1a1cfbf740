"""pegasus's own model files: NAME.json (the graph: layers, attributes, tensors, constants' offsets) and
NAME.data (the weights), read by ``pegasus.ir.serialize.load`` — what every command after ``import`` reads.

A corpus item is a folder holding model.json and model.data; the mutants change model.json (text mutations,
or the structure-aware mutator: parse, set one value anywhere in the document to a value of another kind or
an extreme one, serialise)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from fuzz.targets import target

VALUES = [None, True, 0, -1, 1, 2**31, 2**63, 10**30, 1e308, -0.5, "", "float32", "int8", "Conv", "x", [], {},
          [0], [-1], [2**40, 2**40], {"offset": 0, "bytes": 2**40}, [[]]]


def _leaves(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, (*path, index))


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    doc = json.loads(data)
    for _ in range(rng.choice([1, 1, 2])):
        paths = [p for p in _leaves(doc) if p]
        path = rng.choice(paths)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = rng.randrange(4)
        if action == 0 or not isinstance(parent, (list, dict)):
            parent[path[-1]] = rng.choice(VALUES)
        elif action == 1:
            del parent[path[-1]]
        elif action == 2 and isinstance(parent[path[-1]], int) and not isinstance(parent[path[-1]], bool):
            parent[path[-1]] = parent[path[-1]] + rng.choice([-1, 1, 63, -64, 2**32])
        elif isinstance(parent, dict):  # a tensor's entry renamed, or a name pointing elsewhere
            value = parent.pop(path[-1])
            parent[rng.choice([str(path[-1]) + "_", "", rng.choice(list(parent) or ["k"])])] = value
        else:
            parent.insert(rng.randrange(len(parent) + 1), parent[path[-1]])
    return json.dumps(doc, indent=1).encode()


@target("ir", text=True, mutable="*.json", structured=mutate_json)
def read_ir(path: Path, scratch: Path) -> None:
    from pegasus.ir.serialize import load, save

    save(load(path / "model.json", path / "model.data"), scratch / "m.json", scratch / "m.data")
