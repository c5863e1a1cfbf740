"""ONNX Constant: not a layer but a value; it becomes a constant tensor of the graph."""

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter

_SCALAR_ATTRS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                 "value_ints": np.int64}


@converter("Constant", since=1)
def constant(ctx: OnnxContext, node: OnnxNode) -> None:
    if "value" in node.attrs:
        value = np.asarray(node.attrs["value"])
    else:
        present = [key for key in _SCALAR_ATTRS if key in node.attrs]
        if not present:
            raise PegasusError(f"Constant node '{node.name}': only tensor and numeric values are supported "
                               f"(has {sorted(node.attrs)})")
        value = np.asarray(node.attrs[present[0]], dtype=_SCALAR_ATTRS[present[0]])
    ctx.builder.set_constant(node.outputs[0], value)
