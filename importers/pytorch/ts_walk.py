"""Inside the sandbox (pegasus/sandbox.py): a ``torch.jit.save`` archive (traced or scripted) walked into a
``SourceGraph`` and encoded as plain data for the parent (ts_wire.py). Never imported by the pegasus process that
reads a model: torch.jit.load runs what the archive's code says.

``torch.jit.load`` compiles the archive's code; the forward graph is inlined (submodule calls become their ops,
each node keeping the module hierarchy it came from) and every op is checked against the converter table *before*
anything runs: ``torch.jit.freeze`` (which turns the parameters into constants) and constant propagation execute
ops whose inputs are constants, so an op pegasus does not know (``aten::save``, say) should not reach them. The
check is a second line only: the sandbox is the boundary. Only the ops that may run are checked: those of a
block of an If whose condition freezing will decide (``if self.training:``) and drop are not. After freezing
(``optimize_numerics`` off: BatchNorm is folded by pegasus's own pass), mutation is removed and tuples lowered.

Then each node becomes a SourceNode: ``prim::Constant`` values are read with ``toIValue`` (tensors become
the graph's constants, named after the parameter: ``features.0.0.weight``; other values are inlined as
Python values), an ATen node's inputs are named by its schema's arguments, and ``prim::If`` carries its two
blocks so the branch the input shapes select is converted (the other, usually a shape check that raises, is
not). TorchScript keeps no input shapes: ``--input-size-list`` gives them.
"""

from __future__ import annotations

import operator
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pegasus.errors import PegasusError, UnsupportedOpsError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TABLE, Namer, Ref, SourceGraph, to_numpy, torch_module_names
from pegasus.limits import check_tensor

#: ops freezing removes (attribute reads), or control flow whose blocks' ops are checked one by one (a loop
#: that freezing and constant propagation do not remove is refused by the table afterwards)
_FROZEN_AWAY = {"prim::GetAttr", "prim::Constant", "prim::SetAttr", "prim::Loop"}
_HIERARCHY = re.compile(r"([^.()]+)\(([^()]*)\)")
_NOT_A_MODULE = {"SELF", "UNKNOWN_INSTANCE"}


def module_of(node) -> tuple[str, str]:
    """(module path, module type name) of an inlined TorchScript node, from its module hierarchy."""
    path, kind = [], ""
    for instance, type_name in _HIERARCHY.findall(node.getModuleHierarchy() or ""):
        if instance not in _NOT_A_MODULE:
            path.append(instance)
            kind = type_name
    return ".".join(path), kind


def _is_tensor_type(ttype) -> bool:
    import torch

    return ttype.isSubtypeOf(torch._C.TensorType.get())


def _load(path: Path):
    import torch

    try:
        with warnings.catch_warnings():  # torch 2.13 calls TorchScript deprecated; it is what users have
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError with a multi-line message for a bad archive
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PegasusError(f"not a loadable TorchScript archive ({first})", where=str(path)) from None
    return module.eval()


def _same(a: Any, b: Any) -> bool:
    """TorchScript's ``is`` on constants: identity for None, equal type and value otherwise (freezing folds
    ``self.k is 1000`` to True where Python's ``is`` on two ints says False)."""
    return a is b if a is None or b is None else type(a) is type(b) and a == b


def _not_same(a: Any, b: Any) -> bool:
    return not _same(a, b)


#: ops on Python numbers and booleans that a condition known before freezing may use, as Python computes them
_STATIC_OPS: dict[str, Callable[..., Any]] = {
    "aten::__not__": operator.not_, "aten::eq": operator.eq, "aten::ne": operator.ne, "aten::lt": operator.lt,
    "aten::le": operator.le, "aten::gt": operator.gt, "aten::ge": operator.ge, "aten::__and__": operator.and_,
    "aten::__or__": operator.or_, "aten::__is__": _same,
    "aten::__isnot__": _not_same}
_UNKNOWN = object()


def module_attribute(module, name: str) -> Any:
    """Attribute ``name`` of a scripted module (the Python wrapper, or the C++ module its submodules are read
    as), _UNKNOWN if it has none."""
    import torch

    if isinstance(module, torch._C.ScriptModule):
        return module.getattr(name) if module.hasattr(name) else _UNKNOWN
    return getattr(module, name, _UNKNOWN)


class _StaticConditions:
    """The conditions of an unfrozen graph that freezing will make constants: expressions over module attributes
    that the forward never assigns (``self.training``, ``self.p == 0.0``, ``self.aux_logits``) and constants.
    An If on such a condition keeps one block after freezing, so the other block's ops (a stochastic depth's
    ``aten::rand`` under ``if self.training``) are never run and need no converter."""

    def __init__(self, module, graph):
        self.self_value = list(graph.inputs())[0]
        self.module = module
        self.assigned = {n.s("name") for n in _all_nodes(graph) if n.kind() == "prim::SetAttr"}
        self.memo: dict[str, Any] = {}

    def value(self, value) -> Any:
        """The Python value of ``value`` known before freezing, or _UNKNOWN."""
        key = value.debugName()
        if key not in self.memo:
            self.memo[key] = _UNKNOWN  # a cycle (a loop's carried value) stays unknown
            self.memo[key] = self._compute(value)
        return self.memo[key]

    def _compute(self, value) -> Any:
        import torch

        if value is self.self_value:
            return self.module
        node = value.node()
        kind = node.kind()
        if kind == "prim::Constant":
            found = value.toIValue()
            return found if found is None or isinstance(found, (bool, int, float, str)) else _UNKNOWN
        inputs = [self.value(v) for v in node.inputs()]
        if _UNKNOWN in inputs:
            return _UNKNOWN
        modules = (torch.jit.ScriptModule, torch._C.ScriptModule)
        if kind == "prim::GetAttr" and isinstance(inputs[0], modules):
            name = node.s("name")
            found = module_attribute(inputs[0], name) if name not in self.assigned else _UNKNOWN
            return found if found is None or isinstance(found, (bool, int, float, str, *modules)) else _UNKNOWN
        if kind in _STATIC_OPS and all(v is None or isinstance(v, (bool, int, float, str)) for v in inputs):
            return _STATIC_OPS[kind](*inputs)
        if kind == "prim::If" and isinstance(inputs[0], bool):
            taken = list(node.blocks())[0 if inputs[0] else 1]
            return self.value(list(taken.outputs())[value.offset()])
        return _UNKNOWN

    def blocks(self, node) -> list:
        """The blocks of ``node`` that may run after freezing."""
        blocks = list(node.blocks())
        if node.kind() == "prim::If":
            condition = self.value(node.input())
            if isinstance(condition, bool):
                return [blocks[0 if condition else 1]]
        return blocks


def _all_nodes(block, conditions: _StaticConditions | None = None) -> list:
    """Every node of ``block`` and its inner blocks (only those that may run, given ``conditions``)."""
    found = []
    for node in block.nodes():
        found.append(node)
        for inner in conditions.blocks(node) if conditions else node.blocks():
            found.extend(_all_nodes(inner, conditions))
    return found


def _check_ops(module, path: Path) -> None:
    """Every op of the inlined forward graph that may run has a converter, before freezing runs any of them."""
    import torch

    graph = module.forward.graph.copy()
    torch._C._jit_pass_inline(graph)
    problems: dict[str, str] = {}
    for node in _all_nodes(graph, _StaticConditions(module, graph)):
        kind = node.kind()
        if kind in _FROZEN_AWAY or kind in problems or TABLE.find(kind) is not None:
            continue
        where = module_of(node)[0]
        problems[kind] = f"{kind} at {where}" if where else f"{kind} (in the top module's forward)"
    if problems:
        raise UnsupportedOpsError(list(problems.values()), where=str(path))


def _frozen_graph(module):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        frozen = torch.jit.freeze(module, optimize_numerics=False)
    graph = frozen.forward.graph
    torch._C._jit_pass_inline(graph)
    torch._C._jit_pass_remove_mutation(graph)
    torch._C._jit_pass_lower_all_tuples(graph)
    torch._C._jit_pass_constant_propagation(graph)
    torch._C._jit_pass_dce(graph)
    return frozen, graph


def _argument_names(node) -> list[str] | None:
    import torch

    try:
        schema = node.schema()
    except RuntimeError:
        return None
    if schema == "(no schema)":
        return None
    return [arg.name for arg in torch._C.parse_schema(schema).arguments]


class _Walker:
    """Turns the frozen graph's nodes into SourceNodes, naming every value."""

    def __init__(self):
        self.namer = Namer(torch_module_names())
        self.names: dict[str, Any] = {}   # debugName -> Ref, or a Python value for constants
        self.constants: dict = {}
        self.modules: dict[str, tuple[Any, str]] = {}  # debugName -> (frozen module, its path)
        self.read: dict[tuple[int, str], Ref] = {}       # (module id, attribute) -> the constant read

    def ref(self, value) -> Any:
        return self.names[value.debugName()]

    def constant(self, node) -> None:
        import torch

        out = node.output()
        value = out.toIValue()
        base = re.sub(r"^self\.", "", out.debugName())
        if isinstance(value, torch.Tensor):
            self.names[out.debugName()] = Ref(self._tensor_constant(base, value))
        elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            self.names[out.debugName()] = [Ref(self._tensor_constant(f"{base}.{i}", v)) if v is not None else None
                                           for i, v in enumerate(value)]  # x[:, idx]'s indices: [None, idx]
        elif isinstance(value, torch.device):
            self.names[out.debugName()] = str(value)
        else:
            self.names[out.debugName()] = value

    def attribute(self, node) -> None:
        """An attribute freezing left to be read (``nn.MultiheadAttention``'s ``in_proj_weight``, which its
        scripted forward may find None): read from the frozen module, a tensor as a constant."""
        import torch

        owner, path = self.modules[node.input().debugName()]
        attribute, out = node.s("name"), node.output().debugName()
        value = module_attribute(owner, attribute)
        where = f"{path}.{attribute}" if path else attribute
        if isinstance(value, (torch.jit.ScriptModule, torch._C.ScriptModule)):
            self.modules[out] = (value, where)
            self.names[out] = None
        elif isinstance(value, torch.Tensor):
            key = (id(owner), attribute)
            if key not in self.read:
                self.read[key] = Ref(self._tensor_constant(where, value))
            self.names[out] = self.read[key]
        else:
            self.names[out] = value

    def _tensor_constant(self, base: str, tensor) -> str:
        name = self.namer.unique(base if not base.isdigit() else f"constant_{base}")
        check_tensor(tuple(tensor.shape), tensor.element_size(), f"constant '{name}'")
        self.constants[name] = to_numpy(tensor)
        return name

    def nodes(self, block, nested: bool = False) -> list[SourceNode]:
        """The block's nodes; inside an If or a Loop (``nested``) no node takes a module's bare name, which goes
        to the module's own layer outside (a scripted LSTM's unbatched-input branch must not take ``rnn``)."""
        found = []
        for node in block.nodes():
            if node.kind() == "prim::Constant":
                self.constant(node)
            elif node.kind() == "prim::GetAttr" and node.input().debugName() in self.modules:
                self.attribute(node)
            else:
                found.append(self.source_node(node, nested))
        return found

    def source_node(self, node, nested: bool = False) -> SourceNode:
        kind = node.kind()
        path, module_type = module_of(node)
        layer = not nested and any(_is_tensor_type(o.type()) for o in node.outputs())
        name = self.namer.layer(path, module_type, kind, layer)
        arg_names = _argument_names(node)
        values = [self.ref(v) for v in node.inputs()]
        if arg_names is not None and len(arg_names) == len(values):
            attrs: dict[str, Any] = dict(zip(arg_names, values))
        else:
            attrs = {"inputs": values}
        for attribute in node.attributeNames():  # prim ops keep parameters as attributes (ConstantChunk's)
            attrs[attribute] = getattr(node, node.kindOf(attribute))(attribute)
        if kind in ("prim::If", "prim::Loop"):
            attrs["params"] = []
            for block in node.blocks():  # a loop's block reads the iteration number and the carried values
                for index, param in enumerate(block.inputs()):
                    self.names[param.debugName()] = Ref(self.namer.unique(f"{name}#param{index}"))
                    attrs["params"].append(self.names[param.debugName()])
            attrs["blocks"] = [(self.nodes(b, nested=True), [self.ref(v) for v in b.outputs()]) for b in node.blocks()]
        tensors = [self.names[v.debugName()].name for v in node.inputs()
                   if _is_tensor_type(v.type()) and isinstance(self.names[v.debugName()], Ref)]
        outputs = []
        for i, out in enumerate(node.outputs()):
            tensor_name = name if node.outputsSize() == 1 else f"{name}:{i}"
            out_name = tensor_name if _is_tensor_type(out.type()) else f"{name}#{i}"
            if out_name != name:
                out_name = self.namer.unique(out_name)
            self.names[out.debugName()] = Ref(out_name)
            outputs.append(out_name)
        return SourceNode(name, kind, tensors, outputs, attrs, where=path)


def read_plain(path: Path) -> tuple[dict, list]:
    """The sandboxed entry (pegasus.sandbox.run_sandboxed): the archive walked and encoded as plain data."""
    from pegasus.importers.pytorch import ops as _ops  # noqa: F401  (registers the converters the check reads)
    from pegasus.importers.pytorch.ts_wire import encode

    return encode(walk(path))


def walk(path: Path) -> SourceGraph:
    """Load, check, freeze and walk a TorchScript archive."""
    module = _load(path)
    _check_ops(module, path)
    try:
        frozen, graph = _frozen_graph(module)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise PegasusError(f"TorchScript could not freeze the model ({first})", where=str(path)) from None
    walker = _Walker()
    walker.modules[list(graph.inputs())[0].debugName()] = (frozen, "")
    inputs = []
    for value in list(graph.inputs())[1:]:  # the first is the module itself
        if not _is_tensor_type(value.type()):
            raise PegasusError(f"forward argument '{value.debugName()}' is a {value.type()}, not a tensor: pegasus "
                               "imports models whose inputs are tensors", where=str(path))
        name = walker.namer.unique(re.sub(r"\.\d+$", "", value.debugName()))
        walker.names[value.debugName()] = Ref(name)
        inputs.append((name, None, "float32"))
    nodes = walker.nodes(graph)
    outputs = []
    for value in graph.outputs():
        ref = walker.ref(value)
        if not isinstance(ref, Ref):
            raise PegasusError(f"the model returns a constant ({ref!r})", where=str(path))
        outputs.append(ref.name)
    return SourceGraph(inputs, walker.constants, nodes, outputs)
