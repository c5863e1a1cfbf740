"""Builds a graph node by node, inferring types and folding constants as it goes.

Every importer emits registry ops through ``GraphBuilder.emit``. Each new node's output types are
inferred at once, and when all its inputs are constants the node is evaluated with the reference
kernel and replaced by its result. That is what makes shape chains (Shape → Gather → Concat →
Reshape) collapse during import, so converters can ask for a parameter with ``constant()``.

Every result folding is about to compute is held to the tensor budget of ``pegasus.limits`` first (its
type comes from the shape rule, which allocates nothing): a tiny file may declare a ConstantOfShape, Expand,
Tile or Pad whose result would take the machine's memory, and folding must refuse it, not allocate it.

Layer and tensor names are separate namespaces: a layer may be called like any tensor. A tensor the
builder named itself (an extra output, a constant) steps aside when a later layer's output is given
that name explicitly, so the model's own names always win.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pegasus.errors import NeedsConstantError, PegasusError
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.limits import check_tensor
from pegasus.ops.registry import OpDef, ShapeError, get_op, make_attrs


def infer_node(opdef: type[OpDef], attrs: Any, types: Sequence[TensorType | None], node: str) -> list[TensorType]:
    """Run an op's shape rule, turning a mismatch into a user-facing shape-conflict error."""
    try:
        return opdef.infer(attrs, types)
    except (ShapeError, ValueError, IndexError, OverflowError) as exc:
        shapes = ", ".join("-" if t is None else str(t) for t in types)
        raise PegasusError(f"shape conflict at layer '{node}' ({opdef.name}) with inputs ({shapes}): {exc}") from exc


def check_outputs(opdef: type[OpDef], types: Sequence[TensorType], node: str) -> None:
    """Refuse, before the kernel runs, to compute outputs larger than the tensor budget."""
    for index, ttype in enumerate(types):
        output = f" output {index}" if len(types) > 1 else ""
        check_tensor(ttype.shape, ttype.dtype.itemsize, f"layer '{node}' ({opdef.name}){output}")


def evaluate(opdef: type[OpDef], attrs: Any, values: Sequence[np.ndarray | None], node: str = "") -> list[np.ndarray]:
    """Run the reference kernel on constant inputs (used for folding). Constants come from the model file, so a
    value the kernel cannot take (a Gather index past the end) is the file's error, reported with the layer."""
    try:
        return [np.asarray(v) for v in opdef.reference(attrs, values)]
    except (IndexError, ValueError, OverflowError, ZeroDivisionError) as exc:
        raise PegasusError(f"layer '{node}' ({opdef.name}) cannot be computed from its constant inputs: "
                           f"{exc}") from exc


def fold_arguments(graph: Graph, opdef: type[OpDef], inputs: Sequence[str]) -> list[np.ndarray | None] | None:
    """The reference kernel's arguments when a layer can be evaluated at compile time, else None.

    Foldable: every present input is a constant, or the op reads only shapes (``needs_values`` False),
    whose run-time inputs are then stood in for by ``ShapeOnly`` (no memory: the shape of a huge input
    costs nothing).
    """
    tensors = [graph.tensors[n] if n else None for n in inputs]
    if opdef.needs_values and not all(t.is_constant for t in tensors if t is not None):
        return None
    return [None if t is None else t.data if t.is_constant else ShapeOnly(t.type) for t in tensors]


class ShapeOnly:
    """What a shape-only kernel (``needs_values`` False) reads of a run-time input: shape, size, ndim, dtype."""

    def __init__(self, ttype: TensorType):
        self.shape, self.size, self.ndim, self.dtype = ttype.shape, ttype.size, ttype.rank, ttype.dtype.numpy


class GraphBuilder:
    """Accumulates nodes into ``graph``; ``fold`` turns constant-input nodes into constants."""

    def __init__(self, graph: Graph, *, fold: bool = True):
        self.graph = graph
        self.fold = fold
        self._invented: set[str] = set()  # tensor names this builder made up (not the model's)

    # ---- tensors -------------------------------------------------------------------------------
    def add_input(self, name: str, ttype: TensorType) -> None:
        self.graph.tensors[name] = Tensor(name, ttype)
        self.graph.inputs.append(name)

    def add_constant(self, base: str, array: np.ndarray) -> str:
        name = self.graph.add_constant(base, np.asarray(array))
        self._invented.add(name)
        return name

    def _claim(self, name: str) -> None:
        """Free tensor name ``name`` for an output the caller named: a tensor this builder invented under that
        name is renamed (a name the model itself uses twice is left for ``verify`` to report)."""
        if name in self._invented and name in self.graph.tensor_names():
            self._invented.discard(name)
            aside = self.graph.unique_tensor_name(name)
            self.graph.rename_tensor(name, aside)
            self._invented.add(aside)

    def set_constant(self, name: str, array: np.ndarray) -> None:
        self.graph.tensors[name] = Tensor.constant(name, np.asarray(array))

    def type_of(self, name: str) -> TensorType:
        return self.graph.type_of(name)

    def has(self, name: str) -> bool:
        return name in self.graph.tensors

    def value(self, name: str) -> np.ndarray | None:
        return self.graph.value_of(name) if name else None

    def constant(self, name: str, *, node: str, op: str, what: str) -> np.ndarray:
        """The compile-time value of tensor ``name``, or an error naming the node and parameter."""
        value = self.value(name)
        if value is None:
            raise NeedsConstantError(name, node, op, what)
        return value

    # ---- nodes ---------------------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[str], attrs: Any = None, *, name: str,
             outputs: Sequence[str] | None = None, num_outputs: int = 1) -> list[str]:
        """Append ``op`` applied to ``inputs``; returns the output tensor names."""
        opdef = get_op(op)
        if attrs is None:
            attrs = make_attrs(opdef)
        elif isinstance(attrs, dict):
            attrs = make_attrs(opdef, **attrs)
        lo, hi = opdef.num_inputs
        given = len(inputs)
        if given < lo or (hi is not None and given > hi):
            raise PegasusError(f"layer '{name}' ({op}) takes {lo}..{hi if hi is not None else 'n'} inputs, got {given}")
        node_name = self.graph.unique_node_name(name)
        if outputs is None:
            outputs = [self.graph.unique_tensor_name(node_name if num_outputs == 1 else f"{node_name}_out{i}")
                       for i in range(num_outputs)]
            self._invented.update(outputs)
        else:
            for out in outputs:
                if out:
                    self._claim(out)
        types = [self.graph.type_of(n) if n else None for n in inputs]
        out_types = infer_node(opdef, attrs, types, node_name)
        outputs = list(outputs)
        if len(out_types) < len(outputs):
            raise PegasusError(f"layer '{node_name}' ({op}) produces {len(out_types)} outputs, "
                               f"{len(outputs)} requested")
        values = fold_arguments(self.graph, opdef, inputs) if self.fold else None
        if values is not None:
            check_outputs(opdef, out_types, node_name)
            for out, value in zip(outputs, evaluate(opdef, attrs, values, node_name)):
                if out:
                    self.set_constant(out, value)
            return outputs
        for out, ttype in zip(outputs, out_types):
            if out:
                self.graph.tensors[out] = Tensor(out, ttype)
        self.graph.nodes.append(Node(node_name, op, attrs, list(inputs), outputs))
        return outputs
