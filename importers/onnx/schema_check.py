"""Each ONNX node held to its operator's schema before a converter reads it: the number of inputs and outputs,
required inputs not left empty, required attributes present, no attribute the op does not define, each attribute
of the type the schema declares and holding a value of that type, its strings UTF-8 text.

A model file is data from a stranger: a node may be written with any op type, any inputs and any attributes.
The converters rely on what the ONNX standard promises (Pad-2 has ``pads``, Reshape two inputs), so the
promise is checked here once, from ``onnx.defs``, for every node — a file that breaks it gets one line naming
the node, not an IndexError or KeyError from deep inside a converter. Ops without a schema (custom domains)
are left to their converters.
"""

from __future__ import annotations

import onnx
from onnx import AttributeProto
from onnx.defs import OpSchema

from pegasus.errors import PegasusError

#: AttributeProto.type -> the field that holds its value
_FIELDS = {AttributeProto.FLOAT: "f", AttributeProto.INT: "i", AttributeProto.STRING: "s", AttributeProto.TENSOR: "t",
           AttributeProto.GRAPH: "g", AttributeProto.SPARSE_TENSOR: "sparse_tensor", AttributeProto.TYPE_PROTO: "tp",
           AttributeProto.FLOATS: "floats", AttributeProto.INTS: "ints", AttributeProto.STRINGS: "strings",
           AttributeProto.TENSORS: "tensors", AttributeProto.GRAPHS: "graphs",
           AttributeProto.SPARSE_TENSORS: "sparse_tensors", AttributeProto.TYPE_PROTOS: "type_protos"}
_SINGULAR = {"f", "i", "s", "t", "g", "sparse_tensor", "tp"}


def _type_name(value: int) -> str:
    try:
        return AttributeProto.AttributeType.Name(value)
    except ValueError:
        return str(value)


def _holds(attr: AttributeProto, field: str) -> bool:
    return attr.HasField(field) if field in _SINGULAR else len(getattr(attr, field)) > 0


def check_attribute(attr: AttributeProto, what: str) -> None:
    """The attribute's declared type is known, its value is in that type's field and in no other's."""
    field = _FIELDS.get(attr.type)
    if field is None:
        raise PegasusError(f"{what} has no valid type ({_type_name(attr.type)})")
    others = [name for name in _FIELDS.values() if name != field and _holds(attr, name)]
    if others:
        raise PegasusError(f"{what} is declared {_type_name(attr.type)} but holds a value of another type "
                           f"('{others[0]}')")
    for text in [attr.s] if attr.type == AttributeProto.STRING else list(attr.strings):
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise PegasusError(f"{what} is not UTF-8 text ({text[:20]!r})") from None


def _schema(node: onnx.NodeProto, opset: int) -> OpSchema | None:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:  # an opset newer than this onnx knows: its newest schema
        return onnx.defs.get_schema(node.op_type, max(1, min(opset, onnx.defs.onnx_opset_version())), domain)
    except Exception:  # noqa: BLE001 — no schema (a custom or unknown op): its converter, if any, checks
        return None


def _check_params(params, given: list[str], low: int, high: int, what: str, kind: str) -> None:
    if not low <= len(given) <= high:
        expected = f"{low}" if low == high else f"{low} to {high}" if high < 2**30 else f"at least {low}"
        raise PegasusError(f"{what} has {len(given)} {kind}s; its op takes {expected}")
    for index, name in enumerate(given):
        param = params[min(index, len(params) - 1)] if params else None
        if param is not None and not name and param.option != OpSchema.FormalParameterOption.Optional:
            raise PegasusError(f"{what}: {kind} {index} ('{param.name}') is required but left empty")


def check_names(graph: onnx.GraphProto) -> None:
    """Every name in the graph is text: protobuf hands a string field that is not UTF-8 over as bytes."""
    named = [("graph input", vi.name) for vi in graph.input] + [("graph output", vi.name) for vi in graph.output]
    named += [("value_info", vi.name) for vi in graph.value_info] + [("initializer", t.name) for t in graph.initializer]
    for index, node in enumerate(graph.node):
        named += [(f"node {index}", node.name), (f"node {index} op type", node.op_type),
                  (f"node {index} domain", node.domain)]
        named += [(f"node {index} input", n) for n in node.input] + [(f"node {index} output", n) for n in node.output]
        named += [(f"node {index} attribute", a.name) for a in node.attribute]
    for what, name in named:
        if not isinstance(name, str):
            raise PegasusError(f"{what} has a name that is not UTF-8 text ({bytes(name)[:40]!r})")


def check_node(node: onnx.NodeProto, opset: int, describe: str) -> None:
    """Refuse a node that breaks its op's schema at the model's opset (one line naming the node)."""
    seen: set[str] = set()
    for attr in node.attribute:
        what = f"{describe} attribute '{attr.name}'"
        if attr.name in seen:
            raise PegasusError(f"{describe} has attribute '{attr.name}' twice")
        seen.add(attr.name)
        check_attribute(attr, what)
    schema = _schema(node, opset)
    if schema is None:
        return
    _check_params(schema.inputs, list(node.input), schema.min_input, schema.max_input, describe, "input")
    _check_params(schema.outputs, list(node.output), schema.min_output, schema.max_output, describe, "output")
    declared = schema.attributes
    for attr in node.attribute:
        spec = declared.get(attr.name)
        if spec is None:  # as onnx.checker and onnxruntime: an attribute the op does not define is an error
            raise PegasusError(f"{describe} has attribute '{attr.name}', which {node.op_type} (opset "
                               f"{schema.since_version}) does not define")
        if int(spec.type) != int(attr.type):
            raise PegasusError(f"{describe} attribute '{attr.name}' is {_type_name(attr.type)}; "
                               f"{node.op_type} declares it {_type_name(int(spec.type))}")
    for name, spec in declared.items():
        if spec.required and name not in seen:
            raise PegasusError(f"{describe} lacks its required attribute '{name}'")
