"""Pre-quantized TFLite models (full-integer int8, older uint8, int16x8): imported as a float graph over the
model's real values, with the model's own quantization written beside it as NAME.quantize.

``integer_view`` rewrites a model whose operators compute on quantized integer activations before the loader
converts it (importers/tflite/loader.py calls it once; any other model passes through unchanged):

- every quantized integer tensor the operators compute on becomes float32 holding its real values, keeping its
  scale and zero point; quantized constants (weights, int32/int64 biases) are dequantized, (q - zero_point) *
  scale per channel along ``quantized_dimension``, so the converters see a float model;
- each graph input keeps the file's integer dtype and shape and is followed by a DEQUANTIZE (its scale and
  zero point), each graph output is made by a QUANTIZE from the real tensor ``<output>/real``, so
  ``pegasus inference`` takes and returns exactly what the TFLite interpreter does;
- the model's own QUANTIZE (a requantisation int -> int, or float -> int at a float edge) and DEQUANTIZE ops
  become a QUANTIZE onto the grid of the tensor they define followed by a DEQUANTIZE (fake quantization):
  identity on real values in float, a Requantize or a QuantizeLinear in the integer graph.

``quantize_table`` then gives every float tensor of the imported graph the file's parameters: activations
by name (the tensors the converters invent take the grid of the tensor they hold: a fused activation's
input the output's, a reshape's output its input's), weights and biases from the operator they belong to
(per output channel, axis 0 in the registry's layouts). The table's ``rounding: tflite`` makes
``inference --dtype quantized`` and the exported code compute what TFLite's reference kernels compute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import dequantized
from pegasus.importers.tflite.reader import TfliteSubgraph, TfliteTensor
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.quantizers.assign import float_entry

_INTEGER = ("int8", "uint8", "int16")
_EDGE_OPS = ("QUANTIZE", "DEQUANTIZE")
#: ops whose output holds (a rearrangement of) input 0's values: an invented output takes its input's grid
#: (an invented Pad pads with 0, on every grid)
_CARRY_FORWARD = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Pad")
#: ops whose input holds their output's grid before a clamp: an invented input takes the output's
_CARRY_BACKWARD = ("Relu", "Clip", "Reshape", "Flatten", "Squeeze", "Unsqueeze")
#: weighted operators: (registry input, file input, output-channel axis in the registry's layout) of the weights
#: and the bias (CONV_2D OHWI -> OIHW, DEPTHWISE (1, kh, kw, C*M) -> (C*M, 1, kh, kw), FULLY_CONNECTED (N, K) as
#: Gemm's transposed B, TRANSPOSE_CONV (M, kh, kw, C) -> (C, M, kh, kw)); PRELU's slope (None: the file's axis)
_WEIGHT_INPUTS = {"CONV_2D": ((1, 1, 0), (2, 2, 0)), "DEPTHWISE_CONV_2D": ((1, 1, 0), (2, 2, 0)),
                  "FULLY_CONNECTED": ((1, 1, 0), (2, 2, 0)), "TRANSPOSE_CONV": ((1, 1, 1), (2, 3, 0)),
                  "PRELU": ((1, 1, None),)}
#: a bias whose integer magnitude reaches this is not held exactly by a float32 real value
_BIAS_EXACT = 2 ** 23


def _is_activation(tensor: TfliteTensor | None) -> bool:
    return tensor is not None and tensor.data is None and tensor.quantized and tensor.dtype in _INTEGER


def is_prequantized(model: TfliteSubgraph) -> bool:
    """Whether an operator other than QUANTIZE/DEQUANTIZE computes on a quantized integer activation."""
    tensors = {t.name: t for t in model.tensors}
    return any(_is_activation(tensors.get(name)) for node in model.nodes if node.op_type not in _EDGE_OPS
               for name in node.inputs + node.outputs if name)


def _real(tensor: TfliteTensor) -> TfliteTensor:
    """The tensor holding real values: float32, its quantization kept (constants dequantized)."""
    data = None if tensor.data is None else dequantized(tensor, tensor.data)
    return dataclasses.replace(tensor, dtype="float32", data=data)


def _fresh(names: set[str], base: str) -> str:
    name, k = base, 1
    while name in names:
        name, k = f"{base}_{k}", k + 1
    names.add(name)
    return name


class _View:
    """The rewritten tensors and nodes of a pre-quantized model (see the module docstring)."""

    def __init__(self, model: TfliteSubgraph):
        self.model = model
        self.tensors: dict[str, TfliteTensor] = {}
        self.stored: dict[str, str] = {}   # real tensor -> the integer type the file stores it in
        for t in model.tensors:
            quantized = t.quantized and (t.dtype in _INTEGER or (t.data is not None and t.dtype in ("int32", "int64")))
            self.tensors[t.name] = _real(t) if quantized else t
            if quantized:
                self.stored[t.name] = t.dtype
        self.names = set(self.tensors)
        self.nodes: list[SourceNode] = []

    def add_tensor(self, base: str, like: TfliteTensor, dtype: str, stored: str) -> str:
        name = _fresh(self.names, base)
        self.tensors[name] = dataclasses.replace(like, name=name, dtype=dtype, data=None, index=-1)
        if dtype == "float32":
            self.stored[name] = stored
        return name

    def fake_quantize(self, node: SourceNode, x: str, y: str, grid: TfliteTensor) -> list[SourceNode]:
        """QUANTIZE x onto ``grid`` (integer), DEQUANTIZE it into y: what a QUANTIZE/DEQUANTIZE op becomes."""
        integer = self.add_tensor(f"{y}/{grid.dtype}", grid, grid.dtype, grid.dtype)
        return [SourceNode(node.name + "/quantize", "QUANTIZE", [x], [integer], {}, "", node.where),
                SourceNode(node.name, "DEQUANTIZE", [integer], [y], {}, "", node.where)]


def integer_view(model: TfliteSubgraph, inputs: Sequence[str] | None = None,
                 outputs: Sequence[str] | None = None) -> TfliteSubgraph:
    """The float view of a pre-quantized model (any other model is returned as it is). ``inputs``/``outputs``
    are the tensors the import cuts at (default: the model's)."""
    return _build_view(model, inputs, outputs)[0] if is_prequantized(model) else model


def _build_view(model: TfliteSubgraph, inputs: Sequence[str] | None,
                outputs: Sequence[str] | None) -> tuple[TfliteSubgraph, dict[str, str]]:
    """The float view and the integer type each of its real tensors is stored in by the file."""
    view = _View(model)
    original = {t.name: t for t in model.tensors}
    input_names = list(inputs) if inputs else list(model.inputs)
    output_names = list(outputs) if outputs else list(model.outputs)
    renamed: dict[str, str] = {}
    head: list[SourceNode] = []
    for name in input_names:
        if _is_activation(original.get(name)):
            real = view.add_tensor(f"{name}/real", view.tensors[name], "float32", original[name].dtype)
            view.tensors[name] = original[name]
            renamed[name] = real
            head.append(SourceNode(f"{name}/dequantize", "DEQUANTIZE", [name], [real], {}, "", "graph input"))
    tail: list[SourceNode] = []
    produced_as: dict[str, str] = {}
    for name in output_names:
        if _is_activation(original.get(name)) and name not in renamed:
            real = view.add_tensor(f"{name}/real", view.tensors[name], "float32", original[name].dtype)
            view.tensors[name] = original[name]
            produced_as[name] = real
            tail.append(SourceNode(f"{name}/quantize", "QUANTIZE", [real], [name], {}, "", "graph output"))
    for node in model.nodes:
        ins = [renamed.get(n, produced_as.get(n, n)) if n else n for n in node.inputs]
        outs = [produced_as.get(n, n) for n in node.outputs]
        rewired = dataclasses.replace(node, inputs=ins, outputs=outs)
        if node.op_type == "QUANTIZE" and _is_activation(original.get(node.outputs[0])):
            view.nodes += view.fake_quantize(rewired, ins[0], outs[0], original[node.outputs[0]])
        elif node.op_type == "DEQUANTIZE" and _is_activation(original.get(node.inputs[0])):
            grid = original[node.inputs[0]]
            view.tensors[outs[0]] = dataclasses.replace(view.tensors[outs[0]], scale=grid.scale,
                                                        zero_point=grid.zero_point, axis=grid.axis)
            view.stored[outs[0]] = grid.dtype
            view.nodes += view.fake_quantize(rewired, ins[0], outs[0], grid)
        else:
            view.nodes.append(rewired)
    notes = list(model.notes)
    large = [t.name for t in model.tensors if t.data is not None and t.quantized and t.dtype in ("int32", "int64")
             and np.abs(t.data.astype(np.int64)).max(initial=0) >= _BIAS_EXACT]
    if large:
        notes.append(f"{len(large)} bias tensor(s) ({', '.join(large[:3])}) hold integers of 2^23 or more, which "
                     "their float32 real values do not keep exactly (their layers may differ from TFLite by 1 LSB)")
    return dataclasses.replace(model, tensors=list(view.tensors.values()), nodes=head + view.nodes + tail,
                               notes=notes), view.stored


# ---- the table -----------------------------------------------------------------------------------------------

QTYPES = {"int8": "i8", "uint8": "u8", "int16": "i16", "int32": "i32", "int64": "i32"}


def _entry(tensor: TfliteTensor, axis: int | None, values: np.ndarray | None = None) -> TensorQuant:
    """A tensor's TensorQuant from its file parameters; min/max from the integer grid (weights: ±127 steps,
    biases: their values)."""
    scale = [float(s) for s in np.asarray(tensor.scale, np.float32).reshape(-1)]
    zero = [int(z) for z in np.asarray(tensor.zero_point).reshape(-1)]
    if len(zero) != len(scale):
        zero = (zero or [0]) * len(scale) if len(zero) <= 1 else zero
    info = np.iinfo(np.dtype(tensor.dtype if tensor.dtype in QTYPES else "int32"))
    per_channel = axis is not None and len(scale) > 1
    symmetric = all(z == 0 for z in zero) and (per_channel or tensor.dtype not in ("int8", "uint8"))
    if values is not None:  # a bias: the range of its values
        lo = [float(min(values.min(initial=0.0), 0.0))] * (1 if not per_channel else len(scale))
        hi = [float(max(values.max(initial=0.0), 0.0))] * len(lo)
    else:
        low = -info.max if per_channel and symmetric else info.min
        lo = [(low - z) * s for s, z in zip(scale, zero)]
        hi = [(int(info.max) - z) * s for s, z in zip(scale, zero)]
    return TensorQuant(QTYPES.get(tensor.dtype, "i32"), "symmetric_quantized" if symmetric else "asymmetric_quantized",
                       "channel" if per_channel else "layer", lo, hi, scale, zero,
                       axis=axis if per_channel else None)


def _scheme(model: TfliteSubgraph) -> tuple[str, str]:
    """(quantizer, qtype) naming the model's scheme: int8 -> perchannel_symmetric_affine i8 (asymmetric int8
    activations, symmetric per-channel weights), uint8 -> asymmetric_affine u8, int16x8 -> the int16 twin."""
    kinds = {t.dtype for t in model.tensors if _is_activation(t)}
    if "int16" in kinds:
        return "perchannel_symmetric_affine", "i16"
    if "uint8" in kinds:
        return "asymmetric_affine", "u8"
    return "perchannel_symmetric_affine", "i8"


def quantize_table(model: TfliteSubgraph, graph: Graph, inputs: Sequence[str] | None = None,
                   outputs: Sequence[str] | None = None,
                   note: Callable[[str], None] | None = None) -> QuantTable | None:
    """The .quantize table of an imported pre-quantized model (None for any other model); ``note`` hears what
    the float graph cannot hold exactly."""
    if not is_prequantized(model):
        return None
    view, stored = _build_view(model, inputs, outputs)
    for line in view.notes[len(model.notes):] if note else ():
        note(line)
    files = {t.name: dataclasses.replace(t, dtype=stored[t.name]) for t in view.tensors if t.name in stored}
    tensors: dict[str, TensorQuant] = {}
    for name, tensor in graph.tensors.items():
        source = files.get(name)
        if tensor.type.dtype.is_float and source is not None and source.quantized:
            tensors[name] = _entry(source, source.axis if graph.value_of(name) is not None else None)
    _weights(view.nodes, files, graph, tensors)
    _carry(graph, tensors)
    _float_rest(graph, tensors, note)
    quantizer, qtype = _scheme(model)
    digest = serialize.graph_digest(graph)
    return QuantTable(quantizer=quantizer, qtype=qtype, algorithm="tflite", graph_digest=digest, tensors=tensors,
                      layer_digests=serialize.layer_digests(graph), float_graph_digest=digest, rounding="tflite")


def _float_rest(graph: Graph, tensors: dict[str, TensorQuant], note: Callable[[str], None] | None) -> None:
    """Float tensors a converter invented whose values no file grid holds (SQUARED_DIFFERENCE's difference)
    stay float32: their layers run in float between converters, as the export lists them."""
    producers = graph.producers()
    edges = set(graph.inputs) | set(graph.outputs)
    rest = [name for name, tensor in graph.tensors.items()
            if name not in tensors and name not in edges and tensor.type.dtype.is_float
            and graph.value_of(name) is None and name in producers
            and producers[name].op not in ("QuantizeLinear", "DequantizeLinear")]
    for name in rest:
        tensors[name] = float_entry(0.0, 0.0)
    if rest and note:
        note(f"{len(rest)} tensor(s) the model does not quantize stay float ({', '.join(rest[:3])}"
             f"{', ...' if len(rest) > 3 else ''}): the layers writing them run in float")


def _weights(nodes: Sequence[SourceNode], files: dict[str, TfliteTensor], graph: Graph,
             tensors: dict[str, TensorQuant]) -> None:
    """Weights and biases of the weighted operators, found through the layer the converter named after the
    operator: (registry input, file input, channel axis in the registry's layout) per operator."""
    sources = {node.name: node for node in nodes if node.op_type in _WEIGHT_INPUTS}
    for node in graph.nodes:
        source = sources.get(node.name)
        if source is None:
            continue
        for index, file_index, axis in _WEIGHT_INPUTS[source.op_type]:
            name = node.inputs[index] if index < len(node.inputs) else ""
            tensor = files.get(source.input(file_index))
            if not name or tensor is None or not tensor.quantized or graph.value_of(name) is None:
                continue
            bias = graph.value_of(name).astype(np.float64) if index == 2 else None
            tensors[name] = _entry(tensor, tensor.axis if axis is None else axis, bias)


def _carry(graph: Graph, tensors: dict[str, TensorQuant]) -> None:
    """Float tensors the converters invented take the grid of the tensor holding their values."""
    producers = graph.producers()
    consumers = graph.consumers()
    changed = True
    while changed:
        changed = False
        for name, tensor in graph.tensors.items():
            if name in tensors or not tensor.type.dtype.is_float or graph.value_of(name) is not None:
                continue
            node = producers.get(name)
            readers = consumers.get(name, [])
            if node is not None and node.op in _CARRY_FORWARD and node.inputs[0] in tensors:
                tensors[name] = dataclasses.replace(tensors[node.inputs[0]])
                changed = True
            elif len(readers) == 1 and readers[0].op in _CARRY_BACKWARD and readers[0].outputs[0] in tensors:
                tensors[name] = dataclasses.replace(tensors[readers[0].outputs[0]])
                changed = True
