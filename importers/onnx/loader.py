"""Import an ONNX model into the pegasus IR.

Steps: read and check the file; fix every input's static shape (``--input-size-list``,
``--define-symbol``; a symbolic or unknown batch on axis 0 defaults to 1, with a note); cut the subgraph
between ``--inputs`` and ``--outputs``; list every unsupported op in one error; convert node by node
through the converter registry (types inferred and constant subgraphs folded as we go); then run the
import passes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from pegasus.errors import PegasusError, UnsupportedOpsError
from pegasus.fileio import read_model_input
from pegasus.importers.common.converters import convert_nodes
from pegasus.importers.onnx import ops as _ops  # noqa: F401  (registers the converters)
from pegasus.importers.onnx.registry import TABLE, OnnxContext, OnnxNode
from pegasus.importers.onnx.schema_check import check_names, check_node
from pegasus.importers.onnx.tensor_data import load_external_data, tensor_to_array
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

MIN_OPSET = 7
#: ops of onnxruntime's quantize_dynamic (activations quantized at run time), which pegasus does not convert
DYNAMIC_QUANTIZATION = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM",
                        "DynamicQuantizeMatMul"}


def load_model(path: str | Path) -> onnx.ModelProto:
    """Parse an .onnx file (a regular file, not a link); external data is read from files inside its folder,
    each tensor held to the budget and to the bytes there (``tensor_data``)."""
    path = Path(path)
    data = read_model_input(path, "ONNX model", given=True)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf raises DecodeError and others for non-ONNX bytes
        raise PegasusError(f"not a valid ONNX model ({type(exc).__name__}: {exc})".rstrip(": )") + ")",
                           where=str(path)) from exc
    if not model.graph.node and not model.graph.output:
        raise PegasusError("not a valid ONNX model (no graph found; is the file truncated?)", where=str(path))
    load_external_data(model, path.parent, str(path))
    return model


def model_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def _declared_dims(value_info: onnx.ValueInfoProto) -> list[int | str | None]:
    """An input's declared dims: sizes, symbols, or None where unknown (no value, or -1 as some converters
    write a dynamic dim and onnxruntime reads it)."""
    if not value_info.type.HasField("tensor_type") or not value_info.type.tensor_type.HasField("shape"):
        return []
    dims: list[int | str | None] = []
    for dim in value_info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


DEFAULT_BATCH = 1


def _resolve_shape(name: str, declared: list[int | str | None], given: Sequence[int] | None,
                   symbols: Mapping[str, int], batches: dict[str | None, list[str]]) -> tuple[int, ...]:
    """The static shape of one input from its declaration, --input-size-list and --define-symbol.

    A symbolic or unknown dimension on axis 0 is the batch (tf2onnx writes ``unk__123`` there): unless
    --define-symbol sets it, it is ``DEFAULT_BATCH``, and the input is listed under its symbol (None when
    unnamed) in ``batches`` so the caller can say so once per symbol. On any other axis it is an error.
    """
    if given is not None:
        return tuple(int(d) for d in given)
    shape = []
    for axis, dim in enumerate(declared):
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
        elif isinstance(dim, str) and dim in symbols:
            shape.append(int(symbols[dim]))
        elif axis == 0 and (dim is None or isinstance(dim, str)):
            batches.setdefault(dim, []).append(name)
            shape.append(DEFAULT_BATCH)
        elif isinstance(dim, str):
            raise PegasusError(f"input '{name}' has symbolic dimension '{dim}' (axis {axis}): set it with "
                               f"--define-symbol {dim}=VALUE or give the shape with --input-size-list")
        else:
            raise PegasusError(f"input '{name}' has an unknown dimension at axis {axis}: "
                               "give its shape with --input-size-list")
    return tuple(shape)


def _needed_nodes(graph: onnx.GraphProto, outputs: Sequence[str], stop_at: set[str]) -> list[int]:
    """Indices of the nodes that outputs depend on, not looking past the tensors in ``stop_at``."""
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out in producer:
                first = graph.node[producer[out]]
                raise PegasusError(f"tensor '{out}' is the output of two nodes: {first.op_type} "
                                   f"'{first.name or f'{first.op_type}_{producer[out]}'}' and {node.op_type} "
                                   f"'{node.name or f'{node.op_type}_{i}'}'")
            if out:
                producer[out] = i
    needed: set[int] = set()
    stack = [name for name in outputs if name not in stop_at]
    while stack:
        name = stack.pop()
        index = producer.get(name)
        if index is None or index in needed:
            continue
        needed.add(index)
        stack.extend(i for i in graph.node[index].input if i and i not in stop_at)
    return _in_order(graph, sorted(needed), stop_at)


def _in_order(graph: onnx.GraphProto, indices: list[int], stop_at: set[str]) -> list[int]:
    """``indices`` in an order where each node comes after the nodes whose outputs it reads (the file's order
    when it already is one, as ONNX requires); a cycle is a one-line error naming the nodes on it."""
    producer = {out: i for i in indices for out in graph.node[i].output if out}
    deps = {i: {producer[n] for n in graph.node[i].input if n and n not in stop_at and n in producer}
            for i in indices}
    if all(d < i for i in indices for d in deps[i]):
        return indices
    users: dict[int, list[int]] = {i: [] for i in indices}
    for i in indices:
        for d in deps[i]:
            users[d].append(i)
    waiting = {i: len(deps[i]) for i in indices}
    ready = [i for i in indices if not waiting[i]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, user)
    if len(order) == len(indices):
        return order
    raise PegasusError(f"the graph has a cycle: {_cycle(graph, deps, set(indices) - set(order))}")


def _cycle(graph: onnx.GraphProto, deps: dict[int, set[int]], left: set[int]) -> str:
    """One cycle among the nodes ``left`` (each reads a node that is left too), as 'Add 'a' -> Relu 'b' -> ...'."""
    node = min(left)
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = min(d for d in deps[node] if d in left)
    ring = path[path.index(node):][::-1]  # producers first
    names = [f"{graph.node[i].op_type} '{graph.node[i].name or f'{graph.node[i].op_type}_{i}'}'" for i in ring]
    return " -> ".join(names + names[:1])


def import_onnx(model: onnx.ModelProto | str | Path, *, inputs: Sequence[str] | None = None,
                outputs: Sequence[str] | None = None,
                input_shapes: Sequence[Sequence[int] | None] | None = None,
                input_dtypes: Sequence[DType | None] | None = None,
                symbols: Mapping[str, int] | None = None,
                constant_inputs: Mapping[str, np.ndarray] | None = None,
                name: str | None = None, optimize: bool = True,
                note: Callable[[str], None] | None = None) -> Graph:
    """Convert an ONNX model to a verified pegasus Graph.

    ``inputs``/``outputs`` cut a subgraph (tensor names). ``input_shapes``/``input_dtypes`` are per
    graph input, in order (None keeps the declared one). ``constant_inputs`` binds graph inputs to
    values known at compile time (they become constants and fold away). ``note`` receives one line per
    choice made for the user, e.g. ``input_1: batch unk__123 = 1`` for a symbolic batch.
    """
    if isinstance(model, (str, Path)):
        name = name or Path(model).stem
        model = load_model(model)
    opset = model_opset(model)
    if opset < MIN_OPSET:
        raise PegasusError(f"model uses opset {opset}; pegasus supports opset {MIN_OPSET} and newer "
                           "(upgrade it with onnx.version_converter)")
    onnx_graph = model.graph
    check_names(onnx_graph)
    symbols = dict(symbols or {})
    constant_inputs = dict(constant_inputs or {})
    initializers = {init.name: init for init in onnx_graph.initializer}

    known = {vi.name: vi for vi in list(onnx_graph.input) + list(onnx_graph.value_info) + list(onnx_graph.output)}
    declared_inputs = [vi.name for vi in onnx_graph.input if vi.name not in initializers]
    input_names = list(inputs) if inputs else declared_inputs
    all_tensors = {o for node in onnx_graph.node for o in node.output} | set(declared_inputs)
    for wanted in input_names:
        if wanted not in all_tensors:
            raise PegasusError(f"--inputs: '{wanted}' is not a tensor of the model "
                               f"(graph inputs: {' '.join(declared_inputs)})")
    output_names = list(outputs) if outputs else [o.name for o in onnx_graph.output]
    for wanted in output_names:
        if wanted not in all_tensors and wanted not in initializers:
            raise PegasusError(f"--outputs: '{wanted}' is not a tensor of the model "
                               f"(graph outputs: {' '.join(o.name for o in onnx_graph.output)})")
    given_lists = ((len(input_shapes or []), "--input-size-list"), (len(input_dtypes or []), "--input-dtype-list"))
    for count, flag in given_lists:
        if count and count != len(input_names):
            raise PegasusError(f"{flag} gives {count} entries but the model has {len(input_names)} "
                               f"input(s): {' '.join(input_names)}")

    if inputs:  # a cut: intermediate tensors need declared types, from ONNX shape inference
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
            known.update({vi.name: vi for vi in inferred.graph.value_info})
        except Exception:  # inference is only a source of declared shapes here; shapes may come from flags
            pass

    graph = Graph(name or onnx_graph.name or "model")
    builder = GraphBuilder(graph)
    batches: dict[str | None, list[str]] = {}  # defaulted batch symbol (None: unnamed) -> the inputs using it
    for index, input_name in enumerate(input_names):
        info = known.get(input_name)
        if input_name in constant_inputs:
            builder.set_constant(input_name, np.asarray(constant_inputs[input_name]))
            continue
        given = input_shapes[index] if input_shapes else None
        shape = _resolve_shape(input_name, _declared_dims(info) if info else [], given, symbols, batches)
        dtype = input_dtypes[index] if input_dtypes and input_dtypes[index] else None
        if dtype is None:
            if info is None or not info.type.HasField("tensor_type"):
                raise PegasusError(f"input '{input_name}' has no declared type: give it with --input-dtype-list")
            try:
                dtype = DType.from_onnx(info.type.tensor_type.elem_type)
            except TypeError as exc:
                raise PegasusError(f"input '{input_name}': {exc}") from None
        builder.add_input(input_name, TensorType(shape, dtype))
    stop_at = set(input_names)
    node_indices = _needed_nodes(onnx_graph, output_names, stop_at)
    for i in node_indices:
        proto = onnx_graph.node[i]
        check_node(proto, opset, f"{proto.op_type} node '{proto.name or f'{proto.op_type}_{i}'}'")
    nodes = [OnnxNode.from_proto(onnx_graph.node[i], i) for i in node_indices]
    try:
        TABLE.check_supported(nodes, opset)
    except UnsupportedOpsError as exc:
        if DYNAMIC_QUANTIZATION & {node.op_type for node in nodes}:
            raise PegasusError(f"{exc.message} (a model dynamically quantized by onnxruntime's quantize_dynamic: "
                               "import the float model, then pegasus quantize)") from exc
        raise
    for init_name in {n for node in nodes for n in node.inputs} | set(output_names):
        if init_name in initializers and init_name not in stop_at:
            builder.set_constant(init_name, tensor_to_array(initializers[init_name], f"initializer '{init_name}'"))

    convert_nodes(TABLE, OnnxContext(builder, opset), nodes, opset)
    graph.outputs = output_names
    for out in output_names:
        if not builder.has(out):
            raise PegasusError(f"output '{out}' was not produced by the converted graph")
    graph.inputs = [n for n in graph.inputs if n not in constant_inputs]
    graph = run_import_passes(graph, optimize=optimize)
    for symbol, names in batches.items() if note else ():  # said once the import succeeded: an error is one line
        note(f"{', '.join(names)}: {f'batch {symbol}' if symbol else 'unknown batch'} = {DEFAULT_BATCH}")
    return graph


def declared_batches(model: onnx.ModelProto, inputs: Sequence[str] | None = None) -> list[int | None]:
    """The fixed batch (first dim) each input declares, None when symbolic or absent."""
    initializers = {init.name for init in model.graph.initializer}
    infos = {vi.name: vi for vi in list(model.graph.input) + list(model.graph.value_info)}
    names = list(inputs) if inputs else [vi.name for vi in model.graph.input if vi.name not in initializers]
    batches: list[int | None] = []
    for name in names:
        dims = _declared_dims(infos[name]) if name in infos else []
        batches.append(dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else None)
    return batches
