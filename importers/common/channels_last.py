"""What the channels-last frameworks (TFLite, TensorFlow, Keras) share, written once for all three.

- ``padding``: TF's SAME/VALID onto the registry's ``auto_pad`` (SAME puts the odd pixel at the end,
  ONNX's SAME_UPPER).
- ``ACTIVATIONS`` and ``emit_activated``: fused activations (TFLite's ``fused_activation_function``,
  Keras' ``activation=``) as the registry layer that follows the op, named ``<layer>/<activation>``; the
  quantized lowering fuses a ReLU/ReLU6/clip back into its producer.
- weight layouts: TFLite's OHWI convolution kernels and 1HW(C*M) depthwise kernels, TF/Keras' HWIO and
  HW C M ones, all become the registry's (M, C/group, kh, kw); the activations stay channels last
  (``channels_last=True`` on the spatial ops, see pegasus/ops/layout.py), so no transpose is added.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import ImportContext, SourceNode

_PADDING = {"SAME": "SAME_UPPER", "VALID": "VALID"}


def padding(node: SourceNode, value: Any) -> dict[str, str]:
    """``auto_pad`` for a TF padding name (SAME/VALID, any case)."""
    key = str(value).upper()
    if key not in _PADDING:
        raise PegasusError(f"{node.describe()}: padding '{value}' is not SAME or VALID")
    return {"auto_pad": _PADDING[key]}


#: activation name (lower case; TFLite's enum names lower-cased, Keras' names) -> (registry op, attributes);
#: None for the identity
ACTIVATIONS: dict[str, tuple[str, dict[str, Any]] | None] = {
    "none": None, "linear": None,
    "relu": ("Relu", {}),
    "relu6": ("Clip", {"min": 0.0, "max": 6.0}),
    "relu_n1_to_1": ("Clip", {"min": -1.0, "max": 1.0}),
    "relu_0_to_1": ("Clip", {"min": 0.0, "max": 1.0}),
    "tanh": ("Tanh", {}),
    "sigmoid": ("Sigmoid", {}),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
    "hard_swish": ("HardSwish", {}),
    "swish": ("Swish", {}),
    "silu": ("Swish", {}),
    "gelu": ("Gelu", {"approximate": "none"}),
    "elu": ("Elu", {"alpha": 1.0}),
    "selu": ("Selu", {}),
    "softplus": ("Softplus", {}),
    "softsign": ("Softsign", {}),
    "exponential": ("Exp", {}),
    "softmax": ("Softmax", {"axis": -1}),
    "mish": ("Mish", {}),
}


def activation_layer(node: SourceNode, name: str) -> tuple[str, dict[str, Any]] | None:
    key = str(name).lower()
    if key not in ACTIVATIONS:
        raise PegasusError(f"{node.describe()}: fused activation '{name}' is not supported "
                           f"(supported: {', '.join(sorted(k for k in ACTIVATIONS if k != 'none'))})")
    return ACTIVATIONS[key]


def emit_activated(ctx: ImportContext, node: SourceNode, op: str, inputs: list[str], attrs: dict[str, Any],
                   activation: str | None, output: str | None = None) -> str:
    """Emit ``op`` as layer ``node.name``, followed by its fused activation (if any) as layer
    ``<node.name>/<activation>``; the last of the two writes ``output`` (default: the node's first output)."""
    output = output or node.outputs[0]
    layer = activation_layer(node, activation) if activation else None
    if layer is None:
        return ctx.builder.emit(op, inputs, attrs, name=node.name, outputs=[output])[0]
    pre = ctx.graph.unique_tensor_name(f"{node.name}/pre_activation")
    ctx.builder.emit(op, inputs, attrs, name=node.name, outputs=[pre])
    act_op, act_attrs = layer
    return ctx.builder.emit(act_op, [pre], act_attrs, name=f"{node.name}/{str(activation).lower()}",
                            outputs=[output])[0]


def ohwi_to_oihw(w: np.ndarray) -> np.ndarray:
    """TFLite CONV_2D kernels (out, kh, kw, in) -> (out, in, kh, kw)."""
    return np.ascontiguousarray(w.transpose(0, w.ndim - 1, *range(1, w.ndim - 1)))


def hwio_to_oihw(w: np.ndarray) -> np.ndarray:
    """TF/Keras Conv kernels (kh, [kw,] in, out) -> (out, in, kh[, kw])."""
    n = w.ndim
    return np.ascontiguousarray(w.transpose(n - 1, n - 2, *range(n - 2)))


def depthwise_to_oihw(w: np.ndarray) -> np.ndarray:
    """Depthwise kernels (*spatial, C*M) whose last axis is channel*M + m — TFLite's (1, kh, kw, C*M) with
    its leading 1 dropped, TF/Keras' (kh, kw, C, M) reshaped — -> (C*M, 1, *spatial) for a Conv with
    group = C."""
    return np.ascontiguousarray(np.moveaxis(w, -1, 0)[:, None])
