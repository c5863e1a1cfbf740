"""ONNX operator converters, registered per op type with the opset version they apply from.

A converter translates one ONNX node onto registry ops through ``OnnxContext``; it never computes
the op itself. ``@converter("Clip", since=11)`` applies to models whose default-domain opset is >= 11
until a newer registration takes over (the newest ``since`` <= the model's opset wins).
``direct("Relu", ...)`` registers the common case: same name, attributes copied by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from pegasus.errors import PegasusError
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import get_op

ConvertFn = Callable[["OnnxContext", "OnnxNode"], None]
_CONVERTERS: dict[str, list[tuple[int, ConvertFn]]] = {}


@dataclass
class OnnxNode:
    """An ONNX node with its attributes decoded to Python values."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, proto: onnx.NodeProto, index: int) -> OnnxNode:
        attrs = {a.name: _attribute_value(a) for a in proto.attribute}
        name = proto.name or f"{proto.op_type}_{index}"
        domain = "" if proto.domain in ("", "ai.onnx") else proto.domain
        return cls(name, proto.op_type, domain, list(proto.input), list(proto.output), attrs)

    def input(self, i: int) -> str:
        """Name of input i, or '' when it is omitted."""
        return self.inputs[i] if i < len(self.inputs) else ""


def _attribute_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return value


class OnnxContext:
    """What a converter may use: the opset, tensor types, compile-time constants, and ``emit``."""

    def __init__(self, builder: GraphBuilder, opset: int):
        self.builder = builder
        self.opset = opset

    def type_of(self, name: str) -> TensorType:
        return self.builder.type_of(name)

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of a tensor, or None if it is only known at run time (or omitted)."""
        return self.builder.value(name)

    def constant(self, node: OnnxNode, index: int, what: str, default: Any = None) -> np.ndarray | None:
        """Input ``index`` of ``node`` as a compile-time constant; ``default`` if the input is omitted."""
        name = node.input(index)
        if not name:
            return None if default is None else np.asarray(default)
        return self.builder.constant(name, node=node.name, op=node.op_type, what=what)

    def add_constant(self, base: str, array: np.ndarray) -> str:
        return self.builder.add_constant(base, array)

    def emit(self, op: str, inputs: list[str], attrs: dict[str, Any] | None = None, *, node: OnnxNode,
             outputs: list[str] | None = None, suffix: str = "") -> list[str]:
        """Emit a registry op. With ``outputs`` None and no suffix, it writes the ONNX node's outputs."""
        if outputs is None and not suffix:
            outputs = node.outputs
        name = node.name + suffix
        count = len(outputs) if outputs is not None else 1
        return self.builder.emit(op, inputs, attrs or {}, name=name, outputs=outputs, num_outputs=count)


def converter(op_type: str, since: int = 1, domain: str = "") -> Callable[[ConvertFn], ConvertFn]:
    def decorate(fn: ConvertFn) -> ConvertFn:
        key = f"{domain}::{op_type}"
        _CONVERTERS.setdefault(key, []).append((since, fn))
        _CONVERTERS[key].sort(key=lambda item: item[0])
        return fn
    return decorate


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
    candidates = [fn for since, fn in _CONVERTERS.get(f"{domain}::{op_type}", []) if since <= opset]
    return candidates[-1] if candidates else None


def supported_op_types() -> list[str]:
    return sorted(key.split("::", 1)[1] for key in _CONVERTERS)
