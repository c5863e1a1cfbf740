"""A TensorFlow graph's NodeDefs as ``SourceNode``s, with every function call inlined, read as data.

Tensor names: output k of node ``n`` is ``n`` for k = 0 and ``n:k`` otherwise (TensorFlow's ``n:0`` is ``n``),
so the names users pass (``--outputs InceptionV1/Logits/Predictions/Reshape_1``) are tensor names.
Attributes are decoded to plain values (strings, ints, floats, bools, dtype names, shapes as lists with None
for an unknown dimension, tensors as NumPy arrays, functions by name). ``Const`` nodes become constants, not
nodes. Control inputs (``^name``) are kept aside (``ReadGraph.control``): a converted graph only has data
dependencies, but a node that waits on the untaken side of a Switch is dead too (control_flow.py).

Functions (TF2's ``tf.function`` plumbing: a SavedModel's signature calls a ``StatefulPartitionedCall`` of a
function that calls others) are inlined as data: each FunctionDef's nodes are added with the call's inputs
in place of the function's arguments, and the call's outputs become Identity nodes of the function's return
values. Inside a function a node's output is named ``node:output_arg:index``; its flat index comes from the
op's OpDef (TensorFlow's op registry: how many tensors each output argument holds, and their types), or from
the called function's signature. Inlined nodes keep their names when those are free (``sequential/conv2d/
Conv2D``), else they get the call's name as a prefix, as TensorFlow's own inliner does.

Inlining is bounded: a function may call another twice, which calls another twice..., so 40 levels in an 8 KB
file would inline 2^40 nodes. The nodes inlined in all are limited to a budget that grows with the file (every
node of the file may be inlined many times over, as real models do, but not exponentially often) up to a fixed
cap, and calls nest at most ``MAX_DEPTH`` deep; past either, one error names the function. Each inlined node
costs a constant amount of work, so reading is linear in the size of the inlined graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.dtypes import dtype_name
from pegasus.importers.tensorflow.tensors import decode_tensor

#: nodes inlined in all: a base plus this many per node in the file, at most MAX_INLINED
INLINED_PER_FILE_NODE = 100
INLINED_BASE = 100_000
MAX_INLINED = 1_000_000
#: outputs one node may declare (a Split's num_split...)
MAX_OUTPUTS = 1 << 16
#: calls nested deeper than this are refused
MAX_DEPTH = 100
#: ops that call a function named by their attribute ``f``
CALL_OPS = ("StatefulPartitionedCall", "PartitionedCall")
#: ops that call then_branch or else_branch on inputs 1.. as input 0 says
IF_OPS = ("If", "StatelessIf")


def tensor_name(node: str, index: int) -> str:
    return node if index == 0 else f"{node}:{index}"


def graph_ref(ref: str) -> str:
    """A GraphDef input reference (``n``, ``n:0``, ``n:2``) as a tensor name."""
    node, _, index = ref.partition(":")
    return tensor_name(node, int(index)) if index.isdecimal() else ref


def shape_dims(shape) -> list[int | None] | None:
    """A TensorShapeProto as a list (None for an unknown dimension), or None for an unknown rank."""
    if shape.unknown_rank:
        return None
    return [int(d.size) if d.size >= 0 else None for d in shape.dim]


_LIST_DECODERS = {
    "s": lambda entry, api, what: entry.decode(errors="replace"),
    "i": lambda entry, api, what: int(entry),
    "f": lambda entry, api, what: float(entry),
    "b": lambda entry, api, what: bool(entry),
    "type": lambda entry, api, what: dtype_name(entry),
    "shape": lambda entry, api, what: shape_dims(entry),
    "tensor": decode_tensor,              # its declared size checked before anything is allocated
    "func": lambda entry, api, what: entry.name,
}


def decode_attr(value, api, what: str = "attribute") -> Any:
    """An AttrValue as a plain Python value (a list value as a list of them); ``what`` names it for errors."""
    kind = value.WhichOneof("value")
    if kind == "list":
        for name, decode in _LIST_DECODERS.items():
            entries = getattr(value.list, name)
            if len(entries):
                return [decode(entry, api, what) for entry in entries]
        return []
    if kind in _LIST_DECODERS:
        return _LIST_DECODERS[kind](getattr(value, kind), api, what)
    return None      # a placeholder of a generic function: traced functions have none


def decode_attrs(node_def, api, where: str = "") -> dict[str, Any]:
    node = f"node '{node_def.name}' ({node_def.op}{', ' + where if where else ''})"
    return {key: decode_attr(value, api, f"{node}, attribute '{key}'") for key, value in node_def.attr.items()}


@dataclass
class ReadGraph:
    """What reading a graph produced: nodes (functions inlined as far as ``GraphReader.expand`` went),
    constants, and what is known of each tensor's dtype and (TF1's ``_output_shapes``) shape."""

    nodes: list[SourceNode] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, list[int | None] | None] = field(default_factory=dict)
    producer: dict[str, SourceNode] = field(default_factory=dict)
    control: dict[str, list[str]] = field(default_factory=dict)   # node name -> its control inputs' node names


@dataclass
class _Call:
    function: str
    attrs: dict[str, Any]
    chain: tuple[str, ...]      # the functions being inlined around this call (a function calling itself stops)
    branches: tuple[str, str] | None = None     # an If's (then, else) functions: which one depends on input 0


class GraphReader:
    """Turns a GraphDef into a ``ReadGraph``; ``expand`` inlines the function calls a set of tensors needs (only
    those, in the order they are met, so the signature a user imports gets the clean names)."""

    def __init__(self, api, library, where: str | None = None):
        self.api, self.where = api, where
        self.functions = {f.signature.name: f for f in library.function}
        self.out = ReadGraph()
        self._taken: set[str] = set()
        self._suffix: dict[str, int] = {}       # a taken name -> the next _k to try for it
        self._calls: dict[str, _Call] = {}      # call node name -> what it calls, until inlined
        self._templates: dict[str, tuple] = {}
        self._specs: dict[str, list] = {}       # op type or function -> its output arguments
        self._signatures: dict[str, tuple | None] = {}   # op type -> its input arguments and attribute defaults
        self._file_nodes = sum(len(f.node_def) for f in library.function)
        self._inlined = 0

    @property
    def budget(self) -> int:
        """How many nodes inlining may add in all."""
        return min(MAX_INLINED, INLINED_BASE + INLINED_PER_FILE_NODE * self._file_nodes)

    # ---- outputs of a node -----------------------------------------------------------------------
    def _arg_specs(self, op: str) -> list[tuple[str, str, int, str, str]]:
        """An op's (or a library function's) output arguments as plain tuples (name, type_list_attr, type,
        type_attr, number_attr), read from the protobuf once per op type."""
        if op not in self._specs:
            if op in self.functions:
                args = self.functions[op].signature.output_arg
            else:
                op_def = self.api.op_def(op)
                args = op_def.output_arg if op_def is not None else []
            self._specs[op] = [(a.name, a.type_list_attr, int(a.type), a.type_attr, a.number_attr) for a in args]
        return self._specs[op]

    def _output_args(self, op: str, attrs: dict[str, Any]) -> list[tuple[str, list[str | None]]]:
        """(output argument name, the dtype of each tensor it holds) of a node, in order."""
        if op in self.functions:
            return [(name, [dtype_name(enum) if enum else attrs.get(type_attr)])
                    for name, _, enum, type_attr, _ in self._arg_specs(op)]
        args = []
        for name, type_list_attr, enum, type_attr, number_attr in self._arg_specs(op):
            if type_list_attr:
                types = attrs.get(type_list_attr)
                types = list(types) if isinstance(types, list) else []
            else:
                dtype = dtype_name(enum) if enum else attrs.get(type_attr)
                count = attrs.get(number_attr, 1) if number_attr else 1
                count = count if isinstance(count, int) else 1
                if count > MAX_OUTPUTS:
                    raise PegasusError(f"a {op} node declares {count} outputs ({number_attr}); pegasus reads at "
                                       f"most {MAX_OUTPUTS}", where=self.where)
                types = [dtype] * count
            args.append((name, types))
        return args

    def _check_signature(self, op: str, attrs: dict[str, Any], name: str, inputs: list[str], where: str
                         ) -> dict[str, Any]:
        """A node of a registered op checked against its OpDef before any converter sees it, as TensorFlow's
        importer does: every attribute without a default is set (one the file leaves empty takes the default),
        and the node has as many data inputs as its input arguments take. Returns the attributes."""
        if op in self.functions:
            return attrs
        if op not in self._signatures:
            op_def = self.api.op_def(op)
            self._signatures[op] = None if op_def is None else (
                [(a.name, a.number_attr, a.type_list_attr) for a in op_def.input_arg],
                {a.name: a.default_value if a.HasField("default_value") else None for a in op_def.attr})
        signature = self._signatures[op]
        if signature is None:                     # not a TensorFlow op: the converter table reports it
            return attrs
        args, declared = signature
        node = f"node '{name}' ({op}{', ' + where if where else ''})"
        for key, default in declared.items():
            if attrs.get(key) is None:
                if default is None:
                    raise PegasusError(f"{node} has no value for its attribute '{key}'", where=self.where)
                attrs = {**attrs, key: decode_attr(default, self.api, f"{node}, attribute '{key}'")}
        expected = 0
        for arg, number_attr, type_list_attr in args:
            count = attrs.get(number_attr) if number_attr else attrs.get(type_list_attr) if type_list_attr else 1
            count = len(count) if isinstance(count, list) else count
            if not isinstance(count, int) or count < 0:
                raise PegasusError(f"{node}: the size of its input '{arg}' ({number_attr or type_list_attr}) is "
                                   f"{count!r}", where=self.where)
            expected += count
        if expected != len(inputs):
            raise PegasusError(f"{node} has {len(inputs)} data input(s) but a {op} takes {expected}",
                               where=self.where)
        return attrs

    def _fresh(self, name: str, prefix: str) -> str:
        candidate = name if name not in self._taken else f"{prefix}/{name}"
        base, k = candidate, self._suffix.get(candidate, 0)
        while candidate in self._taken:
            k += 1
            candidate = f"{base}_{k}"
        self._suffix[base] = k
        self._taken.add(candidate)
        return candidate

    # ---- nodes -------------------------------------------------------------------------------------
    def read_graph(self, graph_def) -> ReadGraph:
        self._taken.update(node.name for node in graph_def.node)
        self._file_nodes += len(graph_def.node)
        for node_def in graph_def.node:
            inputs = [graph_ref(ref) for ref in node_def.input if not ref.startswith("^")]
            control = [ref[1:] for ref in node_def.input if ref.startswith("^")]
            self._add(node_def.op, decode_attrs(node_def, self.api), node_def.name, inputs, control, "", ())
        return self.out

    def _add(self, op: str, attrs: dict[str, Any], name: str, inputs: list[str], control: list[str], where: str,
             chain: tuple[str, ...]) -> None:
        if not all(inputs) or not all(control):
            raise PegasusError(f"node '{name}' ({op}{', ' + where if where else ''}) has an empty input reference",
                               where=self.where)
        attrs = self._check_signature(op, attrs, name, inputs, where)
        if control:
            self.out.control[name] = control
        types = [t for _, ts in self._output_args(op, attrs) for t in ts]
        for index, dtype in enumerate(types):
            if dtype:
                self.out.dtypes[tensor_name(name, index)] = dtype
        if "_output_shapes" in attrs:      # kept as shapes, not as an attribute (attrs may be shared: no pop)
            for index, shape in enumerate(attrs["_output_shapes"] or []):
                self.out.shapes[tensor_name(name, index)] = shape
            attrs = {key: value for key, value in attrs.items() if key != "_output_shapes"}
        if op == "Const":
            if not isinstance(attrs.get("value"), np.ndarray):
                raise PegasusError(f"Const node '{name}'{', ' + where if where else ''} has no tensor value",
                                   where=self.where)
            # an inlined function's attributes are decoded once for all its calls: each call gets its own copy
            self.out.constants[name] = attrs["value"].copy() if where else attrs["value"]
            return
        function = attrs.get("f") if op in CALL_OPS else op if op in self.functions else None
        if function is not None:
            self._calls[name] = _Call(str(function), attrs, chain)
        elif op in IF_OPS:
            self._calls[name] = _Call("", attrs, chain, (str(attrs.get("then_branch")), str(attrs.get("else_branch"))))
        node = SourceNode(name, op, inputs, [tensor_name(name, index) for index in range(max(1, len(types)))],
                          attrs, where=where)
        self.out.nodes.append(node)
        for output in node.outputs:
            self.out.producer[output] = node

    def _template(self, function: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, dict[str, int]]]:
        """A function's nodes by name, their decoded attributes and (filled as references need them) the flat
        index where each output argument starts: worked out once per function, shared by every call of it."""
        if function not in self._templates:
            inner = {node_def.name: node_def for node_def in self.functions[function].node_def}
            decoded = {name: decode_attrs(node_def, self.api, f"in function {function}")
                       for name, node_def in inner.items()}
            self._templates[function] = (inner, decoded, {})
        return self._templates[function]

    def expand(self, tensors: Iterable[str], stop: Iterable[str] = (),
               value_of: Callable[[str], np.ndarray | None] | None = None) -> None:
        """Inline, recursively, every function call that ``tensors`` depend on, not looking past ``stop``; an If
        whose predicate ``value_of`` knows becomes a call of the branch it takes (else it stays an If)."""
        stop = set(stop)
        stack, seen, inlined = [t for t in tensors if t not in stop], set(), set()
        while stack:
            tensor = stack.pop()
            node = self.out.producer.get(tensor)
            if node is None or tensor in seen:
                continue
            seen.add(tensor)
            call = self._calls.get(node.name)
            args = node.inputs
            if call is not None and call.branches is not None:
                predicate = value_of(node.inputs[0]) if value_of else None
                if predicate is None:
                    call = None
                else:
                    call.function = call.branches[0 if np.asarray(predicate).reshape(-1)[0] else 1]
                    args = node.inputs[1:]
            if call is None:
                stack.extend(t for t in node.inputs if t and t not in stop)
                continue
            del self._calls[node.name]
            self._inline(node, call, args)
            inlined.add(id(node))
            seen.discard(tensor)
            stack.append(tensor)
        if inlined:
            self.out.nodes = [node for node in self.out.nodes if id(node) not in inlined]

    def _inline(self, node: SourceNode, call: _Call, args: list[str]) -> None:
        function = call.function
        if function not in self.functions:
            raise PegasusError(f"node '{node.name}' calls function '{function}', which the graph's library lacks")
        if function in call.chain:
            raise PegasusError(f"function '{function}' calls itself (through node '{node.name}')")
        fdef = self.functions[function]
        signature = fdef.signature
        if len(call.chain) >= MAX_DEPTH:
            raise PegasusError(f"function '{function}' is called {len(call.chain) + 1} calls deep; pegasus inlines "
                               f"at most {MAX_DEPTH} nested calls", where=self.where)
        self._inlined += len(fdef.node_def) + len(signature.output_arg)
        if self._inlined > self.budget:
            raise PegasusError(f"inlining function '{function}' ({len(call.chain) + 1} calls deep) takes the graph "
                               f"past {self.budget} inlined nodes: its functions call each other too many times "
                               "(nested calls multiply)", where=self.where)
        if len(args) != len(signature.input_arg):
            raise PegasusError(f"node '{node.name}' passes {len(args)} inputs to function '{function}', which "
                               f"takes {len(signature.input_arg)}")
        bound = {arg.name: tensor for arg, tensor in zip(signature.input_arg, args)}
        inner, decoded, offsets = self._template(function)
        renamed = {node_name: self._fresh(node_name, node.name) for node_name in inner}

        def resolve(ref: str) -> str:
            name, _, rest = ref.partition(":")
            if not rest:
                return bound[name] if name in bound else renamed.get(name, name)
            arg, _, index = rest.rpartition(":")
            if name not in inner or not index.isdecimal():
                raise PegasusError(f"function '{function}' reads '{ref}', which it does not define", where=self.where)
            if name not in offsets:
                start, offsets[name] = 0, {}
                for arg_name, types in self._output_args(inner[name].op, decoded[name]):
                    offsets[name][arg_name] = start
                    start += max(1, len(types))
            return tensor_name(renamed[name], (offsets[name].get(arg, 0) if arg else 0) + int(index))

        where, chain = f"in function {function}", call.chain + (function,)
        for node_def in fdef.node_def:
            inputs = [resolve(ref) for ref in node_def.input if not ref.startswith("^")]
            control = [renamed.get(ref[1:], ref[1:]) for ref in node_def.input if ref.startswith("^")]
            self._add(node_def.op, decoded[node_def.name], renamed[node_def.name], inputs, control, where, chain)
        for index, arg in enumerate(signature.output_arg):
            if not fdef.ret.get(arg.name):
                raise PegasusError(f"function '{function}' does not say which tensor its output '{arg.name}' is",
                                   where=self.where)
            output = tensor_name(node.name, index)
            identity = SourceNode(f"{node.name}/output_{index}" if index else node.name, "Identity",
                                  [resolve(fdef.ret[arg.name])], [output], where=where)
            self.out.nodes.append(identity)
            self.out.producer[output] = identity
