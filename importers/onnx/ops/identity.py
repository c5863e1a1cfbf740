"""ONNX converters for Identity and Dropout (inference mode: Dropout is the identity)."""

from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter, direct

direct("Identity")


@converter("Dropout", since=1)
def dropout(ctx: OnnxContext, node: OnnxNode) -> None:
    """Inference-time Dropout returns its input; the optional mask output is all ones."""
    import numpy as np

    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=[node.outputs[0]])
    if len(node.outputs) > 1 and node.outputs[1]:
        ctx.builder.set_constant(node.outputs[1], np.ones(ctx.type_of(node.inputs[0]).shape, dtype=bool))
