"""The one converter mechanism every importer uses (ONNX, TFLite, and the frameworks after them).

A framework's model is read into ``SourceNode``s (name, op type, input and output tensor names, decoded
attributes, and where the node stands in the file). A ``ConverterTable`` maps each op type to converter
functions registered with the version they apply from (``@table.register("Clip", since=11)``; the
newest ``since`` <= the model's version wins). A converter translates one node onto registry ops
through an ``ImportContext``; it never computes the op itself. ``convert_nodes`` lists every
unsupported op of the model in one error before converting anything, then converts node by node,
naming the node (and its place in the file) in any error a converter raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pegasus.errors import NeedsConstantError, PegasusError, UnsupportedOpsError
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import ShapeError


@dataclass
class SourceNode:
    """A framework's node with its attributes decoded to Python values. ``where`` says where it stands in
    the file (e.g. "operator 12", a module path) for error messages; '' when the name is enough."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    where: str = ""

    def input(self, i: int) -> str:
        """Name of input i, or '' when it is omitted."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def describe(self) -> str:
        place = f", {self.where}" if self.where else ""
        return f"{self.op_type} node '{self.name}'{place}"


class NodeAttrs(dict):
    """A node's decoded attributes: one a converter requires but the file lacks is a one-line error naming the
    node (``attrs["pads"]``), not a KeyError; ``get`` keeps its default for optional ones."""

    def __init__(self, values: dict[str, Any], node: str):
        super().__init__(values)
        self.node = node

    def __missing__(self, key: str) -> Any:
        raise PegasusError(f"{self.node} lacks the attribute '{key}'")


ConvertFn = Callable[[Any, Any], None]


def needed_nodes(nodes: Sequence[SourceNode], outputs: Sequence[str], stop_at: set[str]) -> list[SourceNode]:
    """The nodes ``outputs`` depend on, in their given order, not looking past the tensors in ``stop_at`` (the
    part of a model that a cut with --inputs/--outputs keeps)."""
    producer = {out: i for i, node in enumerate(nodes) for out in node.outputs if out}
    needed: set[int] = set()
    stack = [name for name in outputs if name not in stop_at]
    while stack:
        index = producer.get(stack.pop())
        if index is None or index in needed:
            continue
        needed.add(index)
        stack.extend(i for i in nodes[index].inputs if i and i not in stop_at)
    return [nodes[i] for i in sorted(needed)]


class ConverterTable:
    """Converters of one framework, per (domain, op type), each applying from a version on."""

    def __init__(self, framework: str, version_name: str = "version"):
        self.framework = framework
        self.version_name = version_name
        self._converters: dict[tuple[str, str], list[tuple[int, ConvertFn]]] = {}

    def register(self, op_type: str, since: int = 1, domain: str = "") -> Callable[[ConvertFn], ConvertFn]:
        def decorate(fn: ConvertFn) -> ConvertFn:
            entries = self._converters.setdefault((domain, op_type), [])
            entries.append((since, fn))
            entries.sort(key=lambda item: item[0])
            return fn
        return decorate

    def converter(self, *op_types: str) -> Callable[[ConvertFn], ConvertFn]:
        """Register one converter for several op types (of every version): ``converter = TABLE.converter`` is
        the ``@converter("Conv2D", "DepthwiseConv2dNative")`` decorator of an importer without versions."""
        def decorate(fn: ConvertFn) -> ConvertFn:
            for op_type in op_types:
                self.register(op_type)(fn)
            return fn
        return decorate

    def find(self, op_type: str, version: int = 1 << 30, domain: str = "") -> ConvertFn | None:
        """The newest converter registered with since <= ``version``; None when there is none."""
        candidates = [fn for since, fn in self._converters.get((domain, op_type), []) if since <= version]
        return candidates[-1] if candidates else None

    def op_types(self) -> list[str]:
        return sorted(op for _, op in self._converters)

    def check_supported(self, nodes: Iterable[SourceNode], version: int = 1 << 30) -> None:
        """Raise one error listing every op type without a converter (with its first node)."""
        problems: dict[tuple[str, str], str] = {}
        for node in nodes:
            key = (node.domain, node.op_type)
            if key not in problems and self.find(node.op_type, version, node.domain) is None:
                domain = f" (domain {node.domain})" if node.domain else ""
                place = f", {node.where}" if node.where else ""
                versioned = f" ({self.version_name} {version})" if version != 1 << 30 else ""
                problems[key] = f"{node.op_type}{domain} at node '{node.name}'{place}{versioned}"
        if problems:
            raise UnsupportedOpsError(list(problems.values()))


class ImportContext:
    """What a converter may use: tensor types, compile-time constants, and ``emit`` onto registry ops."""

    def __init__(self, builder: GraphBuilder):
        self.builder = builder

    @property
    def graph(self):
        return self.builder.graph

    def type_of(self, name: str) -> TensorType:
        return self.builder.type_of(name)

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of a tensor, or None if it is only known at run time (or omitted)."""
        return self.builder.value(name)

    def constant(self, node: SourceNode, index: int, what: str, default: Any = None) -> np.ndarray | None:
        """Input ``index`` of ``node`` as a compile-time constant; ``default`` if the input is omitted."""
        name = node.input(index)
        if not name:
            return None if default is None else np.asarray(default)
        return self.builder.constant(name, node=node.name, op=node.op_type, what=what)

    def add_constant(self, base: str, array: np.ndarray) -> str:
        return self.builder.add_constant(base, array)

    def emit(self, op: str, inputs: list[str], attrs: dict[str, Any] | None = None, *, node: SourceNode,
             outputs: list[str] | None = None, suffix: str = "") -> list[str]:
        """Emit a registry op named after ``node`` (plus ``suffix``). With ``outputs`` None and no suffix, it
        writes the node's own outputs; with a suffix, fresh tensors named after the layer."""
        if outputs is None and not suffix:
            outputs = node.outputs
        count = len(outputs) if outputs is not None else 1
        return self.builder.emit(op, inputs, attrs or {}, name=node.name + suffix, outputs=outputs,
                                 num_outputs=count)


def convert_nodes(table: ConverterTable, ctx: ImportContext, nodes: list[SourceNode], version: int = 1 << 30) -> None:
    """Convert ``nodes`` in order (after listing every unsupported op at once); errors name the node."""
    table.check_supported(nodes, version)
    for node in nodes:
        convert_node(table, ctx, node, version)


def convert_node(table: ConverterTable, ctx: ImportContext, node: SourceNode, version: int = 1 << 30) -> None:
    """Convert one node whose op ``table`` supports; an error names the node (and its place in the file)."""
    builder = ctx.builder
    versioned = f" ({table.version_name} {version})" if version != 1 << 30 else ""
    missing = [n for n in node.inputs if n and not builder.has(n)]
    if missing:
        raise PegasusError(f"{node.describe()} reads '{missing[0]}', which nothing defines")
    try:
        table.find(node.op_type, version, node.domain)(ctx, node)
    except NeedsConstantError:
        raise
    except ShapeError as exc:
        raise PegasusError(f"{node.describe()}{versioned}: {exc}") from exc
    except PegasusError as exc:
        if exc.where is None and f"'{node.name}'" not in exc.message:
            raise PegasusError(f"{node.describe()}{versioned}: {exc.message}") from exc
        raise
