"""Import a Caffe model (``.prototxt`` + ``.caffemodel``) into the pegasus IR.

Steps: parse the prototxt (reader.py); take the layers Caffe builds for inference and the network's inputs;
give every tensor one producer: a layer writing in place (``bottom == top``, e.g. ReLU after a Convolution)
makes a new version of the blob, and the last version of each blob keeps the blob's name while earlier
ones are called ``<layer>/out`` after the layer that wrote them; cut the post-processing (PriorBox,
DetectionOutput and whatever reads their results): the graph ends at the tensors they read, and one note
says so; list every unsupported layer type at once; then convert layer by layer through the converter
table with the caffemodel's blobs (or seeded random weights, with a note, when there is none), and run
the import passes (BatchNorm + Scale fold into the convolution before them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pegasus.errors import PegasusError, errors_named
from pegasus.importers.caffe import layers as _layers  # noqa: F401  (registers the converters)
from pegasus.importers.caffe.context import RANDOM_SEED, TABLE, CaffeContext
from pegasus.importers.caffe.reader import (
    CaffeLayer,
    network_inputs,
    network_layers,
    read_caffemodel,
    read_prototxt,
)
from pegasus.importers.common.converters import SourceNode, convert_nodes
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

#: layer types that decode detections from the network's outputs: the graph ends before them
POST_PROCESSING = ("PriorBox", "DetectionOutput")
#: post-processing layers that read only the shapes of their bottoms (not an output of the graph)
_SHAPE_READERS = ("PriorBox",)


def source_nodes(layers: list[CaffeLayer], inputs: list[str], where: str) -> list[SourceNode]:
    """One SourceNode per layer with every tensor written once (in-place writes renamed, see above)."""
    writes = Counter(top for layer in layers for top in layer.tops)
    reserved = set(writes) | set(inputs)
    used = set(inputs)
    current = {name: name for name in inputs}

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in reserved or name in used:
            name, k = f"{base}_{k}", k + 1
        return name

    nodes = []
    for layer in layers:
        if not layer.bottoms or not layer.tops or not all(layer.tops):
            raise PegasusError(f"layer '{layer.name}' ({layer.type}, line {layer.line}) has "
                               f"{len(layer.bottoms)} bottom(s) and tops {list(layer.tops)}: a layer reads at least "
                               "one blob and writes named ones", where=where)
        reads = []
        for bottom in layer.bottoms:
            if bottom not in current:
                raise PegasusError(f"layer '{layer.name}' (line {layer.line}) reads blob '{bottom}', which no "
                                   "earlier layer writes", where=where)
            reads.append(current[bottom])
        outputs = []
        for top in layer.tops:
            writes[top] -= 1
            tensor = top if writes[top] == 0 and top not in inputs else fresh(f"{layer.name}/out")
            used.add(tensor)
            current[top] = tensor
            outputs.append(tensor)
        nodes.append(SourceNode(layer.name, layer.type, reads, outputs, {"layer": layer},
                                where=f"line {layer.line}" if layer.line else ""))
    return nodes


def cut_post_processing(nodes: list[SourceNode]) -> tuple[list[SourceNode], list[SourceNode], list[str]]:
    """(kept nodes, cut nodes, graph outputs): the post-processing layers and everything reading their
    results are cut; the outputs are the tensors nothing kept reads, and those the cut layers read (but
    the feature maps PriorBox reads only the shape of)."""
    kept, cut, cut_tensors = [], [], set()
    for node in nodes:
        if node.op_type in POST_PROCESSING or any(name in cut_tensors for name in node.inputs):
            cut.append(node)
            cut_tensors.update(node.outputs)
        else:
            kept.append(node)
    boundary = {name for node in cut if node.op_type not in _SHAPE_READERS for name in node.inputs}
    read_by_kept = {name for node in kept for name in node.inputs}
    read_by_any = read_by_kept | {name for node in cut for name in node.inputs}
    outputs = [name for node in kept for name in node.outputs
               if name in boundary or name not in read_by_any]
    return kept, cut, outputs


def import_caffe(model: str | Path, weights: str | Path | None = None, *, proto: str = "caffe",
                 name: str | None = None, optimize: bool = True,
                 note: Callable[[str], None] | None = None) -> Graph:
    """Convert a Caffe prototxt (+ caffemodel) to a verified pegasus Graph. ``note`` receives one-line
    remarks for the user: the post-processing cut, random weights when ``weights`` is None."""
    net = read_prototxt(model, proto)
    blobs = read_caffemodel(weights, proto) if weights is not None else None
    where = str(net.path)
    layers = network_layers(net)
    inputs = network_inputs(net, layers)
    layers = [layer for layer in layers if layer.type != "Input"]
    nodes = source_nodes(layers, [n for n, _ in inputs], where)
    kept, cut, outputs = cut_post_processing(nodes)
    TABLE.check_supported(kept)
    if net.deferred is not None:
        raise net.deferred
    if not outputs:
        raise PegasusError("the network computes nothing before its post-processing layers", where=where)

    graph = Graph(name or net.message.name or Path(model).stem)
    builder = GraphBuilder(graph)
    ctx = CaffeContext(builder, blobs, str(weights if weights is not None else net.path))
    with errors_named(where):
        for input_name, shape in inputs:
            builder.add_input(input_name, TensorType(shape, DType.FLOAT32))
        convert_nodes(TABLE, ctx, kept)
    for node in kept:
        missing = [top for top in node.outputs if not builder.has(top)]
        if missing:
            raise PegasusError(f"layer '{node.name}' ({node.op_type}) declares {len(node.outputs)} tops, which it "
                               f"does not compute ({', '.join(missing)} never written)", where=where)
    graph.outputs = outputs
    if note and cut:
        listed = ", ".join(f"{node.op_type} {node.name}" for node in cut)
        note(f"post-processing left out of the graph ({listed}); graph outputs: {', '.join(outputs)}")
    if note and ctx.randomised:
        note(f"warning: no --weights given: {len(ctx.randomised)} layers have random weights (seed {RANDOM_SEED}); "
             "the outputs mean nothing until you import with the .caffemodel")
    return run_import_passes(graph, optimize=optimize)
