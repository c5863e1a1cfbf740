"""A TorchScript ``SourceGraph`` as plain data, across the sandbox's pipe (pegasus/sandbox.py).

``encode`` runs in the sandboxed child (ts_walk.py); ``decode`` in the pegasus process, on data it must assume a
compromised child wrote: every field is checked for its type, names are printable and bounded, nesting is
bounded, and nothing but ``Ref``, ``SourceNode``, lists, tuples, str, int, float, bool, None and the arrays the
sandbox already checked (referred to by index) comes out. A bad field is one line naming the file.

Values are JSON as they are, except: ``{"ref": name}`` a Ref, ``{"tuple": [...]}`` a tuple, ``{"array": i}``
array i, ``{"node": {...}}`` a SourceNode (the nodes of a ``prim::If``'s blocks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import Ref, SourceGraph

NAME_LIMIT = 4096
DEPTH_LIMIT = 64
_NODE_FIELDS = ("name", "op_type", "inputs", "outputs", "attrs", "domain", "where")


# ------------------------------------------------------------------------------------------ in the child

class _Encoder:
    def __init__(self):
        self.arrays: list[np.ndarray] = []

    def array(self, value) -> dict:
        self.arrays.append(np.asarray(value))
        return {"array": len(self.arrays) - 1}

    def value(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, Ref):
            return {"ref": value.name}
        if isinstance(value, SourceNode):
            return {"node": self.node(value)}
        if isinstance(value, list):
            return [self.value(v, where) for v in value]
        if isinstance(value, tuple):
            return {"tuple": [self.value(v, where) for v in value]}
        if isinstance(value, np.ndarray):
            return self.array(value)
        if type(value).__name__ == "Tensor":
            from pegasus.importers.pytorch.context import to_numpy

            return self.array(to_numpy(value))
        raise PegasusError(f"{where}: an attribute of type {type(value).__name__} cannot be imported")

    def node(self, node: SourceNode) -> dict:
        attrs = {key: self.value(value, node.describe()) for key, value in node.attrs.items()}
        return {"name": node.name, "op_type": node.op_type, "inputs": list(node.inputs),
                "outputs": list(node.outputs), "attrs": attrs, "domain": node.domain, "where": node.where}


def encode(graph: SourceGraph) -> tuple[dict, list[np.ndarray]]:
    """The graph as JSON-able data and its arrays (constants first, in order)."""
    encoder = _Encoder()
    constants = [[name, encoder.array(array)["array"]] for name, array in graph.constants.items()]
    data = {"inputs": [[name, None, dtype] for name, _, dtype in graph.inputs], "constants": constants,
            "nodes": [encoder.node(n) for n in graph.nodes], "outputs": list(graph.outputs)}
    return data, encoder.arrays


# ------------------------------------------------------------------------------------------ in pegasus

class _Decoder:
    def __init__(self, arrays: list[np.ndarray], where: str):
        self.arrays = arrays
        self.where = where

    def bad(self, what: str):
        raise PegasusError(f"the sandboxed TorchScript reader sent a malformed graph ({what})", where=self.where)

    def name(self, value: Any, what: str) -> str:
        if not isinstance(value, str) or len(value) > NAME_LIMIT or not value.isprintable():
            self.bad(f"{what} is not a printable name")
        return value

    def names(self, value: Any, what: str) -> list[str]:
        if not isinstance(value, list):
            self.bad(f"{what} is not a list")
        return [self.name(v, what) for v in value]

    def array(self, index: Any) -> np.ndarray:
        if type(index) is not int or not 0 <= index < len(self.arrays):
            self.bad(f"array index {index!r}")
        return self.arrays[index]

    def value(self, value: Any, depth: int) -> Any:
        if depth > DEPTH_LIMIT:
            self.bad("values nest too deeply")
        if value is None or type(value) in (bool, int, float, str):
            return value
        if isinstance(value, list):
            return [self.value(v, depth + 1) for v in value]
        if not isinstance(value, dict) or len(value) != 1:
            self.bad(f"a value of type {type(value).__name__}")
        (kind, inner), = value.items()
        if kind == "ref":
            return Ref(self.name(inner, "a reference"))
        if kind == "tuple" and isinstance(inner, list):
            return tuple(self.value(v, depth + 1) for v in inner)
        if kind == "array":
            return self.array(inner)
        if kind == "node":
            return self.node(inner, depth + 1)
        self.bad(f"a value tagged {kind[:40]!r}")

    def node(self, data: Any, depth: int = 0) -> SourceNode:
        if not isinstance(data, dict) or set(data) != set(_NODE_FIELDS):
            self.bad("a node without its fields")
        attrs = data["attrs"]
        if not isinstance(attrs, dict):
            self.bad("a node's attributes are not an object")
        return SourceNode(self.name(data["name"], "a node name"), self.name(data["op_type"], "an op type"),
                          self.names(data["inputs"], "a node's inputs"),
                          self.names(data["outputs"], "a node's outputs"),
                          {self.name(k, "an attribute name"): self.value(v, depth) for k, v in attrs.items()},
                          self._text(data["domain"]), self._text(data["where"]))

    def _text(self, value: Any) -> str:
        return "" if value == "" else self.name(value, "a node's place")


def decode(data: Any, arrays: list[np.ndarray], where: str) -> SourceGraph:
    """The SourceGraph the child sent, every field checked (a one-line error naming ``where`` otherwise)."""
    decoder = _Decoder(arrays, where)
    if not isinstance(data, dict) or set(data) != {"inputs", "constants", "nodes", "outputs"}:
        decoder.bad("not a graph")
    inputs = []
    for item in data["inputs"] if isinstance(data["inputs"], list) else decoder.bad("inputs"):
        if not isinstance(item, list) or len(item) != 3 or item[1] is not None:
            decoder.bad("an input")
        inputs.append((decoder.name(item[0], "an input name"), None, decoder.name(item[2], "an input dtype")))
    constants = {}
    for item in data["constants"] if isinstance(data["constants"], list) else decoder.bad("constants"):
        if not isinstance(item, list) or len(item) != 2:
            decoder.bad("a constant")
        constants[decoder.name(item[0], "a constant name")] = decoder.array(item[1])
    nodes = [decoder.node(n) for n in data["nodes"]] if isinstance(data["nodes"], list) else decoder.bad("nodes")
    return SourceGraph(inputs, constants, nodes, decoder.names(data["outputs"], "the outputs"))
