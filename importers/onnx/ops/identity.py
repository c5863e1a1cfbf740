"""ONNX converters for Identity and Dropout (inference mode: Dropout is the identity)."""

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter, direct
from pegasus.limits import check_tensor

direct("Identity")


@converter("Dropout", since=1)
def dropout(ctx: OnnxContext, node: OnnxNode) -> None:
    """Inference-time Dropout returns its input; the optional mask output is all ones."""
    training = ctx.constant(node, 2, "training_mode", default=False)
    if bool(np.asarray(training).item()):
        raise PegasusError(f"Dropout node '{node.name}' is in training mode (random); export the model for inference")
    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=[node.outputs[0]])
    if len(node.outputs) > 1 and node.outputs[1]:
        shape = ctx.type_of(node.inputs[0]).shape
        check_tensor(shape, 1, f"Dropout node '{node.name}' mask")  # before np.ones allocates it
        ctx.builder.set_constant(node.outputs[1], np.ones(shape, dtype=bool))
