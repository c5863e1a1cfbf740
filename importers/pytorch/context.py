"""The PyTorch converters' registry and context: the shared mechanism (importers/common/converters.py) plus
what only a PyTorch graph has — arguments that are not tensors.

Both front ends (torchscript.py, exported.py) turn each ATen call into a ``SourceNode`` whose op type is the
schema's name (``aten::conv2d``; TorchScript's and torch.export's ATen ops share their schemas) and whose
``attrs`` map each schema argument name to its value: a Python constant, a ``Ref`` to a value of the source
graph, or a list of those. A ``Ref`` names either a tensor (in the graph builder) or a value that is not a
tensor (an ``int[]`` from ``aten::size``, a list of tensors from ``prim::ListConstruct``): those are
computed at import by the plumbing converters (ops/plumbing.py) and kept in ``TorchContext.values``, so a
shape computed from ``x.size(0)`` is a number by the time the layer that uses it is converted.
``node.inputs`` lists the tensors a node reads directly, which ``convert_nodes`` checks exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ConverterTable, ConvertFn, ImportContext, SourceNode
from pegasus.ir.builder import GraphBuilder

TABLE = ConverterTable("PyTorch")
#: op types that are plumbing (folded at import, or an alias), which never take a module's name from its layer
PLUMBING: set[str] = set()


def converter(*op_types: str, plumbing: bool = False) -> Callable[[ConvertFn], ConvertFn]:
    """Register ``fn`` for each op type (``aten::relu``, ``prim::ListConstruct``, ...)."""
    def decorate(fn: ConvertFn) -> ConvertFn:
        for op_type in op_types:
            TABLE.register(op_type)(fn)
        if plumbing:
            PLUMBING.update(op_types)
        return fn
    return decorate


@dataclass(frozen=True)
class Ref:
    """A value of the source graph, by the name the import gave it."""

    name: str


class TorchContext(ImportContext):
    """The shared context plus the values that are not tensors, computed as the graph is converted."""

    def __init__(self, builder: GraphBuilder):
        super().__init__(builder)
        #: name -> Python value (int, float, bool, None, str, list of them, list of tensor names)
        self.values: dict[str, Any] = {}

    def resolve(self, value: Any) -> Any:
        """A raw argument with every Ref replaced: by its Python value, or by the tensor's name."""
        if isinstance(value, Ref):
            if value.name in self.values:
                return self.values[value.name]
            if not self.builder.has(value.name):
                raise PegasusError(f"value '{value.name}' is used before anything defines it")
            return value.name
        if isinstance(value, (list, tuple)):
            return type(value)(self.resolve(v) for v in value)
        return value

    def args(self, node: SourceNode) -> dict[str, Any]:
        """The node's arguments by schema name, resolved."""
        return {key: self.resolve(value) for key, value in node.attrs.items()}

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, str) and self.builder.has(value)

    def emit(self, op: str, inputs: list[str], attrs: dict[str, Any] | None = None, *, node: SourceNode,
             outputs: list[str] | None = None, suffix: str = "") -> list[str]:
        """The shared ``emit`` after checking that every input is a tensor: an argument the file gives as a
        number, a list or a name nothing defines, where the op takes a tensor, is refused naming the node."""
        for index, value in enumerate(inputs):
            if not (value is None or value == "" or self.is_tensor(value)):    # None, '': an omitted input
                raise PegasusError(f"{node.describe()}: its {op} input {index} is {str(value)[:80]!r}, not a tensor")
        return super().emit(op, inputs, attrs, node=node, outputs=outputs, suffix=suffix)

    def tensor(self, node: SourceNode, value: Any, like: str | None = None, what: str = "operand") -> str:
        """A tensor name for ``value``: a tensor stays, a Python number becomes a constant of ``like``'s dtype."""
        if self.is_tensor(value):
            return value
        if isinstance(value, (bool, int, float, np.number)):
            dtype = self.type_of(like).dtype.numpy if like else np.float32
            return self.add_constant(f"{node.name}/{what}", np.asarray(value, dtype))
        raise PegasusError(f"{node.describe()}: {what} is {value!r}, not a tensor or a number")

    def number(self, node: SourceNode, value: Any, what: str) -> Any:
        """A Python number from a number or a constant one-element tensor."""
        if self.is_tensor(value):
            array = self.builder.constant(value, node=node.name, op=node.op_type, what=what)
            if array.size != 1:
                raise PegasusError(f"{node.describe()}: {what} has {array.size} values, expected one")
            return array.reshape(()).item()
        if value is None or isinstance(value, (bool, int, float)):
            return value
        raise PegasusError(f"{node.describe()}: {what} is {value!r}, not a number")

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.type_of(name).shape)

    def rank(self, name: str) -> int:
        return len(self.type_of(name).shape)

    def set_value(self, node: SourceNode, value: Any, index: int = 0) -> None:
        """Output ``index`` of ``node`` is a value known at import (not a layer)."""
        self.values[node.outputs[index]] = value

    def output_names(self, node: SourceNode, count: int) -> list[str]:
        """Names for ``count`` tensor results: the node's outputs (TorchScript), or, when the node has one
        output standing for a tuple (torch.export's multi-output ops, read by ``getitem``), fresh names that
        the tuple value lists."""
        if len(node.outputs) == count and (count > 1 or "#" not in node.outputs[0]):
            return list(node.outputs)
        names = [self.graph.unique_tensor_name(f"{node.name}:{i}") for i in range(count)]
        self.values[node.outputs[0]] = names
        return names

    def alias(self, node: SourceNode, tensor: str, index: int = 0) -> None:
        """Output ``index`` of ``node`` is ``tensor`` unchanged: an Identity the import passes remove (a
        constant is copied)."""
        out = node.outputs[index]
        value = self.value(tensor)
        if value is not None:
            self.builder.set_constant(out, value)
        else:
            self.emit("Identity", [tensor], node=node, outputs=[out])


def dim(axis: int, rank: int) -> int:
    """A PyTorch dim (negative counts from the end) as a non-negative axis."""
    return axis + rank if axis < 0 else axis


@dataclass
class SourceGraph:
    """A model as the front ends hand it over: inputs (name, declared shape with None for a symbolic dim,
    dtype name), tensor constants, nodes in order, and the outputs' names."""

    inputs: list[tuple[str, tuple[int | None, ...] | None, str]]
    constants: dict[str, np.ndarray]
    nodes: list[SourceNode]
    outputs: list[str]


#: torch.nn classes whose instances hold several modules; an op directly in their forward is not "theirs"
_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Module"}


class Namer:
    """Readable, unique layer and tensor names from module paths.

    An op that a torch.nn module computes (the convolution of ``features.0.0``, a Conv2d) takes the module's
    path; an op written in a user module's forward takes the path plus the op (``layer1.0/add``), or the op
    alone at the top (``flatten``). A name taken twice gets ``_1``, ``_2``, ..."""

    def __init__(self, torch_modules: set[str]):
        self.torch_modules = torch_modules - _CONTAINERS
        self.taken: set[str] = set()

    def unique(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    def layer(self, path: str, module_type: str, op_type: str, computes_tensors: bool = True) -> str:
        """The name of an op of module ``path``; only an op that computes tensors and is not plumbing takes
        the torch.nn module's own name."""
        op = op_type.split("::")[-1].strip("_")
        if path and module_type in self.torch_modules and computes_tensors and op_type not in PLUMBING:
            return self.unique(path)
        return self.unique(f"{path}/{op}" if path else op)


def torch_module_names() -> set[str]:
    import torch

    return {name for name, cls in vars(torch.nn).items() if isinstance(cls, type) and issubclass(cls, torch.nn.Module)}


def to_numpy(tensor) -> np.ndarray:
    """A torch tensor as a NumPy array (bfloat16 as float32; a 0-d tensor as a 0-d array)."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.contiguous().numpy().copy()
