"""Import a Darknet model (``.cfg`` + ``.weights``) into the pegasus IR.

Steps: parse the cfg (cfg.py) and the weights header (weights.py); the input ``data`` is 1 x channels x height
x width from [net]; each later section is layer i, named ``conv_i`` ([convolutional]) or ``<section>_i``, and
reads the layer before it, or the layers its ``layers``/``from`` indices name (negative: relative to i); list
every unsupported section type at once; convert layer by layer, taking the weights in cfg order (each layer's
count checked against the floats left and the tensor budget first); note floats left over, and run the import
passes (batch norm folds into the convolution).

[yolo] and [region] heads decode boxes: that is post-processing, so their raw input tensors become the graph's
outputs (in cfg order; the last layer's output when there is no head). Apply the logistic/exponential decoding,
anchors and NMS of the head to them after inference.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pegasus.errors import PegasusError, errors_named
from pegasus.importers.common.converters import SourceNode, convert_nodes
from pegasus.importers.darknet.cfg import Section, read_cfg
from pegasus.importers.darknet.layers import TABLE, DarknetContext
from pegasus.importers.darknet.weights import read_weights
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

INPUT = "data"
HEADS = ("yolo", "region")
#: sections whose output no later layer may read (their decoded or training-only results are not computed)
_NO_OUTPUT = HEADS + ("cost",)


def layer_name(s: Section) -> str:
    return f"{'conv' if s.kind == 'convolutional' else s.kind}_{s.index}"


def _source(s: Section, layer: int, key: str, tensors: list[str | None]) -> str:
    """The tensor of layer ``layer`` (an index as the cfg gives it, relative when negative) read by ``s``."""
    index = s.index + layer if layer < 0 else layer
    if not 0 <= index < s.index:
        raise s.error(f"names layer {index}, which is not an earlier layer", key)
    if tensors[index] is None:
        raise s.error(f"reads layer {index}, a [yolo]/[region]/[cost] layer whose output pegasus does not compute "
                      "(it is post-processing)", key)
    return tensors[index]


def _route_reads(s: Section, tensors: list[str | None], previous: str | None) -> list[str]:
    inputs = [_source(s, i, "layers", tensors) for i in s.ints("layers")]
    if not inputs:
        raise s.error("names no layer", "layers")
    return inputs


def _shortcut_reads(s: Section, tensors: list[str | None], previous: str | None) -> list[str]:
    return [_source(s, -1, "from", tensors)] + [_source(s, i, "from", tensors) for i in s.ints("from")]


#: the sections that read other layers than the one before them: kind -> their input tensors
_READS = {"route": _route_reads, "shortcut": _shortcut_reads}


def source_nodes(layers: list[Section]) -> tuple[list[SourceNode], list[str]]:
    """One SourceNode per layer with its input tensors resolved, and the graph outputs."""
    tensors: list[str | None] = []
    nodes, heads = [], []
    previous: str | None = INPUT
    for s in layers:
        if s.kind in _READS:
            inputs = _READS[s.kind](s, tensors, previous)
        elif previous is None:
            raise s.error(f"reads the output of [{layers[s.index - 1].kind}] layer {s.index - 1}, which pegasus "
                          "does not compute (it is post-processing)")
        else:
            inputs = [previous]
        name = layer_name(s)
        if s.kind in HEADS:
            heads.append(inputs[0])
        output = None if s.kind in _NO_OUTPUT else name
        nodes.append(SourceNode(name, s.kind, inputs, [output] if output else [], {"section": s},
                                where=f"line {s.line}"))
        tensors.append(output)
        previous = output
    produced = [t for t in tensors if t is not None]
    return nodes, heads or produced[-1:]


def _input_shape(net: Section) -> tuple[int, int, int, int]:
    return (1, net.int("channels", minimum=1), net.int("height", minimum=1), net.int("width", minimum=1))


def import_darknet(cfg: str | Path, weights: str | Path, *, name: str | None = None, optimize: bool = True,
                   note: Callable[[str], None] | None = None) -> Graph:
    """Convert a Darknet cfg + weights to a verified pegasus Graph. ``note`` receives one-line remarks (floats
    left over in the weights file)."""
    sections = read_cfg(cfg)
    net, layers = sections[0], sections[1:]
    shape = _input_shape(net)
    nodes, outputs = source_nodes(layers)
    TABLE.check_supported(nodes)
    weights_file = read_weights(weights, Path(cfg).name)

    graph = Graph(name or Path(cfg).stem)
    builder = GraphBuilder(graph)
    with errors_named(str(cfg)):
        builder.add_input(INPUT, TensorType(shape, DType.FLOAT32))
        convert_nodes(TABLE, DarknetContext(builder, weights_file), nodes)
    left = weights_file.check_complete()
    if left and note:
        note(f"warning: {Path(weights).name} holds {left:,} floats more than {Path(cfg).name} reads (is it the "
             "weights of another cfg?)")
    if not outputs:
        raise PegasusError("the network computes nothing", where=str(cfg))
    graph.outputs = list(dict.fromkeys(outputs))
    return run_import_passes(graph, optimize=optimize)
