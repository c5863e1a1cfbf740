"""Import a PyTorch model into the pegasus IR.

Steps: classify the file (archive.py: a pickle, an empty or truncated file is refused in one line, nothing
in it run; a .pt2 is then read entirely as data, never by torch's loaders); read it with its front end
(torchscript.py, exported.py) into a
SourceGraph; fix each input's static shape (TorchScript keeps none, so ``--input-size-list`` is required;
a .pt2 carries its shapes, a symbolic batch becomes 1 with a note and other symbolic dims take
``--input-size-list``); list every unsupported op in one error; convert node by node through the converter
table (constants and the shape plumbing fold as they go); cut at ``--outputs``; run the import passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pegasus.errors import PegasusError, errors_named
from pegasus.importers.common.converters import SourceNode, convert_nodes
from pegasus.importers.pytorch.archive import ModelFile, inspect_model
from pegasus.importers.pytorch.context import TABLE, SourceGraph, TorchContext
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

DEFAULT_BATCH = 1
SIZE_EXAMPLE = "e.g. --input-size-list '3,224,224' for one NCHW image input"


def read_model(path: str | Path) -> tuple[ModelFile, SourceGraph]:
    """Guard, then read the file with its front end."""
    model_file = inspect_model(path)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise PegasusError("pegasus import pytorch needs torch: pip install 'pegasus-nn[torch]'") from None
    from pegasus.importers.pytorch import ops as _ops  # noqa: F401  (registers the converters)

    if model_file.kind == "torchscript":
        from pegasus.importers.pytorch.torchscript import read_torchscript

        return model_file, read_torchscript(model_file.path)
    from pegasus.importers.pytorch.exported import read_exported

    return model_file, read_exported(model_file.path)


def declared_batches(source: SourceGraph) -> list[int | None]:
    """The fixed batch each input declares (a .pt2's static first dim), None when symbolic or unknown."""
    return [shape[0] if shape and isinstance(shape[0], int) else None for _, shape, _ in source.inputs]


def _input_shape(name: str, declared, given, note) -> tuple[int, ...]:
    if declared is None:
        if given is None:
            raise PegasusError(f"--input-size-list is required: a TorchScript model keeps no input shapes "
                               f"(input '{name}'; {SIZE_EXAMPLE})")
        return tuple(given)
    if given is not None:
        if len(given) != len(declared) or any(d is not None and d != g for d, g in zip(declared, given)):
            shown = ["?" if d is None else d for d in declared]
            raise PegasusError(f"--input-size-list gives {list(given)} for input '{name}', but the program was "
                               f"exported for {shown} (only its symbolic dims, '?', can be set)")
        return tuple(given)
    shape = list(declared)
    for axis, dim in enumerate(shape):
        if dim is None and axis == 0:
            shape[0] = DEFAULT_BATCH
            if note:
                note(f"{name}: symbolic batch = {DEFAULT_BATCH}")
        elif dim is None:
            raise PegasusError(f"input '{name}' has a symbolic dimension at axis {axis}: give its shape with "
                               "--input-size-list")
    return tuple(shape)


def _flat(nodes: Sequence[SourceNode]) -> list[SourceNode]:
    """The nodes with those inside prim::If blocks, for listing every unsupported op at once."""
    found = []
    for node in nodes:
        found.append(node)
        for block, _ in node.attrs.get("blocks", ()):
            found.extend(_flat(block))
    return found


def _tensors(ctx: TorchContext, name: str) -> list[str]:
    """A model output's tensors: itself, or those of a list or tuple it returns (nested ones flattened)."""
    value = ctx.values.get(name)
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in (_tensors(ctx, item) if isinstance(item, str) else [item])]
    return [name]


def import_pytorch(model: str | Path | tuple[ModelFile, SourceGraph], *, inputs: Sequence[str] | None = None,
                   outputs: Sequence[str] | None = None,
                   input_shapes: Sequence[Sequence[int] | None] | None = None,
                   input_dtypes: Sequence[DType | None] | None = None, name: str | None = None,
                   optimize: bool = True, note: Callable[[str], None] | None = None) -> Graph:
    """Convert a TorchScript archive or a torch.export program to a verified pegasus Graph.

    ``inputs`` names the model's inputs in the order ``input_shapes``/``input_dtypes`` give them (default:
    the forward's order); ``outputs`` cuts the graph at those tensors (layer names as the import gives them).
    """
    model_file, source = read_model(model) if isinstance(model, (str, Path)) else model
    with errors_named(str(model_file.path)):
        return _convert(model_file, source, inputs, outputs, input_shapes, input_dtypes, name, optimize, note)


def _convert(model_file: ModelFile, source: SourceGraph, inputs, outputs, input_shapes, input_dtypes, name, optimize,
             note) -> Graph:
    name = name or model_file.path.stem
    declared = {n: (shape, dtype) for n, shape, dtype in source.inputs}
    order = list(inputs) if inputs else list(declared)
    unknown = [n for n in order if n not in declared]
    if unknown or len(set(order)) != len(declared):
        raise PegasusError(f"--inputs must name each of the model's inputs once: {' '.join(declared)}"
                           + (f" ('{unknown[0]}' is not one)" if unknown else ""))
    for given, flag in ((input_shapes, "--input-size-list"), (input_dtypes, "--input-dtype-list")):
        if given and len(given) != len(order):
            raise PegasusError(f"{flag} gives {len(given)} entries but the model has {len(order)} input(s): "
                               f"{' '.join(order)}")

    graph = Graph(name)
    builder = GraphBuilder(graph)
    shapes = {n: _input_shape(n, declared[n][0], input_shapes[i] if input_shapes else None, note)
              for i, n in enumerate(order)}
    dtypes = {n: (input_dtypes[i] if input_dtypes and input_dtypes[i] else DType.parse(declared[n][1]))
              for i, n in enumerate(order)}
    for input_name in declared:
        builder.add_input(input_name, TensorType(shapes[input_name], dtypes[input_name]))
    for const_name, array in source.constants.items():
        builder.set_constant(const_name, array)
    TABLE.check_supported(_flat(source.nodes))
    ctx = TorchContext(builder)
    convert_nodes(TABLE, ctx, source.nodes)

    wanted = list(outputs) if outputs else [t for out in source.outputs for t in _tensors(ctx, out)]
    for out in wanted:
        if not builder.has(out):
            hint = "" if outputs is None else f" (the model's outputs: {' '.join(source.outputs)}; layer names as " \
                                              "in a full import's NAME.json)"
            raise PegasusError(f"--outputs: '{out}' is not a tensor of the converted graph{hint}")
    graph.outputs = wanted
    return run_import_passes(graph, optimize=optimize)
