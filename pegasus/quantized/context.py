"""What an integer lowering rule works with: the ``LoweringContext`` (the source graph and its quantization
table, the integer graph being built, and where each float tensor lives in it), the grid helpers, and the
table of rules (``@integer_rule``). Rules import this module; the driver (``pegasus.quantized.lower``)
imports the rules and walks the graph, so neither the rules nor this module import the driver.

A rule is registered per op name (``@integer_rule("Conv")``) and returns None when it lowered the node, or a
reason string when it cannot (e.g. "int16 input has no lookup table"); the node then runs in float between
converters. A rule may be registered for one rounding only (``@integer_rule("Add", rounding="tflite")``:
TFLite's own ADD structure); it then takes precedence over the rule for every rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import QuantParams
from pegasus.ops.fixedpoint import quantize_values
from pegasus.ops.integer import round_to_bfloat16
from pegasus.ops.registry import make_attrs
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.quantized.requant import requantize_attrs

Rule = Callable[["LoweringContext", Node], "str | None"]
_RULES: dict[tuple[str, str | None], Rule] = {}


def integer_rule(*ops: str, rounding: str | None = None) -> Callable[[Rule], Rule]:
    """Register the integer lowering of one or more float ops (for tables of ``rounding`` only, when given)."""
    def register(fn: Rule) -> Rule:
        for op in ops:
            if (op, rounding) in _RULES:
                raise ValueError(f"integer rule for {op} registered twice")
            _RULES[(op, rounding)] = fn
        return fn
    return register


def registered_rules() -> dict[tuple[str, str | None], Rule]:
    """(op, rounding or None) -> rule, as registered so far (importing ``pegasus.quantized.rules`` registers all)."""
    return _RULES


class LoweringContext:
    """What rules see: the source graph and table, and a builder for the integer graph."""

    def __init__(self, source: Graph, table: QuantTable):
        self.source = source
        self.table = table
        self.graph = Graph(source.name)
        self.builder = GraphBuilder(self.graph, fold=False)
        self.consumers = source.consumers()
        self.producers = source.producers()
        self.homes: dict[str, tuple[str, TensorQuant | None]] = {}
        self._ints: dict[str, str] = {}
        self._floats: dict[str, str] = {}
        self.skipped: set[str] = set()  # nodes a rule fused into another (e.g. a ReLU after a Conv)
        self.float_layers: list[tuple[str, str, str]] = []
        self.notes: list[tuple[str, str]] = []

    # ---- parameters --------------------------------------------------------------------------------
    def quant(self, tensor: str) -> TensorQuant:
        entry = self.table.get(tensor)
        if entry is None:
            raise PegasusError(f"tensor '{tensor}' has no entry in the .quantize file (re-run pegasus quantize "
                               "without --rebuild to fill it in)", where=self.table.path)
        return entry

    def is_integer(self, tensor: str) -> bool:
        entry = self.table.get(tensor)
        return entry is not None and entry.is_integer

    def value(self, tensor: str) -> np.ndarray | None:
        return self.source.value_of(tensor)

    def note(self, layer: str, text: str) -> None:
        """Record something a rule had to adapt in ``layer`` (shown by inference and export)."""
        self.notes.append((layer, text))

    def single_consumer(self, tensor: str) -> Node | None:
        """The only layer reading ``tensor`` if there is exactly one and the tensor is not a graph output."""
        users = self.consumers.get(tensor, [])
        if len(users) == 1 and tensor not in self.source.outputs:
            return users[0]
        return None

    # ---- building ----------------------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[str], attrs: Any = None, *, name: str,
             outputs: Sequence[str] | None = None, quant: Sequence[TensorQuant | None] | None = None) -> list[str]:
        """Add a layer; ``quant`` attaches each output's quantization to its type."""
        if isinstance(attrs, dict):
            attrs = make_attrs(op, **attrs)
        fresh = [self.graph.unique_tensor_name(o) if o else "" for o in outputs] if outputs else None
        names = self.builder.emit(op, list(inputs), attrs, name=self.graph.unique_node_name(name), outputs=fresh)
        for out, q in zip(names, quant or []):
            if q is not None and q.is_integer:
                self.graph.tensors[out].type = replace(self.graph.type_of(out), quant=quant_params(q))
        return names

    def constant(self, base: str, array: np.ndarray) -> str:
        return self.builder.add_constant(base, array)

    def quantized_constant(self, tensor: str, q: TensorQuant) -> str:
        """A float constant of the source graph on ``q``'s grid."""
        data = self.value(tensor)
        scale, zero = broadcast_params(q, data.ndim)
        name = self.constant(f"{tensor}_q", quantize_values(data, scale, zero, q.numpy_dtype))
        self.graph.tensors[name].type = replace(self.graph.type_of(name), quant=quant_params(q))
        return name

    def set_home(self, tensor: str, name: str, q: TensorQuant | None) -> None:
        self.homes[tensor] = (name, q)
        (self._ints if q is not None else self._floats)[tensor] = name

    # ---- representations ---------------------------------------------------------------------------
    def as_float(self, tensor: str) -> str:
        """The tensor as float32 (dequantized if its home is integer)."""
        if tensor in self._floats:
            return self._floats[tensor]
        value = self.value(tensor)
        if value is not None:
            if self.table.quantizer == "qbfloat16" and value.dtype == np.float32:
                value = round_to_bfloat16(value)
            name = self.constant(tensor, value)
        else:
            home, q = self.homes[tensor]
            scale, zero = self.param_constants(tensor, q)
            name = self.emit("DequantizeLinear", [home, scale, zero], {"axis": q.axis or 0},
                             name=f"{tensor}_dequantize", outputs=[f"{tensor}_f"])[0]
        self._floats[tensor] = name
        return name

    def as_int(self, tensor: str, q: TensorQuant | None = None) -> str:
        """The tensor on its table grid (or on ``q``'s grid when given), converting as needed."""
        q = q or self.quant(tensor)
        key = tensor if q is self.table.get(tensor) else f"{tensor}@{q.precision}/{q.scale}/{q.zero_point}"
        if key in self._ints:
            return self._ints[key]
        if self.value(tensor) is not None:
            name = self.quantized_constant(tensor, q)
        else:
            home, home_q = self.homes[tensor]
            if home_q is None:
                scale, zero = self.param_constants(tensor, q)
                name = self.emit("QuantizeLinear", [home, scale, zero], self.quantize_attrs(q),
                                 name=f"{tensor}_quantize", outputs=[f"{tensor}_q"], quant=[q])[0]
            elif same_grid(home_q, q):
                name = home
            else:
                name = self.emit("Requantize", [home], requantize_attrs(home_q, q, rounding=self.table.rounding),
                                 name=f"{tensor}_requantize", outputs=[f"{tensor}_{q.qtype}"], quant=[q])[0]
        self._ints[key] = name
        return name

    def quantize_attrs(self, q: TensorQuant) -> dict:
        """QuantizeLinear's attributes onto ``q``: TFLite's QUANTIZE rounds float32 quotients half away from 0."""
        if self.table.rounding == "tflite":
            return {"axis": q.axis or 0, "precision": "float32", "rounding": "half_away"}
        return {"axis": q.axis or 0}

    def param_constants(self, tensor: str, q: TensorQuant) -> tuple[str, str]:
        """Scale (in the tensor's own float type, which Dequantize outputs) and zero point constants."""
        dtype = self.source.type_of(tensor).dtype.numpy if tensor in self.source.tensors else np.float32
        scale = np.asarray(q.scale, dtype=dtype if dtype.kind == "f" else np.float32)
        zero = np.asarray(q.zero_point, dtype=q.numpy_dtype)
        if not q.per_channel:
            scale, zero = scale.reshape(()), zero.reshape(())
        return self.constant(f"{tensor}_scale", scale), self.constant(f"{tensor}_zero_point", zero)

    # ---- fallbacks ---------------------------------------------------------------------------------
    def run_in_float(self, node: Node, reason: str | None) -> None:
        """Emit ``node`` on float inputs; its outputs' home is float, or integer when the table says so."""
        inputs = [self.as_float(name) if name else "" for name in node.inputs]
        outs = self.emit(node.op, inputs, node.attrs, name=node.name,
                         outputs=[f"{o}_f" if self._quantize_output(o) else o for o in node.outputs])
        if reason is not None:
            self.float_layers.append((node.name, node.op, reason))
        for original, out in zip(node.outputs, outs):
            if not original:
                continue
            self._floats[original] = out
            if self._quantize_output(original):
                q = self.quant(original)
                scale, zero = self.param_constants(original, q)
                qname = self.emit("QuantizeLinear", [out, scale, zero], self.quantize_attrs(q),
                                  name=f"{original}_quantize", outputs=[original], quant=[q])[0]
                self.set_home(original, qname, q)
            else:
                self.set_home(original, out, None)

    def round_outputs_to_bfloat16(self, node: Node) -> None:
        """Round ``node``'s float outputs to bfloat16 (a qbfloat16 table): their home becomes the rounded tensor."""
        for out in node.outputs:
            if not out or not self.graph.type_of(self._floats[out]).dtype.is_float:
                continue
            rounded = self.emit("BFloat16Round", [self._floats[out]], name=f"{node.name}_bf16",
                                outputs=[f"{out}_bf16"])[0]
            self.set_home(out, rounded, None)

    def _quantize_output(self, tensor: str) -> bool:
        return bool(tensor) and self.is_integer(tensor) and tensor not in self.source.outputs


def quant_params(q: TensorQuant) -> QuantParams:
    return QuantParams(tuple(float(s) for s in q.scale), tuple(int(z) for z in q.zero_point),
                       q.axis if q.per_channel else None)


def broadcast_params(q: TensorQuant, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point shaped to broadcast against a rank-``rank`` tensor."""
    scale, zero = q.scales(), q.zero_points()
    if q.per_channel and scale.size > 1:
        shape = [-1 if i == (q.axis or 0) % rank else 1 for i in range(rank)]
        return scale.reshape(shape), zero.reshape(shape)
    return scale.reshape(()), zero.reshape(())


def same_grid(a: TensorQuant, b: TensorQuant) -> bool:
    return a.qtype == b.qtype and list(a.scale) == list(b.scale) and list(a.zero_point) == list(b.zero_point)
