"""ONNX converters for the recurrent family: RNN, GRU and LSTM (opset 7 to 22) onto the registry ops.

Attributes map by name (``layout`` appears in opset 14 and defaults to 0 before). ``hidden_size`` is
made explicit from R when absent, and a constant ``sequence_lens`` that covers every step is dropped.
"""

import dataclasses

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter
from pegasus.ops.registry import get_op

_SEQUENCE_LENS = 4


def _convert(ctx: OnnxContext, node: OnnxNode) -> None:
    fields = {f.name for f in dataclasses.fields(get_op(node.op_type).Attrs)}
    unknown = sorted(set(node.attrs) - fields)
    if unknown:
        raise PegasusError(f"{node.op_type} node '{node.name}': attribute(s) {unknown} not supported")
    attrs = dict(node.attrs)
    attrs.setdefault("hidden_size", ctx.type_of(node.input(2)).shape[-1])
    inputs = list(node.inputs)
    lens = ctx.value(node.input(_SEQUENCE_LENS))
    if lens is not None:
        steps = ctx.type_of(node.input(0)).shape[1 if attrs.get("layout", 0) else 0]
        if np.all(lens == steps):
            inputs[_SEQUENCE_LENS] = ""
    while inputs and not inputs[-1]:
        inputs.pop()
    ctx.emit(node.op_type, inputs, attrs, node=node)


for _op in ("RNN", "GRU", "LSTM"):
    converter(_op, since=7)(_convert)
