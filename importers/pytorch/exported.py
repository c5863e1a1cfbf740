"""The torch.export front end: a ``.pt2`` program (``torch.export.save``) as a ``SourceGraph``.

The archive has passed archive.py's guard, which is what makes ``torch.export.load`` safe to call here (it
unpickles and evaluates parts of the archive on its own). The program's FX graph is walked as it is (the
ops ``torch.export.export`` records, e.g. ``aten.conv2d.default``, ``aten.batch_norm.default``; a program
saved after ``run_decompositions()`` holds the core ATen ops such as ``aten.convolution.default`` and
``aten.addmm.default``, converted too): placeholders are the user inputs (their shapes and dtypes from
``meta["val"]``; a symbolic dim reads None) and the parameters, buffers and constants, which
``graph_signature`` maps to the state_dict; each ``call_function`` node's arguments are named by its
op's schema, defaults filled in; layer names come from ``meta["nn_module_stack"]``.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import Namer, Ref, SourceGraph, to_numpy, torch_module_names


def _load(path: Path):
    import torch

    try:
        return torch.export.load(str(path))
    except Exception as exc:  # torch raises many kinds of errors for a damaged program
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PegasusError(f"not a loadable torch.export program ({type(exc).__name__}: {first})",
                           where=str(path)) from None


def _module_of(node) -> tuple[str, str]:
    """(module path, class name when it is a torch.nn class, else the qualified name) from nn_module_stack."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, qualname = list(stack.values())[-1]
    qualname = getattr(qualname, "__qualname__", str(qualname))
    return str(path), qualname.rsplit(".", 1)[-1] if str(qualname).startswith("torch.nn.") else str(qualname)


def _is_tensor(node) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)


def _dims(shape) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) else None for d in shape)


def _convert_arg(value: Any) -> Any:
    import torch

    if isinstance(value, torch.fx.Node):
        return Ref(value.name)
    if isinstance(value, (list, tuple)):
        return [_convert_arg(v) for v in value]
    if isinstance(value, (torch.device, torch.memory_format, torch.layout)):
        return str(value)
    return value


def _named_args(node) -> tuple[str, dict[str, Any]]:
    """The op type and the arguments by schema name (defaults filled in) of a call_function node."""
    target = node.target
    if target is operator.getitem:
        return "getitem", {"inputs": [_convert_arg(a) for a in node.args]}
    schema = getattr(target, "_schema", None)
    if schema is None:
        return str(getattr(target, "__name__", target)), {"inputs": [_convert_arg(a) for a in node.args]}
    attrs: dict[str, Any] = {}
    for index, arg in enumerate(schema.arguments):
        if index < len(node.args) and not arg.kwarg_only:
            attrs[arg.name] = _convert_arg(node.args[index])
        elif arg.name in node.kwargs:
            attrs[arg.name] = _convert_arg(node.kwargs[arg.name])
        elif arg.has_default_value():
            attrs[arg.name] = _convert_arg(arg.default_value)
    return schema.name, attrs


def read_exported(path: Path) -> SourceGraph:
    """Load a torch.export program (already through archive.py's guard) and walk its graph."""
    program = _load(path)
    from torch.export.graph_signature import InputKind, OutputKind

    namer = Namer(torch_module_names())
    state = {**program.state_dict, **program.constants}
    sources: dict[str, str] = {}
    inputs, constants = [], {}
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            continue
        if spec.target not in state:
            raise PegasusError(f"input {spec.arg.name} ({spec.kind.name}) has no tensor in the program",
                               where=str(path))
        name = namer.unique(str(spec.target))
        constants[name] = to_numpy(state[spec.target])
        sources[spec.arg.name] = name
    names: dict[str, str] = dict(sources)
    nodes = []
    for node in program.graph.nodes:
        if node.op == "placeholder":
            if node.name in sources:
                continue
            if not _is_tensor(node):
                raise PegasusError(f"input '{node.name}' is not a tensor: pegasus imports models whose inputs are "
                                   "tensors", where=str(path))
            val = node.meta["val"]
            names[node.name] = namer.unique(node.name)
            inputs.append((names[node.name], _dims(val.shape), str(val.dtype).replace("torch.", "")))
        elif node.op == "call_function":
            nodes.append(_source_node(node, namer, names))
        elif node.op == "output":
            continue
        else:
            raise PegasusError(f"node '{node.name}' ({node.op}) is not supported", where=str(path))
    outputs = []
    results = program.graph.output_node().args[0]
    for spec, value in zip(program.graph_signature.output_specs, results):
        if spec.kind != OutputKind.USER_OUTPUT:
            continue
        if not hasattr(value, "name") or value.name not in names:
            raise PegasusError(f"output {spec.arg} is not a tensor the graph computes", where=str(path))
        outputs.append(names[value.name])
    return SourceGraph(inputs, constants, nodes, outputs)


def _source_node(node, namer: Namer, names: dict[str, str]) -> SourceNode:
    op_type, attrs = _named_args(node)
    path, module_type = _module_of(node)
    val = node.meta.get("val")
    tensors_out = _is_tensor(node) or (isinstance(val, (list, tuple)) and any(hasattr(v, "shape") for v in val))
    name = namer.layer(path, module_type, op_type, tensors_out)
    out = name if _is_tensor(node) else namer.unique(f"{name}#0")
    names[node.name] = out

    def rename(value):
        if isinstance(value, Ref):
            return Ref(names.get(value.name, value.name))
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value

    attrs = {key: rename(value) for key, value in attrs.items()}
    tensors = [names[a.name] for a in node.all_input_nodes if _is_tensor(a) and a.name in names]
    return SourceNode(name, op_type, tensors, [out], attrs, where=path)
