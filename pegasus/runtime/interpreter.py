"""The NumPy reference interpreter: runs a graph layer by layer with the registry's float kernels.

This is what ``pegasus inference --dtype float32`` runs and what every exporter is checked against.
``on_layer`` lets callers look at every intermediate tensor (dumps, layer-by-layer comparison).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pegasus.errors import PegasusError
from pegasus.ir.builder import check_outputs
from pegasus.ir.graph import Graph, Node
from pegasus.ops.registry import get_op

LayerHook = Callable[[Node, list[np.ndarray]], None]


def check_feeds(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Match feeds to the graph's inputs by name, checking shape and casting to the input's dtype."""
    missing = [name for name in graph.inputs if name not in feeds]
    if missing:
        raise PegasusError(f"no value given for model input(s) {missing}")
    extra = sorted(set(feeds) - set(graph.inputs))
    if extra:
        raise PegasusError(f"{extra} is not an input of the model (inputs: {graph.inputs})")
    checked = {}
    for name in graph.inputs:
        ttype = graph.type_of(name)
        value = np.asarray(feeds[name])
        if value.shape != ttype.shape:
            if value.size == ttype.size:
                value = value.reshape(ttype.shape)
            else:
                raise PegasusError(f"input '{name}' expects shape {list(ttype.shape)}, got {list(value.shape)}")
        checked[name] = value.astype(ttype.dtype.numpy, copy=False)
    return checked


def run(graph: Graph, feeds: Mapping[str, np.ndarray], *, on_layer: LayerHook | None = None,
        keep_all: bool = False) -> dict[str, np.ndarray]:
    """Evaluate the graph; returns the outputs (or every tensor with ``keep_all``)."""
    env: dict[str, np.ndarray] = {t.name: t.data for t in graph.tensors.values() if t.is_constant}
    env.update(check_feeds(graph, feeds))
    remaining_uses: dict[str, int] = {}
    if not keep_all:
        for node in graph.nodes:
            for name in node.present_inputs():
                remaining_uses[name] = remaining_uses.get(name, 0) + 1
    for node in graph.nodes:
        opdef = get_op(node.op)
        args = [env[name] if name else None for name in node.inputs]
        check_outputs(opdef, [graph.type_of(out) for out in node.outputs if out], node.name)  # before allocating
        results = opdef.reference(node.attrs, args)
        results = [np.asarray(r) for r in results]
        for out, value in zip(node.outputs, results):
            if out:
                expected = graph.type_of(out)
                if value.shape != expected.shape:
                    raise AssertionError(f"layer '{node.name}' ({node.op}) gave {value.shape}, "
                                         f"its shape rule says {expected.shape}")
                env[out] = value.astype(expected.dtype.numpy, copy=False)
        if on_layer is not None:
            on_layer(node, [env[o] for o in node.outputs if o])
        if not keep_all:
            for name in node.present_inputs():
                remaining_uses[name] -= 1
                if remaining_uses[name] == 0 and name not in graph.outputs and not graph.tensors[name].is_constant:
                    del env[name]
    if keep_all:
        return env
    return {name: env[name] for name in graph.outputs}
