"""The graph: layers (nodes) in topological order over named tensors.

Nodes refer to tensors by name, which is what NAME.json, NAME.quantize and dumps use too. An empty
string in ``Node.inputs`` marks an omitted optional input (as in ONNX). The graph owns every tensor's
type; constants carry their value. Passes edit the graph in place and then call ``verify``.

Layer names and tensor names are two separate namespaces, as in ONNX, TFLite, Keras and TorchScript:
tf2onnx calls the last layer ``Identity`` next to the output tensor ``Identity``. New names are drawn
from one namespace only (``unique_tensor_name`` / ``unique_node_name``), so a graph output keeps its
name whatever the layers are called.

Fresh names must stay cheap in a graph of 100k layers (every importer asks for one per layer): the names in
use are indexed once and the index kept up to date while the graph only grows at the end (appends to
``nodes``, ``inputs``, ``outputs``); any other edit (a layer renamed or rewired, a list reassigned, a node
removed) marks every index stale (``_EDITS``), and the next fresh name re-indexes that graph in one sweep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pegasus.ir.tensor import Tensor, TensorType

_EDITS = [0]   # bumped by every edit the name indexes cannot follow (see the module docstring)


def _edited() -> None:
    _EDITS[0] += 1


class _EditedList(list):
    """A list whose every change counts as an edit (a layer's inputs and outputs)."""

    def _edit(method):  # noqa: N805 - wraps list's own methods
        def changed(self, *args):
            _edited()
            return method(self, *args)
        return changed

    append = _edit(list.append)
    extend = _edit(list.extend)
    insert = _edit(list.insert)
    remove = _edit(list.remove)
    pop = _edit(list.pop)
    clear = _edit(list.clear)
    sort = _edit(list.sort)
    reverse = _edit(list.reverse)
    __setitem__ = _edit(list.__setitem__)
    __delitem__ = _edit(list.__delitem__)
    __iadd__ = _edit(list.__iadd__)
    __imul__ = _edit(list.__imul__)


class _GrowingList(_EditedList):
    """A list that may grow at the end unseen (the index reads the new tail); other changes are edits."""

    append = list.append
    extend = list.extend
    __iadd__ = list.__iadd__


@dataclass
class Node:
    """One layer: a registry op applied to input tensors, producing output tensors."""

    name: str
    op: str
    attrs: Any
    inputs: list[str]
    outputs: list[str]

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("inputs", "outputs") and not isinstance(value, _EditedList):
            value = _EditedList(value)
        if key in ("name", "inputs", "outputs") and "outputs" in self.__dict__:
            _edited()   # a built layer renamed or rewired
        object.__setattr__(self, key, value)

    def present_inputs(self) -> list[str]:
        return [name for name in self.inputs if name]


class _NameIndex:
    """The node names and the tensor names layers and graph inputs/outputs mention, as of edit count
    ``edits`` and the first ``seen`` items of the lists it read; ``suffix`` remembers, per base name, the
    last ``base_N`` found taken (names are only added while the index holds)."""

    def __init__(self, graph: Graph):
        self.edits = _EDITS[0]
        self.lists = (graph.nodes, graph.inputs, graph.outputs)
        self.seen = [0, 0, 0]
        self.nodes: set[str] = set()
        self.tensors: set[str] = set()
        self.suffix: dict[tuple[bool, str], int] = {}
        self.update()

    def holds(self, graph: Graph) -> bool:
        nodes, inputs, outputs = self.lists
        return (self.edits == _EDITS[0] and nodes is graph.nodes and inputs is graph.inputs
                and outputs is graph.outputs)   # the lists can only have grown: anything else is an edit

    def update(self) -> None:
        nodes, inputs, outputs = self.lists
        for node in nodes[self.seen[0]:]:
            self.nodes.add(node.name)
            self.tensors.update(node.inputs)
            self.tensors.update(node.outputs)
        self.tensors.update(inputs[self.seen[1]:])
        self.tensors.update(outputs[self.seen[2]:])
        self.seen = [len(nodes), len(inputs), len(outputs)]


@dataclass
class Graph:
    name: str
    nodes: list[Node] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("nodes", "inputs", "outputs"):
            value = value if isinstance(value, _GrowingList) else _GrowingList(value)
            _edited()
        object.__setattr__(self, key, value)

    def __getstate__(self) -> dict:   # copies and pickles leave the index behind
        return {k: v for k, v in self.__dict__.items() if k != "_index"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def _names(self) -> _NameIndex:
        index = self.__dict__.get("_index")
        if index is None or not index.holds(self):
            index = _NameIndex(self)
            object.__setattr__(self, "_index", index)
        else:
            index.update()
        return index

    # ---- tensors -------------------------------------------------------------------------------
    def type_of(self, name: str) -> TensorType:
        return self.tensors[name].type

    def value_of(self, name: str) -> np.ndarray | None:
        tensor = self.tensors.get(name)
        return None if tensor is None else tensor.data

    def tensor_names(self) -> set[str]:
        """Every tensor name in use: typed tensors, graph inputs and outputs, and layers' inputs and outputs."""
        names = set(self.tensors) | set(self.inputs) | set(self.outputs)
        for node in self.nodes:
            names.update(node.inputs)
            names.update(node.outputs)
        names.discard("")
        return names

    def unique_tensor_name(self, base: str) -> str:
        """``base``, or ``base_N`` if a tensor (or a graph output still to be produced) has that name."""
        index = self._names()
        return _fresh(base, lambda name: name in self.tensors or name in index.tensors, index.suffix, True)

    def unique_node_name(self, base: str) -> str:
        """``base``, or ``base_N`` if a layer has that name (tensor names do not matter)."""
        index = self._names()
        return _fresh(base, index.nodes.__contains__, index.suffix, False)

    def add_constant(self, base: str, array: np.ndarray) -> str:
        name = self.unique_tensor_name(base)
        self.tensors[name] = Tensor.constant(name, array)
        return name

    def constants(self) -> list[Tensor]:
        """Constants still used by some node or output, in first-use order (deterministic)."""
        seen: dict[str, Tensor] = {}
        for name in [i for n in self.nodes for i in n.inputs] + self.outputs:
            tensor = self.tensors.get(name)
            if tensor is not None and tensor.is_constant and name not in seen:
                seen[name] = tensor
        return list(seen.values())

    # ---- structure -----------------------------------------------------------------------------
    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        uses: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.present_inputs():
                uses.setdefault(name, []).append(node)
        return uses

    def rename_tensor(self, old: str, new: str) -> None:
        """Give tensor ``old`` the name ``new`` everywhere: its entry, its producer, its readers, the graph's
        inputs and outputs."""
        if old in self.tensors:
            self.tensors[new] = replace(self.tensors.pop(old), name=new)
        for node in self.nodes:
            node.outputs = [new if name == old else name for name in node.outputs]
        self.inputs = [new if name == old else name for name in self.inputs]
        self.rename_uses(old, new)

    def rename_uses(self, old: str, new: str) -> None:
        """Make every reader of tensor ``old`` (nodes and graph outputs) read ``new`` instead."""
        for node in self.nodes:
            node.inputs = [new if name == old else name for name in node.inputs]
        self.outputs = [new if name == old else name for name in self.outputs]

    def rename_mentions(self, mapping: dict[str, str]) -> None:
        """Apply ``mapping`` (old name -> new name; no new name is itself a key) to every layer's inputs and
        outputs and the graph's inputs and outputs in one sweep (tensor entries are the caller's): many
        ``rename_uses`` at the cost of one."""
        if not mapping:
            return
        for node in self.nodes:
            if any(name in mapping for name in node.inputs):
                node.inputs = [mapping.get(name, name) for name in node.inputs]
            if any(name in mapping for name in node.outputs):
                node.outputs = [mapping.get(name, name) for name in node.outputs]
        if any(name in mapping for name in self.inputs):
            self.inputs = [mapping.get(name, name) for name in self.inputs]
        if any(name in mapping for name in self.outputs):
            self.outputs = [mapping.get(name, name) for name in self.outputs]

    def remove_nodes(self, doomed: Iterable[Node]) -> None:
        ids = {id(node) for node in doomed}
        self.nodes = [node for node in self.nodes if id(node) not in ids]

    def prune(self) -> bool:
        """Drop nodes whose outputs nobody reads and tensors nobody mentions; True if anything went."""
        live = set(self.outputs)
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(out in live for out in node.outputs):
                kept.append(node)
                live.update(node.present_inputs())
        changed = len(kept) != len(self.nodes)
        self.nodes = kept[::-1]
        mentioned = live | set(self.inputs) | {o for n in self.nodes for o in n.outputs}
        for name in [t for t in self.tensors if t not in mentioned]:
            del self.tensors[name]
            changed = True
        return changed

    def toposort(self) -> None:
        """Order nodes so each comes after the producers of its inputs (stable for sorted input)."""
        producers = self.producers()
        order: list[Node] = []
        state: dict[int, int] = {}
        for root in self.nodes:
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                if state.get(id(node)) == 2:
                    continue
                if expanded:
                    state[id(node)] = 2
                    order.append(node)
                    continue
                if state.get(id(node)) == 1:
                    raise ValueError(f"graph has a cycle through node '{node.name}'")
                state[id(node)] = 1
                stack.append((node, True))
                for name in reversed(node.present_inputs()):
                    parent = producers.get(name)
                    if parent is not None and state.get(id(parent)) != 2:
                        stack.append((parent, False))
        self.nodes = order


def _fresh(base: str, taken, suffix: dict[tuple[bool, str], int], kind: bool) -> str:
    """``base`` or the first ``base_N`` not ``taken``; ``suffix`` holds the last N found taken for ``base``."""
    if not taken(base):
        return base
    i = suffix.get((kind, base), 0) + 1
    while taken(f"{base}_{i}"):
        i += 1
    suffix[(kind, base)] = i - 1
    return f"{base}_{i}"
