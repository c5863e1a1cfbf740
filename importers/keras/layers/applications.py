"""Keras converters for the layers ``keras.applications`` defines for its own models, which files of those
models hold by class name: ConvNeXt's LayerScale (``x * gamma``, one learned factor per channel of the last
axis) and InceptionResNetV2's CustomScaleLayer (``inputs[0] + inputs[1] * scale``; Keras 2 registers it as
``Custom>CustomScaleLayer``). StochasticDepth, ConvNeXt's other one, is the identity at inference.
"""

from __future__ import annotations

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode


@converter("LayerScale")
def layer_scale(ctx: KerasContext, node: KerasNode) -> None:
    gamma = ctx.weights(node, ["gamma"])["gamma"]
    channels = ctx.type_of(node.inputs[0]).shape[-1]
    if gamma.shape != (channels,):
        raise PegasusError(f"{node.describe()}: gamma {list(gamma.shape)} does not fit {channels} channels")
    ctx.emit("Mul", [node.inputs[0], ctx.param(node, "gamma", gamma)], node=node, outputs=node.outputs[:1])


@converter("CustomScaleLayer", "Custom>CustomScaleLayer")
def custom_scale(ctx: KerasContext, node: KerasNode) -> None:
    if len(node.inputs) != 2 or "scale" not in node.attrs:
        raise PegasusError(f"{node.describe()}: expected InceptionResNetV2's layer (two inputs and a scale)")
    ctx.weights(node, [])
    scaled = ctx.emit("Mul", [node.inputs[1], ctx.scalar(node, "scale", float(node.attrs["scale"]))], node=node,
                      suffix="/scaled")[0]
    ctx.emit("Add", [node.inputs[0], scaled], node=node, outputs=node.outputs[:1])


@converter("StochasticDepth")
def stochastic_depth(ctx: KerasContext, node: KerasNode) -> None:
    ctx.emit("Identity", [node.inputs[0]], node=node, outputs=node.outputs[:1])
