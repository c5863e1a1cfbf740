"""ONNX operator converters, registered per op type with the opset version they apply from.

The mechanism is the one every importer shares (importers/common/converters.py): ``@converter("Clip",
since=11)`` applies to models whose default-domain opset is >= 11 until a newer registration takes over.
``direct("Relu", ...)`` registers the common case: same name, attributes copied by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import onnx

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ConverterTable, ConvertFn, ImportContext, NodeAttrs, SourceNode
from pegasus.importers.onnx.tensor_data import tensor_to_array
from pegasus.ir.builder import GraphBuilder
from pegasus.ops.registry import get_op

TABLE = ConverterTable("ONNX", version_name="opset")


class OnnxNode(SourceNode):
    """An ONNX node with its attributes decoded to Python values."""

    @classmethod
    def from_proto(cls, proto: onnx.NodeProto, index: int) -> OnnxNode:
        name = proto.name or f"{proto.op_type}_{index}"
        attrs = NodeAttrs({a.name: _attribute_value(a, f"{proto.op_type} node '{name}' attribute '{a.name}'")
                           for a in proto.attribute}, f"{proto.op_type} node '{name}'")
        domain = "" if proto.domain in ("", "ai.onnx") else proto.domain
        return cls(name, proto.op_type, list(proto.input), list(proto.output), attrs, domain)


def _attribute_value(attr: onnx.AttributeProto, what: str) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    if isinstance(value, onnx.TensorProto):
        return tensor_to_array(value, what)
    return value


class OnnxContext(ImportContext):
    """The shared import context plus the model's opset."""

    def __init__(self, builder: GraphBuilder, opset: int):
        super().__init__(builder)
        self.opset = opset


def converter(op_type: str, since: int = 1, domain: str = "") -> Callable[[ConvertFn], ConvertFn]:
    return TABLE.register(op_type, since, domain)


def direct(*op_types: str, since: int = 1, rename: dict[str, str] | None = None) -> None:
    """Register converters that map an ONNX op onto the registry op of the same name.

    ONNX attributes are copied onto the op's Attrs by name (``rename`` maps ONNX names to ours);
    an attribute the op does not know is an error, never silently dropped.
    """
    for op_type in op_types:
        fields = {f.name for f in dataclasses.fields(get_op(op_type).Attrs)}

        def convert(ctx: OnnxContext, node: OnnxNode, op_type: str = op_type, fields=fields) -> None:
            attrs = {}
            for key, value in node.attrs.items():
                key = (rename or {}).get(key, key)
                if key not in fields:
                    raise PegasusError(f"{op_type} node '{node.name}': attribute '{key}' is not supported")
                attrs[key] = value
            ctx.emit(op_type, node.inputs, attrs, node=node)

        converter(op_type, since)(convert)


def find_converter(op_type: str, opset: int, domain: str = "") -> ConvertFn | None:
    """The converter for ``op_type`` at ``opset``: the newest registration with since <= opset."""
    return TABLE.find(op_type, opset, domain)


def supported_op_types() -> list[str]:
    return TABLE.op_types()
