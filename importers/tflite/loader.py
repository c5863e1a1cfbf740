"""Import a TFLite model into the pegasus IR.

Steps: read the flatbuffer as data (reader.py); take the subgraph's inputs and outputs, or the tensors
named by ``--inputs``/``--outputs`` (a cut); fix each input's static shape (a dynamic batch, -1 in the
shape signature, becomes 1 and says so; other dynamic dimensions need ``--input-size-list``); list every
unsupported op of the part of the graph the outputs need in one error, and refuse a model computing on
quantized integer activations (a pre-quantized model, which has its own import path); set the constants
(sparse ones densified, sparsity.py); convert node by node through the converter table, constants folding
as they go (float16 and int8 weights become float32: one note says how many int8 tensors a dynamic-range
model had); then run the import passes. Tensor names are the file's,
so NAME.json, ``.quantize`` entries and dumps use the names Netron shows. The graph keeps TFLite's
channels-last shapes from input to output (see pegasus/ops/layout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode, convert_nodes, needed_nodes
from pegasus.importers.tflite import ops as _ops  # noqa: F401  (registers the converters)
from pegasus.importers.tflite.arity import check_arity
from pegasus.importers.tflite.context import TABLE, TfliteContext
from pegasus.importers.tflite.quantized import integer_view
from pegasus.importers.tflite.reader import TfliteSubgraph, TfliteTensor, read_tflite
from pegasus.importers.tflite.sparsity import densify
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

DEFAULT_BATCH = 1
_INTEGER = ("int8", "uint8", "int16")


def _input_shape(tensor: TfliteTensor, given: Sequence[int] | None, note: Callable[[str], None] | None) -> tuple:
    if given is not None:
        return tuple(int(d) for d in given)
    shape = list(tensor.shape)
    if tensor.signature and len(tensor.signature) != len(shape):
        raise PegasusError(f"input '{tensor.name}' has shape {shape} but shape signature {list(tensor.signature)}")
    for axis, dim in enumerate(tensor.signature):
        if dim >= 0:
            continue
        if axis != 0:
            raise PegasusError(f"input '{tensor.name}' has a dynamic dimension at axis {axis} (shape signature "
                               f"{list(tensor.signature)}): give its shape with --input-size-list")
        shape[0] = DEFAULT_BATCH
        if note:
            note(f"{tensor.name}: dynamic batch = {DEFAULT_BATCH}")
    if any(d < 1 for d in shape):
        raise PegasusError(f"input '{tensor.name}' has shape {list(shape)}: give it with --input-size-list")
    return tuple(shape)


def refuse_integer_activations(nodes: Sequence[SourceNode], tensors: dict[str, TfliteTensor]) -> None:
    """The float import takes float models (with float16, int8 or sparse weights, and QUANTIZE/DEQUANTIZE
    at their edges); an op computing on quantized integer activations makes a pre-quantized model."""
    for node in nodes:
        if node.op_type in ("QUANTIZE", "DEQUANTIZE"):
            continue
        for name in node.inputs + node.outputs:
            tensor = tensors.get(name) if name else None
            if tensor is not None and tensor.data is None and tensor.quantized and tensor.dtype in _INTEGER:
                raise PegasusError(f"{node.describe()} computes on {tensor.dtype} tensor '{name}': this is a "
                                   "pre-quantized (integer) model, which the pre-quantized TFLite import path "
                                   "handles, not the float one")


def _check_names(wanted: Sequence[str], known: dict[str, TfliteTensor], flag: str, defaults: Sequence[str]) -> None:
    for name in wanted:
        if name not in known:
            raise PegasusError(f"{flag}: '{name}' is not a tensor of the model (the model's: {' '.join(defaults)})")


def import_tflite(model: str | Path | TfliteSubgraph, *, inputs: Sequence[str] | None = None,
                  outputs: Sequence[str] | None = None,
                  input_shapes: Sequence[Sequence[int] | None] | None = None, subgraph: int = 0,
                  name: str | None = None, optimize: bool = True,
                  note: Callable[[str], None] | None = None) -> Graph:
    """Convert subgraph ``subgraph`` of a .tflite file to a verified pegasus Graph.

    ``inputs``/``outputs`` cut the graph at tensor names; ``input_shapes`` is per input, in order (None
    keeps the file's). ``note`` receives one-line remarks (a defaulted batch) for the user.
    """
    if not isinstance(model, TfliteSubgraph):
        name = name or Path(model).stem
        model = read_tflite(model, subgraph)
    model = integer_view(model, inputs, outputs)  # a pre-quantized model as floats over its real values
    tensors = {t.name: t for t in model.tensors}
    input_names = list(inputs) if inputs else list(model.inputs)
    output_names = list(outputs) if outputs else list(model.outputs)
    _check_names(input_names, tensors, "--inputs", model.inputs)
    _check_names(output_names, tensors, "--outputs", model.outputs)
    if input_shapes and len(input_shapes) != len(input_names):
        raise PegasusError(f"--input-size-list gives {len(input_shapes)} entries but the model has "
                           f"{len(input_names)} input(s): {' '.join(input_names)}")

    graph = Graph(name or model.name or "model")
    builder = GraphBuilder(graph)
    for index, input_name in enumerate(input_names):
        tensor = tensors[input_name]
        shape = _input_shape(tensor, input_shapes[index] if input_shapes else None, note)
        builder.add_input(input_name, TensorType(shape, DType(tensor.dtype)))

    stop_at = set(input_names)
    nodes = needed_nodes(model.nodes, output_names, stop_at)
    TABLE.check_supported(nodes)
    check_arity(nodes)
    refuse_integer_activations(nodes, tensors)
    for tensor_name in {n for node in nodes for n in node.inputs if n} | set(output_names):
        tensor = tensors[tensor_name]
        if tensor_name in stop_at:
            continue
        if tensor.sparse and tensor.data is not None:
            builder.set_constant(tensor_name, densify(tensor_name, tensor.data, tensor.shape, tensor.sparsity))
        elif tensor.data is not None:
            builder.set_constant(tensor_name, tensor.data)
        elif tensor.is_variable:  # recurrent state: zero before the first step
            builder.set_constant(tensor_name, np.zeros(tensor.shape, DType(tensor.dtype).numpy))
    ctx = TfliteContext(builder, tensors)
    convert_nodes(TABLE, ctx, nodes)
    if ctx.dequantized and note:
        kinds = "/".join(sorted(set(ctx.dequantized.values())))
        note(f"dynamic-range model: {len(ctx.dequantized)} {kinds} weight tensors dequantized to float")
    graph.outputs = output_names
    for out in output_names:
        if not builder.has(out):
            raise PegasusError(f"output '{out}' was not produced by the converted graph")
    return run_import_passes(graph, optimize=optimize)
