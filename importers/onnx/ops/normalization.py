"""ONNX converters for the normalization family.

BatchNormalization before opset 14 had no ``training_mode``: a node was in training mode when it
asked for its statistics outputs, which pegasus does not compute for those opsets; ``spatial``
(opsets 7-8) only mattered in training, the parameters' shapes say the rest. From opset 14 the
attributes map 1:1.
"""

from pegasus.errors import PegasusError
from pegasus.importers.onnx.registry import OnnxContext, OnnxNode, converter, direct

direct("InstanceNormalization", "LRN")
direct("LayerNormalization", since=17)
direct("BatchNormalization", since=14)


@converter("BatchNormalization", since=7)
def batch_normalization_7(ctx: OnnxContext, node: OnnxNode) -> None:
    """BatchNormalization-7/9: inference form only (one output)."""
    if any(node.outputs[1:]):
        raise PegasusError(f"BatchNormalization node '{node.name}': the training-mode statistics outputs of "
                           f"opset {ctx.opset} are not supported (export the model in inference mode)")
    attrs = {key: value for key, value in node.attrs.items() if key in ("epsilon", "momentum")}
    ctx.emit("BatchNormalization", node.inputs, attrs, node=node, outputs=node.outputs[:1])
