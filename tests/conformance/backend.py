"""A pegasus backend for ONNX test cases: import a ModelProto, run the float reference.

Inputs that feed compile-time parameters (a Reshape shape, Slice starts...) are bound as constants,
as a user does by fixing input sizes: the importer names the tensor it needs, we bind the graph inputs
that tensor is computed from and re-import. Every other input stays a run-time input.
"""

from __future__ import annotations

import numpy as np
import onnx

from pegasus.errors import NeedsConstantError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph
from pegasus.runtime import interpreter


def graph_inputs(model: onnx.ModelProto) -> list[str]:
    initializers = {init.name for init in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in initializers]


def prepare(model: onnx.ModelProto, inputs: list[np.ndarray]) -> Graph:
    """Import ``model`` with input shapes fixed from the sample ``inputs``."""
    names = graph_inputs(model)
    values = dict(zip(names, inputs))
    constants: dict[str, np.ndarray] = {}
    while True:
        runtime = [n for n in names if n not in constants]
        try:
            return import_onnx(model, input_shapes=[values[n].shape if n not in constants else None for n in names],
                               constant_inputs=constants, name="case")
        except NeedsConstantError as exc:
            sources = [n for n in _graph_inputs_feeding(model, exc.tensor) if n in runtime]
            if not sources:
                raise
            constants.update({n: values[n] for n in sources})


def _graph_inputs_feeding(model: onnx.ModelProto, tensor: str) -> list[str]:
    """The graph inputs that ``tensor``'s value is computed from (itself, if it is one)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    inputs = set(graph_inputs(model))
    found, seen, stack = [], set(), [tensor]
    while stack:
        name = stack.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        if name in inputs:
            found.append(name)
        elif name in producer:
            stack.extend(producer[name].input)
    return sorted(found)


def run_model(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    graph = prepare(model, inputs)
    feeds = {n: v for n, v in zip(graph_inputs(model), inputs) if n in graph.inputs}
    results = interpreter.run(graph, feeds)
    return [results[o.name] for o in model.graph.output]
