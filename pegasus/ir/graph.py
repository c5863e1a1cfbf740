"""The graph: layers (nodes) in topological order over named tensors.

Nodes refer to tensors by name, which is what NAME.json, NAME.quantize and dumps use too. An empty
string in ``Node.inputs`` marks an omitted optional input (as in ONNX). The graph owns every tensor's
type; constants carry their value. Passes edit the graph in place and then call ``verify``.

Layer names and tensor names are two separate namespaces, as in ONNX, TFLite, Keras and TorchScript:
tf2onnx calls the last layer ``Identity`` next to the output tensor ``Identity``. New names are drawn
from one namespace only (``unique_tensor_name`` / ``unique_node_name``), so a graph output keeps its
name whatever the layers are called.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pegasus.ir.tensor import Tensor, TensorType


@dataclass
class Node:
    """One layer: a registry op applied to input tensors, producing output tensors."""

    name: str
    op: str
    attrs: Any
    inputs: list[str]
    outputs: list[str]

    def present_inputs(self) -> list[str]:
        return [name for name in self.inputs if name]


@dataclass
class Graph:
    name: str
    nodes: list[Node] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

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
        return _fresh(base, self.tensor_names())

    def unique_node_name(self, base: str) -> str:
        """``base``, or ``base_N`` if a layer has that name (tensor names do not matter)."""
        return _fresh(base, {node.name for node in self.nodes})

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


def _fresh(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"
