"""The torch.export front end: a ``.pt2`` program (``torch.export.save``) read as data into a ``SourceGraph``.

Nothing in the archive is handed to torch: ``torch.export.load`` would unpickle weights, constants and sample
inputs and evaluate every symbolic-shape expression with sympy. The program is JSON in torch's documented
export schema (torch/_export/serde/schema.py), read by pt2_json.py; the tensors come from their payload
configs and storages (pt2_weights.py; pickled ones through tensor_pickle.py, never Python's unpickler); every
member is found through safezip's one resolver. Only ``models/model.json`` is read (an archive holding other
programs is refused); sample inputs are never read.

The graph is walked as torch's deserializer would rebuild it, so the result is what the converters have always
received: placeholders are the user inputs (shape and dtype from ``tensor_values``; a symbolic dim reads None)
and the parameters, buffers and constants, which the signature maps to state_dict names; each op node's
arguments are named by its op's schema (looked up with ``torch.ops.<ns>.<op>.<overload>._schema`` for a
validated name: a table lookup, nothing from the archive runs), defaults filled in; an op with several results
is followed by one ``getitem`` per result; layer names come from the node's ``nn_module_stack``.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Any

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch import pt2_weights
from pegasus.importers.pytorch.context import Namer, Ref, SourceGraph, torch_module_names
from pegasus.importers.pytorch.pt2_json import Reader
from pegasus.safezip import Archive, open_archive

#: torch's symbolic-size operators (the deserializer's _SYM_OPS), by serialized target -> the name converters use
SYM_OPS = {**{f"_operator.{n}": n for n in ("eq", "ne", "le", "ge", "lt", "gt", "neg", "pos", "mul", "add", "sub",
                                            "floordiv", "mod", "pow", "truediv", "and_", "or_", "lshift", "rshift")},
           **{f"torch.{n}": n for n in ("sym_not", "sym_int", "sym_float", "sym_ite", "sym_max", "sym_min",
                                        "sym_sqrt")},
           "math.trunc": "trunc"}
_OP_TARGET = re.compile(r"torch\.ops\.([A-Za-z][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_TENSOR_KINDS = ("parameter", "buffer", "tensor_constant")


def read_exported(path: Path) -> SourceGraph:
    """Read a torch.export archive (``archive_format`` pt2, or the torch 2.7 layout) into a SourceGraph."""
    with open_archive(path) as archive:
        return _Program(archive).source_graph()


def op_schema(target: str):
    """torch's schema of operator ``target`` ('torch.ops.aten.conv2d.default'), None for anything else."""
    import torch

    match = _OP_TARGET.fullmatch(target)
    if not match or match.group(1) == "higher_order" or any(p.startswith("_") and p.endswith("_") for p in
                                                             match.groups()):
        return None
    namespace, name, overload = match.groups()
    try:
        space = getattr(torch.ops, namespace)
        if not isinstance(space, torch._ops._OpNamespace):
            return None
        op = getattr(getattr(space, name), overload)
    except (AttributeError, RuntimeError):
        return None
    return op._schema if isinstance(op, torch._ops.OpOverload) else None


def _default(value: Any) -> Any:
    """A schema default as the converters see it (devices, layouts, memory formats as their names)."""
    import torch

    if isinstance(value, (list, tuple)):
        return [_default(v) for v in value]
    if isinstance(value, (torch.device, torch.memory_format, torch.layout)):
        return str(value)
    return value


def _module_of(metadata: dict, reader: Reader, what: str) -> tuple[str, str]:
    """(module path, class name for a torch.nn class else the qualified name) from the last entry of the node's
    nn_module_stack ('key,path,type;key,path,type', split the way torch's deserializer splits it)."""
    text = metadata.get("nn_module_stack")
    if not text:
        return "", ""
    stack = {}
    for item in reader.str(text, f"{what} nn_module_stack").split(";"):
        parts, start, depth = [], 0, 0
        for end, char in enumerate(item):
            depth += char in "[(" and 1 or (-1 if char in ")]" else 0)
            if char == "," and depth == 0:
                parts.append(item[start:end])
                start = end + 1
        parts.append(item[start:])
        if len(parts) != 3:
            raise reader.fail(what, f"has an nn_module_stack entry that is not 'key,path,type': {item[:60]!r}")
        stack[parts[0]] = (parts[1], parts[2])
    path, qualname = list(stack.values())[-1]
    return path, qualname.rsplit(".", 1)[-1] if qualname.startswith("torch.nn.") else qualname


class _Program:
    def __init__(self, archive: Archive):
        self.archive = archive
        self.where = archive.where
        self.legacy = archive.has("serialized_exported_program.json")  # the torch 2.7 layout, no top folder
        member = "serialized_exported_program.json" if self.legacy else self._only_program()
        self.r = Reader(self.where, archive.relative(member))
        self.root = self.r.obj(pt2_weights.read_json(archive, member, "the program"), "the program")
        self.namer = Namer(torch_module_names())
        self.names: dict[str, str] = {}
        self.tensors: set[str] = set()
        self.nodes: list[SourceNode] = []
        self.generated = 0

    def _only_program(self) -> str:
        programs = [n for n in self.archive.names if self.archive.relative(n).startswith("models/")]
        if [self.archive.relative(n) for n in programs] != ["models/model.json"]:
            listed = ", ".join(self.archive.relative(n) for n in programs[:4]) or "none"
            raise PegasusError(f"the archive must hold one program, models/model.json (it has: {listed}): refused",
                               where=self.where)
        return programs[0]

    # weights -------------------------------------------------------------------------------------------
    def _tensors_for(self, targets: set[str]) -> dict[str, Any]:
        """The arrays of the state_dict and constants entries named in ``targets`` (constants win, as in torch's
        ``{**state_dict, **constants}``)."""
        found: dict[str, Any] = {}
        sources = ((("serialized_constants.pt",), None), (("serialized_state_dict.pt",), None)) if self.legacy else (
            (("data", "constants", "model.pt"), ("constants", "model_constants_config.json")),
            (("data", "weights", "model.pt"), ("weights", "model_weights_config.json")))
        for pickled, config in sources:
            missing = targets - set(found)
            if not missing:
                break
            if self.archive.has(self._full(*pickled)):
                blob = self.archive.read(self._full(*pickled), "the pickled state_dict")
                found.update(pt2_weights.state_dict(blob, f"{self.where}: {'/'.join(pickled)}", missing))
            elif config and self.archive.has(self._full("data", *config)):
                found.update(pt2_weights.payloads(self.archive, config[0], config[1], missing))
        return found

    def _full(self, *parts: str) -> str:
        return "/".join(([self.archive.root] if self.archive.root else []) + list(parts))

    # the graph -----------------------------------------------------------------------------------------
    def source_graph(self) -> SourceGraph:
        r = self.r
        module = r.obj(r.get(self.root, "graph_module", "the program"), "graph_module")
        graph = r.obj(r.get(module, "graph", "graph_module"), "graph")
        signature = r.obj(r.get(module, "signature", "graph_module"), "signature")
        self.tensor_values = r.obj(r.get(graph, "tensor_values", "graph", {}), "tensor_values")
        for name, meta in self.tensor_values.items():  # every shape expression checked, whether used or not
            r.tensor_meta(meta, f"tensor '{name}'")
        for name, value in r.obj(r.get(graph, "sym_int_values", "graph", {}), "sym_int_values").items():
            r.sym_int(value, f"symbolic value '{name}'")
        specs = [r.union(s, "input spec") for s in r.list(r.get(signature, "input_specs", "signature"), "input_specs")]
        constants, sources = self._constants(specs)
        self.names.update(sources)
        self.tensors.update(n for n in sources if n in self.tensor_values)
        inputs = self._inputs(r.list(r.get(graph, "inputs", "graph"), "graph inputs"), specs, sources)
        for index, node in enumerate(r.list(r.get(graph, "nodes", "graph"), "nodes")):
            self._node(r.obj(node, f"node {index}"), index)
        outputs = self._outputs(r.list(r.get(graph, "outputs", "graph"), "graph outputs"),
                                r.list(r.get(signature, "output_specs", "signature"), "output_specs"))
        return SourceGraph(inputs, constants, self.nodes, outputs)

    def _constants(self, specs: list[tuple[str, Any]]) -> tuple[dict, dict[str, str]]:
        r = self.r
        wanted = []
        for kind, body in specs:
            if kind == "user_input" or kind == "constant_input":
                continue
            body = r.obj(body, f"{kind} input spec")
            arg = r.obj(r.get(body, "arg", f"{kind} input spec"), f"{kind} input spec arg")
            name = r.str(r.get(arg, "name", f"{kind} input spec arg"), f"{kind} input name")
            if kind not in _TENSOR_KINDS:
                raise PegasusError(f"input {name} ({kind.upper()}) has no tensor in the program", where=self.where)
            target = r.str(r.get(body, f"{kind}_name", f"{kind} input spec"), f"{kind} name")
            wanted.append((name, target, kind))
        arrays = self._tensors_for({target for _, target, _ in wanted})
        constants, sources = {}, {}
        for name, target, kind in wanted:
            if target not in arrays:
                raise PegasusError(f"input {name} ({kind.upper()}) has no tensor in the program", where=self.where)
            unique = self.namer.unique(target)
            constants[unique] = arrays[target]
            sources[name] = unique
        return constants, sources

    def _inputs(self, graph_inputs: list, specs: list, sources: dict[str, str]) -> list:
        r = self.r
        inputs = []
        for index, value in enumerate(graph_inputs):
            kind, body = r.union(value, "graph input")
            if kind in ("as_tensor", "as_custom_obj"):
                name = r.str(r.get(r.obj(body, "graph input"), "name", "graph input"), "graph input name")
            elif kind == "as_sym_int":
                value = r.sym_arg(body, "graph input")
                name = value.name if isinstance(value, Ref) else f"arg{index}"
            else:
                spec = specs[index][1] if index < len(specs) and isinstance(specs[index][1], dict) else {}
                name = str(spec.get("name") or f"arg{index}")
            if name in sources:
                continue
            if kind != "as_tensor" or name not in self.tensor_values:
                raise PegasusError(f"input '{name}' is not a tensor: pegasus imports models whose inputs are tensors",
                                   where=self.where)
            dtype, dims = r.tensor_meta(self.tensor_values[name], f"tensor '{name}'")
            self.names[name] = self.namer.unique(name)
            self.tensors.add(name)
            inputs.append((self.names[name], dims, dtype))
        return inputs

    def _outputs(self, graph_outputs: list, specs: list) -> list[str]:
        r = self.r
        outputs = []
        for spec, value in zip(specs, graph_outputs):
            kind, body = r.union(spec, "output spec")
            if kind != "user_output":
                continue
            out_kind, out = r.union(value, "graph output")
            key = None
            if out_kind == "as_tensor":
                key = r.ref(out, "graph output").name
            elif out_kind in ("as_sym_int", "as_sym_bool", "as_sym_float"):
                ref = r.sym_arg(out, "graph output")
                key = ref.name if isinstance(ref, Ref) else None
            if key is None or key not in self.names:
                raise PegasusError(f"output {str(body)[:60]} is not a tensor the graph computes", where=self.where)
            outputs.append(self.names[key])
        return outputs

    # nodes ---------------------------------------------------------------------------------------------
    def _fresh(self, base: str) -> str:
        self.generated += 1
        return f"\x00{base}{self.generated}"

    def _node(self, node: dict, index: int) -> None:
        r = self.r
        target = r.str(r.get(node, "target", f"node {index}"), f"node {index} target")
        label = f"node '{node.get('name') or index}' ({target[:60]})"
        metadata = r.obj(node.get("metadata") or {}, f"{label} metadata")
        named = []
        for item in r.list(node.get("inputs", []), f"{label} inputs"):
            item = r.obj(item, f"{label} input")
            arg_name = r.str(r.get(item, "name", f"{label} input"), f"{label} input name")
            named.append((arg_name, r.argument(r.get(item, "arg", f"{label} input"), f"{label} argument '{arg_name}'"),
                          item.get("kind")))
        op_type, attrs, positional, keywords = self._arguments(target, named, label)
        outputs = r.list(node.get("outputs", []), f"{label} outputs")
        key, is_tensor, items = self._result(node, outputs, label)
        path, module_type = _module_of(metadata, r, label)
        tensors_out = is_tensor or any(tensor for tensor, _ in items)
        refs = list(dict.fromkeys(ref.name for ref in _refs([*positional, *keywords])))
        for ref in refs:
            if ref not in self.names:
                raise PegasusError(f"{label} reads '{ref}', which nothing before it defines", where=self.where)
        self._emit(key, op_type, attrs, [self.names[k] for k in refs if k in self.tensors], is_tensor, tensors_out,
                   path, module_type)
        self._getitems(key, items, path, module_type)

    def _arguments(self, target: str, named: list, label: str) -> tuple[str, dict, list, list]:
        """(op type, attrs by schema name with defaults, positional values, keyword values), as torch's
        deserializer and the converters' argument naming would give them."""
        actual = {name: value for name, value, _ in named}
        if target in SYM_OPS:
            return SYM_OPS[target], {"inputs": list(actual.values())}, list(actual.values()), []
        schema = op_schema(target)
        if schema is None:
            if target.startswith("torch.ops.higher_order.") or re.fullmatch(r"[\w.]+", target) is None:
                raise PegasusError(f"{label}: operator {target[:80]!r} is not supported", where=self.where)
            positional = [v for n, v, kind in named if kind == 1 or n == ""]
            keywords = [v for n, v, kind in named if not (kind == 1 or n == "")]
            return target.rsplit(".", 1)[-1], {"inputs": positional}, positional, keywords
        kinds = {name: kind for name, _, kind in named}
        all_positional = target == "torch.ops.aten.item.default"
        args: list = []
        kwargs: dict = {}
        for arg in schema.arguments:
            if arg.name in actual and (all_positional or kinds[arg.name] == 1):
                args.append(actual[arg.name])
                continue
            if arg.name in actual and kinds[arg.name] == 2 and not keyword.iskeyword(arg.name):
                kwargs[arg.name] = actual[arg.name]
                continue
            if (not arg.has_default_value() and not arg.kwarg_only) or keyword.iskeyword(arg.name):
                if arg.name not in actual:
                    raise PegasusError(f"{label} lacks argument '{arg.name}'", where=self.where)
                args.append(actual[arg.name])
            elif arg.name in actual:
                kwargs[arg.name] = actual[arg.name]
        attrs: dict[str, Any] = {}
        for index, arg in enumerate(schema.arguments):
            if index < len(args) and not arg.kwarg_only:
                attrs[arg.name] = args[index]
            elif arg.name in kwargs:
                attrs[arg.name] = kwargs[arg.name]
            elif arg.has_default_value():
                attrs[arg.name] = _default(arg.default_value)
        return schema.name, attrs, args, list(kwargs.values())

    def _result(self, node: dict, outputs: list, label: str) -> tuple[str, bool, list]:
        """(key naming the node's value, whether it is one tensor, the items a multi-result node's getitems read:
        (is tensor, (kind, key or nested items)))."""
        r = self.r
        name = node.get("name")
        own = name if isinstance(name, str) and name else self._fresh("node")
        if not outputs:
            return own, False, []
        if len(outputs) == 1:
            kind, body = r.union(outputs[0], f"{label} output")
            if kind == "as_tensor":
                key = r.ref(body, f"{label} output").name
                self._need_meta(key, label)
                return key, True, []
            if kind in ("as_sym_int", "as_sym_bool", "as_sym_float"):
                ref = r.sym_arg(body, f"{label} output")
                if not isinstance(ref, Ref):
                    raise PegasusError(f"{label}: a constant symbolic result", where=self.where)
                return ref.name, False, []
            if kind == "as_none":
                return self._fresh("unused"), False, []
            if kind != "as_tensors":
                raise PegasusError(f"{label}: a result of kind '{kind}' is not read", where=self.where)
            return own, False, [self._item("as_tensor", t, label) for t in r.list(body, f"{label} outputs")]
        return own, False, [self._item(*r.union(o, f"{label} output"), label) for o in outputs]

    def _item(self, kind: str, body: Any, label: str) -> tuple[bool, tuple]:
        r = self.r
        if kind == "as_tensor":
            key = r.ref(body, f"{label} output").name
            self._need_meta(key, label)
            return True, ("value", key)
        if kind in ("as_sym_int", "as_sym_float"):
            ref = r.sym_arg(body, f"{label} output")
            if isinstance(ref, Ref):
                return False, ("value", ref.name)
        elif kind == "as_none":
            return False, ("value", self._fresh("as_none"))
        elif kind in ("as_tensors", "as_sym_ints", "as_sym_floats"):
            inner = "as_tensor" if kind == "as_tensors" else kind[:-1]
            return False, ("list", [self._item(inner, v, label) for v in r.list(body, f"{label} output")])
        raise PegasusError(f"{label}: a result of kind '{kind}' is not read", where=self.where)

    def _need_meta(self, key: str, label: str) -> None:
        if key not in self.tensor_values:
            raise PegasusError(f"{label}: tensor '{key}' has no entry in tensor_values", where=self.where)
        self.r.tensor_meta(self.tensor_values[key], f"tensor '{key}'")
        self.tensors.add(key)

    def _getitems(self, parent: str, items: list, path: str, module_type: str) -> None:
        for index, (is_tensor, (kind, value)) in enumerate(items):
            key = value if kind == "value" else self._fresh("getitem")
            tensors_out = is_tensor or (kind == "list" and any(t for t, _ in value))
            self._emit(key, "getitem", {"inputs": [Ref(parent), index]}, [], is_tensor, tensors_out, path, module_type)
            if kind == "list":
                self._getitems(key, value, path, module_type)

    def _emit(self, key: str, op_type: str, attrs: dict, tensors: list[str], is_tensor: bool, tensors_out: bool,
              path: str, module_type: str) -> None:
        if key in self.names:
            raise PegasusError(f"value '{key}' is defined twice in the program", where=self.where)
        name = self.namer.layer(path, module_type, op_type, tensors_out)
        out = name if is_tensor else self.namer.unique(f"{name}#0")
        self.names[key] = out
        attrs = {k: _rename(v, self.names) for k, v in attrs.items()}
        self.nodes.append(SourceNode(name, op_type, tensors, [out], attrs, where=path))


def _refs(values: list) -> list[Ref]:
    found = []
    for value in values:
        if isinstance(value, Ref):
            found.append(value)
        elif isinstance(value, list):
            found.extend(_refs(value))
    return found


def _rename(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, Ref):
        return Ref(names.get(value.name, value.name))
    if isinstance(value, list):
        return [_rename(v, names) for v in value]
    return value
