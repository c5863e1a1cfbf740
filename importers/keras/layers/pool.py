"""Keras converters for pooling: MaxPooling1D/2D/3D, AveragePooling1D/2D/3D (padding excluded from the
average, as TF does) and GlobalAveragePooling1D/2D/3D, GlobalMaxPooling1D/2D/3D (``keepdims``), in the layer's
``data_format``. A global pooling is the registry's, whose output keeps size-1 spatial axes (Keras'
``keepdims=True`` form); without keepdims a Reshape drops them."""

from __future__ import annotations

from pegasus.importers.common.channels_last import padding
from pegasus.importers.keras.context import KerasContext, converter
from pegasus.importers.keras.graph import KerasNode
from pegasus.importers.keras.layers.conv import channels_last, ints

#: layer class -> (registry op, spatial axes)
POOLS = {"MaxPooling1D": ("MaxPool", 1), "MaxPooling2D": ("MaxPool", 2), "MaxPooling3D": ("MaxPool", 3),
         "AveragePooling1D": ("AveragePool", 1), "AveragePooling2D": ("AveragePool", 2),
         "AveragePooling3D": ("AveragePool", 3)}
GLOBAL_POOLS = {f"Global{kind}Pooling{n}D": f"Global{kind}Pool" for kind in ("Average", "Max") for n in (1, 2, 3)}


@converter(*POOLS)
def pool(ctx: KerasContext, node: KerasNode) -> None:
    op, n = POOLS[node.op_type]
    cfg = node.attrs
    size = ints(cfg.get("pool_size", 2), n)
    strides = cfg.get("strides")
    attrs = {"kernel_shape": size, "strides": ints(strides, n) if strides is not None else size,
             "channels_last": channels_last(node), **padding(node, cfg.get("padding", "valid"))}
    ctx.emit(op, [node.inputs[0]], attrs, node=node, outputs=node.outputs[:1])


@converter(*GLOBAL_POOLS)
def global_pool(ctx: KerasContext, node: KerasNode) -> None:
    x = node.inputs[0]
    attrs = {"channels_last": channels_last(node)}
    if node.attrs.get("keepdims", False):
        ctx.emit(GLOBAL_POOLS[node.op_type], [x], attrs, node=node, outputs=node.outputs[:1])
        return
    pooled = ctx.emit(GLOBAL_POOLS[node.op_type], [x], attrs, node=node, suffix="/pool")[0]
    shape = ctx.type_of(x).shape
    channels = shape[-1] if attrs["channels_last"] else shape[1]
    ctx.emit("Reshape", [pooled], {"shape": (shape[0], channels)}, node=node, outputs=node.outputs[:1])
