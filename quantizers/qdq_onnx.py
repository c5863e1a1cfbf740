"""A quantized model as a QDQ ONNX file: the user's original float ONNX model with QuantizeLinear →
DequantizeLinear pairs on the tensors pegasus keeps in integer, weights stored as int8/uint8 initializers
behind a DequantizeLinear, biases as int32 at ``s_x * s_w``.

This is the standard format onnxruntime (and other toolchains) turn into QLinearConv, QGemm, integer
MaxPool..., so it gives an independent engine that runs the same integer model ``pegasus inference
--dtype quantized`` simulates — the agreement check in tests/quantize — and a way to hand a calibrated
model to tools that read QDQ.

What gets a Q/DQ pair mirrors the integer graph pegasus runs (``lower_to_integer``), not just the table:

- an activation whose home in the lowered graph is integer gets its table grid;
- a pre-activation tensor whose ReLU/Clip pegasus fused into the producer's clamp (so it never exists on its
  own grid) gets the grid of the activation's output: onnxruntime then also rounds once;
- a constant is stored in integer only when every layer reading it runs an integer kernel (QConv, QMatMul,
  QAdd, QMul); the bias of a QConv/QMatMul is the very int32 vector pegasus uses;
- tensors pegasus computes in float (float32 layers of a hybrid model, ops without integer kernels) stay float.

Tensors are matched by name: the importer keeps ONNX names for activations and initializers. A tensor the
importer renamed or folded away exists only on one side and stays float in the export.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from pegasus.errors import PegasusError
from pegasus.ir.graph import Graph, Node
from pegasus.ops.facts import has_fact
from pegasus.ops.fixedpoint import quantize_values
from pegasus.quantized.context import broadcast_params
from pegasus.quantized.lower import LoweredGraph, lower_to_integer
from pegasus.quantized.params import QuantTable, TensorQuant

#: Integer kernels whose constant inputs are stored quantized in the export.
INTEGER_KERNELS = ("QConv", "QMatMul", "QAdd", "QMul")
#: Opset with per-axis QuantizeLinear/DequantizeLinear; 16-bit grids need 21.
MIN_OPSET, INT16_OPSET = 13, 21


@dataclass
class QdqModel:
    """The QDQ model, and for each activation with a Q/DQ pair the name of its integer (QuantizeLinear
    output) tensor and its grid."""

    model: onnx.ModelProto
    quantized: dict[str, str] = field(default_factory=dict)
    grids: dict[str, TensorQuant] = field(default_factory=dict)


def to_qdq_onnx(model: str | Path | onnx.ModelProto, graph: Graph, table: QuantTable) -> onnx.ModelProto:
    """The QDQ form of ``model`` (path or proto, left untouched) under ``table``; ``graph`` is what pegasus
    imported from it."""
    return build_qdq(model, graph, table).model


def build_qdq(model: str | Path | onnx.ModelProto, graph: Graph, table: QuantTable) -> QdqModel:
    """Like ``to_qdq_onnx``, also naming the integer tensor of every quantized activation."""
    proto = _load(model)
    lowered = lower_to_integer(graph, table)
    grids = activation_grids(graph, table, lowered)
    onnx_names = _onnx_tensor_names(proto)
    grids = {name: q for name, q in grids.items() if name in onnx_names}
    weights = constant_grids(graph, table, lowered)
    biases = bias_values(graph, table, lowered)
    bits16 = any(q.numpy_dtype in ("int16", "uint16") for q in [*grids.values(), *weights.values()])
    proto = _with_opset(proto, INT16_OPSET if bits16 else MIN_OPSET)
    editor = _Editor(proto)
    for name, q in weights.items():
        editor.quantize_initializer(name, _quantized_constant(graph.value_of(name), q), q)
    for name, (values, q) in biases.items():
        editor.quantize_initializer(name, values, q)
    quantized = {name: editor.quantize_activation(name, q) for name, q in grids.items()}
    editor.finish()
    onnx.checker.check_model(proto)
    return QdqModel(proto, quantized, grids)


# ---- what pegasus keeps in integer ----------------------------------------------------------------------

def activation_grids(graph: Graph, table: QuantTable, lowered: LoweredGraph) -> dict[str, TensorQuant]:
    """Grid of every non-constant tensor pegasus holds in integer: graph inputs (quantized on entry), tensors
    whose home is integer, and pre-activation tensors of fused ReLU/Clip layers (on the activation's grid)."""
    consumers = graph.consumers()
    grids: dict[str, TensorQuant] = {}
    for name, tensor in graph.tensors.items():
        if tensor.is_constant:
            continue
        if name in graph.inputs:
            q = table.get(name)
            if q is not None and q.is_integer:
                grids[name] = q
            continue
        if name in lowered.homes:
            q = lowered.homes[name][1]
            if q is not None and q.is_integer:
                grids[name] = q
            continue
        users = consumers.get(name, [])
        if len(users) == 1 and has_fact(users[0].op, "clamp") and name not in graph.outputs:
            home = lowered.homes.get(users[0].outputs[0])
            if home is not None and home[1] is not None and home[1].is_integer:
                grids[name] = home[1]
    return grids


def _integer_layers(lowered: LoweredGraph) -> dict[str, Node]:
    return {node.name: node for node in lowered.graph.nodes if node.op in INTEGER_KERNELS}


def constant_grids(graph: Graph, table: QuantTable, lowered: LoweredGraph) -> dict[str, TensorQuant]:
    """Constants (other than biases) that every reader consumes on their table grid in an integer kernel."""
    integer = _integer_layers(lowered)
    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes:
        for index, name in enumerate(node.inputs):
            if name and graph.value_of(name) is not None:
                readers.setdefault(name, []).append((node, index))
    grids = {}
    for name, uses in readers.items():
        q = table.get(name)
        if q is None or not q.is_integer or q.qtype == "i32":
            continue
        if all(node.name in integer and not _is_bias(node, index) for node, index in uses):
            grids[name] = q
    return grids


def _is_bias(node: Node, index: int) -> bool:
    return node.op in ("Conv", "Gemm") and index == 2


def bias_values(graph: Graph, table: QuantTable, lowered: LoweredGraph) -> dict[str, tuple[np.ndarray, TensorQuant]]:
    """The int32 bias each QConv/QMatMul adds to its accumulator, with the grid that makes its
    DequantizeLinear give back the float bias: scale ``alpha * s_x * s_w[c] / beta``, zero point 0."""
    integer = _integer_layers(lowered)
    found: dict[str, tuple[np.ndarray, TensorQuant]] = {}
    for node in graph.nodes:
        lowered_node = integer.get(node.name)
        if lowered_node is None or not _is_bias(node, 2) or len(node.inputs) < 3 or not node.inputs[2]:
            continue
        name = node.inputs[2]
        if len(lowered_node.inputs) < 3 or graph.value_of(name) is None:
            continue
        values = lowered.graph.value_of(lowered_node.inputs[2])
        if values.dtype != np.int32 or len(graph.consumers().get(name, [])) != 1:
            continue  # a 64-bit accumulator bias has no int32 DequantizeLinear; it stays float
        xq, wq = table.get(node.inputs[0]), table.get(node.inputs[1])
        weight_scales = np.broadcast_to(wq.scales().reshape(-1), (values.size,))
        alpha, beta = (float(node.attrs.alpha), float(node.attrs.beta)) if node.op == "Gemm" else (1.0, 1.0)
        scales = alpha * float(xq.scale[0]) * weight_scales / beta
        per_channel = wq.per_channel and wq.scales().size > 1
        shape = graph.value_of(name).shape
        q = TensorQuant("i32", "symmetric_quantized" if per_channel else "asymmetric_quantized",
                        "channel" if per_channel else "layer", scale=[float(s) for s in scales]
                        if per_channel else [float(scales[0])], zero_point=[0] * (values.size if per_channel else 1),
                        axis=len(shape) - 1 if per_channel else None)
        found[name] = (values.reshape(shape) if int(np.prod(shape)) == values.size else values, q)
    return found


def _quantized_constant(value: np.ndarray, q: TensorQuant) -> np.ndarray:
    scale, zero = broadcast_params(q, value.ndim)
    return quantize_values(value, scale, zero, q.numpy_dtype)


# ---- editing the ONNX graph ---------------------------------------------------------------------------

def _load(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return copy.deepcopy(model)
    path = Path(model)
    if not path.is_file():
        raise PegasusError("ONNX model not found", where=str(path))
    try:
        return onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad input file
        raise PegasusError(f"not a readable ONNX model ({exc})", where=str(path)) from exc


def _onnx_tensor_names(proto: onnx.ModelProto) -> set[str]:
    names = {i.name for i in proto.graph.input} | {i.name for i in proto.graph.initializer}
    return names | {o for node in proto.graph.node for o in node.output if o}


def _with_opset(proto: onnx.ModelProto, needed: int) -> onnx.ModelProto:
    current = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if current is None or current >= needed:
        return proto
    try:
        return version_converter.convert_version(proto, needed)
    except Exception as exc:  # noqa: BLE001 - the converter raises many kinds of errors
        raise PegasusError(f"QDQ export needs opset {needed} and the model (opset {current}) does not "
                           f"convert to it: {exc}") from exc


class _Editor:
    """Inserts Q/DQ nodes into a GraphProto, keeping it topologically sorted."""

    def __init__(self, proto: onnx.ModelProto):
        self.graph = proto.graph
        self.taken = _onnx_tensor_names(proto) | {n.name for n in self.graph.node if n.name}
        self.after: dict[int, list[onnx.NodeProto]] = {}  # producer index (-1: graph input) → new nodes
        self.producer = {o: i for i, node in enumerate(self.graph.node) for o in node.output if o}

    def unique(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def params(self, base: str, q: TensorQuant) -> tuple[str, str]:
        scale = np.asarray(q.scale, dtype=np.float32)
        zero = np.asarray(q.zero_point, dtype=q.numpy_dtype)
        if not q.per_channel:
            scale, zero = scale.reshape(()), zero.reshape(())
        names = self.unique(f"{base}_scale"), self.unique(f"{base}_zero_point")
        self.graph.initializer.extend([numpy_helper.from_array(scale, names[0]),
                                       numpy_helper.from_array(zero, names[1])])
        return names

    def _axis(self, q: TensorQuant) -> dict:
        return {"axis": int(q.axis or 0)} if q.per_channel else {}

    def quantize_initializer(self, name: str, values: np.ndarray, q: TensorQuant) -> None:
        """Replace float initializer ``name`` by integer ``values`` behind a DequantizeLinear named ``name``."""
        init = next((i for i in self.graph.initializer if i.name == name), None)
        if init is None or tuple(init.dims) != values.shape:
            return  # renamed or folded by the importer: stays float
        stored = self.unique(f"{name}_quantized")
        init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(values), stored))
        scale, zero = self.params(name, q)
        node = helper.make_node("DequantizeLinear", [stored, scale, zero], [name],
                                name=self.unique(f"{name}_DequantizeLinear"), **self._axis(q))
        self.after.setdefault(-1, []).append(node)
        for graph_input in [i for i in self.graph.input if i.name == name]:  # IR < 4 lists initializers as inputs
            self.graph.input.remove(graph_input)

    def quantize_activation(self, name: str, q: TensorQuant) -> str:
        """Q/DQ after activation ``name``; readers (and a graph output of that name) get the DQ'd value."""
        is_output = any(o.name == name for o in self.graph.output)
        source = name
        index = self.producer.get(name, -1)
        if is_output:
            source = self.unique(f"{name}_float")
            producer = self.graph.node[index]
            producer.output[list(producer.output).index(name)] = source
            for info in self.graph.value_info:
                if info.name == name:
                    info.name = source
        integer = self.unique(f"{name}_quantized")
        dequantized = name if is_output else self.unique(f"{name}_dequantized")
        scale, zero = self.params(name, q)
        nodes = [helper.make_node("QuantizeLinear", [source, scale, zero], [integer],
                                  name=self.unique(f"{name}_QuantizeLinear"), **self._axis(q)),
                 helper.make_node("DequantizeLinear", [integer, scale, zero], [dequantized],
                                  name=self.unique(f"{name}_DequantizeLinear"), **self._axis(q))]
        if not is_output:
            for node in self.graph.node:
                for i, used in enumerate(node.input):
                    if used == name:
                        node.input[i] = dequantized
        self.after.setdefault(index, []).extend(nodes)
        return integer

    def finish(self) -> None:
        ordered = list(self.after.get(-1, []))
        for i, node in enumerate(self.graph.node):
            ordered.append(node)
            ordered.extend(self.after.get(i, []))
        del self.graph.node[:]
        self.graph.node.extend(ordered)
        self.after.clear()
