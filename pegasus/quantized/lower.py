"""Rewrite a float graph + its quantization table into the integer graph that quantized inference and
the exporters run.

Each float tensor gets a *home* representation: integer (its table entry's grid) when its producer
runs in integer, float when its producer runs in float (a float32 layer of a hybrid model, qbfloat16,
or an op without an integer kernel). Consumers ask the context for the representation they need
(``as_int``/``as_float``) and conversions (QuantizeLinear, DequantizeLinear, Requantize) are inserted
once per tensor. Graph inputs and outputs keep the float graph's types, as in Glow's bundles: a float input is
quantized and a float output dequantized by the graph itself (an imported pre-quantized TFLite model's graph
already has integer inputs and outputs, behind its own DequantizeLinear/QuantizeLinear).

How each op becomes integer code is its *rule*, registered per op name (``@integer_rule("Conv")``) in
``pegasus.quantized.rules``. A rule returns None when it lowered the node, or a reason string when it
cannot (e.g. "int16 input has no lookup table"); the node then runs in float between converters and
the reason is listed in ``LoweredGraph.float_layers`` so that callers can show it.

The table's ``rounding`` (pegasus.ops.fixedpoint.ROUNDINGS) is the arithmetic of every integer op the
rules emit (their ``rounding`` attribute). A rule may be registered for one rounding only
(``@integer_rule("Add", rounding="tflite")``: TFLite's own ADD structure); it then takes precedence over
the rule for every rounding.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
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


def rules() -> dict[tuple[str, str | None], Rule]:
    import pegasus.quantized.rules  # noqa: F401  (importing registers every rule)
    return _RULES


def rule_for(op: str, rounding: str) -> Rule | None:
    """The rule lowering ``op`` under a table of ``rounding``: the one made for that rounding, else the general one."""
    available = rules()
    return available.get((op, rounding)) or available.get((op, None))


@dataclass
class LoweredGraph:
    """The integer graph, the layers that stayed float (layer, op, reason), where each float tensor lives in
    it (name in the lowered graph, and its quantization when integer), and what the rules had to adapt
    (layer, note), e.g. a bias too large for its table grid."""

    graph: Graph
    float_layers: list[tuple[str, str, str]] = field(default_factory=list)
    homes: dict[str, tuple[str, TensorQuant | None]] = field(default_factory=dict)
    notes: list[tuple[str, str]] = field(default_factory=list)


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
            scale, zero = self._param_constants(tensor, q)
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
                scale, zero = self._param_constants(tensor, q)
                name = self.emit("QuantizeLinear", [home, scale, zero], self.quantize_attrs(q),
                                 name=f"{tensor}_quantize", outputs=[f"{tensor}_q"], quant=[q])[0]
            elif same_grid(home_q, q):
                name = home
            else:
                from pegasus.quantized.rules.common import requantize_attrs

                name = self.emit("Requantize", [home], requantize_attrs(home_q, q, rounding=self.table.rounding),
                                 name=f"{tensor}_requantize", outputs=[f"{tensor}_{q.qtype}"], quant=[q])[0]
        self._ints[key] = name
        return name

    def quantize_attrs(self, q: TensorQuant) -> dict:
        """QuantizeLinear's attributes onto ``q``: TFLite's QUANTIZE rounds float32 quotients half away from 0."""
        if self.table.rounding == "tflite":
            return {"axis": q.axis or 0, "precision": "float32", "rounding": "half_away"}
        return {"axis": q.axis or 0}

    def _param_constants(self, tensor: str, q: TensorQuant) -> tuple[str, str]:
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
                scale, zero = self._param_constants(original, q)
                qname = self.emit("QuantizeLinear", [out, scale, zero], self.quantize_attrs(q),
                                  name=f"{original}_quantize", outputs=[original], quant=[q])[0]
                self.set_home(original, qname, q)
            else:
                self.set_home(original, out, None)

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


def layer_precision(node: Node, table: QuantTable) -> str | None:
    """'float32' when the user customized the layer to float (or qbfloat16 runs it), else None."""
    custom = table.customized_layers.get(node.name)
    if custom == "float32":
        return "float32"
    outputs = [o for o in node.outputs if o]
    if outputs and all(table.get(o) is not None and not table.get(o).is_integer for o in outputs):
        return "float32"
    return None


def _reads_float(node: Node, table: QuantTable) -> bool:
    """Whether ``node`` reads a tensor whose table entry is float32 (an imported pre-quantized model's tensor
    no file grid holds); the rules take integer operands, and a DtypeConverter is the one that converts."""
    if node.op == "DtypeConverter":
        return False
    return any(name and table.get(name) is not None and not table.get(name).is_integer for name in node.inputs)


def lower_to_integer(graph: Graph, table: QuantTable) -> LoweredGraph:
    """The integer graph of ``graph`` under ``table``: float inputs and outputs, integer inside."""
    ctx = LoweringContext(graph, table)
    ctx.graph.outputs = list(graph.outputs)  # reserved: tensors the lowering invents never take these names
    for name in graph.inputs:
        ctx.builder.add_input(name, graph.type_of(name))
        ctx.set_home(name, name, None)
    bfloat = table.quantizer == "qbfloat16"
    for node in graph.nodes:
        if node.name in ctx.skipped:
            continue
        if layer_precision(node, table) == "float32" or bfloat:
            ctx.run_in_float(node, None)
            if bfloat:
                _round_outputs_to_bfloat16(ctx, node)
            continue
        if _on_raw_values(ctx, node):
            ctx.run_in_float(node, None)  # nothing to quantize: the layer runs as it is
            continue
        rule = rule_for(node.op, table.rounding)
        try:
            reason = rule(ctx, node) if rule is not None and not _reads_float(node, table) else \
                f"no integer kernel for {node.op}" if rule is None else "it reads a tensor the table keeps float"
        except ValueError as exc:  # the table's (user-edited) scales ask for a factor no integer multiplier holds
            raise PegasusError(f"layer '{node.name}' ({node.op}): {exc}; check the scales of its tensors",
                               where=table.path or None) from None
        if reason is not None:
            ctx.run_in_float(node, reason)
    ctx.graph.inputs = list(graph.inputs)
    for name in dict.fromkeys(graph.outputs):
        _bind_float_output(ctx, name)
    return LoweredGraph(ctx.graph, ctx.float_layers, dict(ctx.homes), ctx.notes)


def _on_raw_values(ctx: LoweringContext, node: Node) -> bool:
    """Whether every tensor of ``node`` is a non-float tensor of the model itself, which the table does not
    quantize: the uint8 tensors a QOperator ONNX model's MaxPool or Flatten moves between its QLinear ops."""
    tensors = [name for name in list(node.inputs) + list(node.outputs) if name]
    return bool(tensors) and all(not ctx.source.type_of(name).dtype.is_float and ctx.table.get(name) is None
                                 for name in tensors)


def _bind_float_output(ctx: LoweringContext, name: str) -> None:
    """Make the float value of graph output ``name`` carry that name (dequantizing an integer home). The name
    was reserved from the start (``ctx.graph.outputs``), so no other tensor has taken it."""
    if name not in ctx.homes:  # a constant output (e.g. Dropout's all-true mask)
        ctx.builder.set_constant(name, ctx.value(name))
        ctx.set_home(name, name, None)
        return
    home, q = ctx.homes[name]
    if q is None:
        if home != name:
            ctx.graph.rename_tensor(home, name)
            ctx.set_home(name, name, None)
        return
    scale, zero = ctx._param_constants(name, q)
    ctx.builder.emit("DequantizeLinear", [home, scale, zero], make_attrs("DequantizeLinear", axis=q.axis or 0),
                     name=ctx.graph.unique_node_name(f"{name}_dequantize"), outputs=[name])


def _round_outputs_to_bfloat16(ctx: LoweringContext, node: Node) -> None:
    for out in node.outputs:
        if not out or not ctx.graph.type_of(ctx._floats[out]).dtype.is_float:
            continue
        rounded = ctx.emit("BFloat16Round", [ctx._floats[out]], name=f"{node.name}_bf16", outputs=[f"{out}_bf16"])[0]
        ctx.set_home(out, rounded, None)


def expose_integer_io(lowered: LoweredGraph) -> Graph:
    """The lowered graph with its integer tensors as placeholders: the QuantizeLinear after each float input
    and the DequantizeLinear before each float output are dropped (``export glow --quantized-io``).
    Inputs or outputs that are float inside (a float32 layer at the edge) stay float."""
    graph = copy.deepcopy(lowered.graph)
    producers = graph.producers()
    consumers = graph.consumers()
    inputs = []
    for name in graph.inputs:
        readers = consumers.get(name, [])
        if len(readers) == 1 and readers[0].op == "QuantizeLinear" and readers[0].inputs[0] == name:
            quantize = readers[0]
            graph.nodes.remove(quantize)
            inputs.append(quantize.outputs[0])
        else:
            inputs.append(name)
    outputs = []
    for name in graph.outputs:
        node = producers.get(name)
        if node is not None and node.op == "DequantizeLinear":
            graph.nodes.remove(node)
            outputs.append(node.inputs[0])
        else:
            outputs.append(name)
    graph.inputs, graph.outputs = inputs, outputs
    graph.prune()
    return graph
