"""The Keras converters' registry and context: the shared mechanism (importers/common/converters.py) plus
what Keras layers need — their weights by role, constants made once per layer (a shared layer's calls use
one copy), the ``activation=`` every layer may carry, and which Keras version wrote the file.

Converters register with ``@converter("Conv2D")`` (the layer's class name as the config spells it).
Activations come from the table the channels-last frameworks share (importers/common/channels_last.py),
with Keras' own names added and the one whose meaning changed with Keras 3 set by version: hard_sigmoid
is clip(0.2x + 0.5, 0, 1) in Keras 2 and relu6(x + 3) / 6 in Keras 3 (gelu is exact in both). Keras 3's
hard_tanh, hard_shrink and soft_shrink are one registry op each; log_sigmoid, tanh_shrink, squareplus and
sparse_plus a few (``COMPOSITE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.channels_last import ACTIVATIONS, emit_activated
from pegasus.importers.common.converters import ConverterTable, ImportContext
from pegasus.importers.keras.graph import KerasNode
from pegasus.ir.builder import GraphBuilder

TABLE = ConverterTable("Keras")

#: Keras activation names beyond the shared table (TFLite-only names left out)
_KERAS_NAMES = {"leaky_relu": ("LeakyRelu", {"alpha": 0.2}), "hard_silu": ("HardSwish", {}),
                "log_softmax": ("LogSoftmax", {"axis": -1}), "celu": ("Celu", {"alpha": 1.0})}
#: activations whose meaning depends on the Keras major version that wrote the file
_BY_VERSION = {2: {"hard_sigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5})},
               3: {"hard_sigmoid": ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}),
                   "hard_tanh": ("Clip", {"min": -1.0, "max": 1.0}),
                   "hard_shrink": ("Shrink", {"bias": 0.0, "lambd": 0.5}),
                   "soft_shrink": ("Shrink", {"bias": 0.5, "lambd": 0.5})}}


def _log_sigmoid(ctx: KerasContext, node: KerasNode, x: str, output: str, at: str) -> str:
    """-softplus(-x), as Keras computes it (no log of an underflowed sigmoid)."""
    negated = ctx.emit("Neg", [x], node=node, suffix=f"{at}/negated")
    y = ctx.emit("Softplus", negated, node=node, suffix=f"{at}/softplus")
    return ctx.emit("Neg", y, node=node, outputs=[output])[0]


def _tanh_shrink(ctx: KerasContext, node: KerasNode, x: str, output: str, at: str) -> str:
    """x - tanh(x)."""
    return ctx.emit("Sub", [x, ctx.emit("Tanh", [x], node=node, suffix=f"{at}/tanh")[0]], node=node,
                    outputs=[output])[0]


def _squareplus(ctx: KerasContext, node: KerasNode, x: str, output: str, at: str) -> str:
    """(x + sqrt(x^2 + 4)) / 2 (Keras' default b = 4)."""
    root = ctx.emit("Sqrt", ctx.emit("Add", [ctx.emit("Mul", [x, x], node=node, suffix=f"{at}/square")[0],
                                             ctx.scalar(node, "squareplus_b", 4.0)], node=node, suffix=f"{at}/plus_b"),
                    node=node, suffix=f"{at}/sqrt")[0]
    total = ctx.emit("Add", [x, root], node=node, suffix=f"{at}/sum")[0]
    return ctx.emit("Mul", [total, ctx.scalar(node, "half", 0.5)], node=node, outputs=[output])[0]


def _sparse_plus(ctx: KerasContext, node: KerasNode, x: str, output: str, at: str) -> str:
    """0 below -1, (x + 1)^2 / 4 between, x above 1: (clip(x, -1, 1) + 1)^2 / 4 + relu(x - 1)."""
    one = ctx.scalar(node, "one", 1.0)
    c = ctx.emit("Add", ctx.emit("Clip", [x], {"min": -1.0, "max": 1.0}, node=node, suffix=f"{at}/clip") + [one],
                 node=node, suffix=f"{at}/shifted")[0]
    square = ctx.emit("Mul", [ctx.emit("Mul", [c, c], node=node, suffix=f"{at}/square")[0],
                              ctx.scalar(node, "quarter", 0.25)], node=node, suffix=f"{at}/quarter")[0]
    above = ctx.emit("Relu", ctx.emit("Sub", [x, one], node=node, suffix=f"{at}/minus_one"), node=node,
                     suffix=f"{at}/above")[0]
    return ctx.emit("Add", [square, above], node=node, outputs=[output])[0]


#: Keras 3 activations that are several registry layers: name -> fn(ctx, node, x, output, suffix) -> output
COMPOSITE = {"log_sigmoid": _log_sigmoid, "tanh_shrink": _tanh_shrink, "squareplus": _squareplus,
             "sparse_plus": _sparse_plus}


def keras_activations(major: int) -> dict[str, tuple[str, dict[str, Any]] | None]:
    """Keras activation name -> (registry op, attributes), None for linear, for files of Keras ``major``."""
    shared = {k: v for k, v in ACTIVATIONS.items() if k not in ("none", "relu_n1_to_1", "relu_0_to_1")}
    return {**shared, **_KERAS_NAMES, **_BY_VERSION[3 if major >= 3 else 2]}


converter = TABLE.converter


class KerasContext(ImportContext):
    """The shared context plus the Keras version, the activation table and per-layer constants."""

    def __init__(self, builder: GraphBuilder, major: int, allow_unsafe: bool = False):
        super().__init__(builder)
        self.major = major
        self.allow_unsafe = allow_unsafe
        self.activations = keras_activations(major)
        self._params: dict[tuple[str, str], str] = {}

    def weights(self, node: KerasNode, roles: Sequence[str]) -> dict[str, np.ndarray]:
        """The layer's arrays by role; ``roles`` names them in file order, as the config implies (a Conv's
        ``kernel`` then ``bias`` when use_bias)."""
        if len(node.weights) != len(roles):
            raise PegasusError(f"{node.describe()}: the file holds {len(node.weights)} weight arrays for this layer, "
                               f"its config implies {len(roles)} ({', '.join(roles) or 'none'})")
        return {role: (w.astype(np.float32) if np.issubdtype(w.dtype, np.floating) else w)
                for role, w in zip(roles, node.weights)}

    def param(self, node: KerasNode, what: str, array: np.ndarray) -> str:
        """Constant ``<layer>/<what>`` holding ``array``, made once per layer so a shared layer's calls read
        one copy."""
        key = (node.layer, what)
        if key not in self._params:
            value = np.asarray(array)
            if np.issubdtype(value.dtype, np.floating):
                value = value.astype(np.float32)
            self._params[key] = self.add_constant(f"{node.layer}/{what}", value)
        return self._params[key]

    def scalar(self, node: KerasNode, what: str, value: float) -> str:
        return self.param(node, what, np.array(value, np.float32))

    def activation_name(self, node: KerasNode, key: str = "activation") -> str | None:
        """The config's activation as a name of the table (None for linear); a custom one is refused."""
        value = node.attrs.get(key, "linear")
        if value is None:
            return None
        if isinstance(value, dict):   # Keras 3 writes a built-in activation as its name; a dict is custom
            raise PegasusError(f"{node.describe()}: {key} {value.get('config', value)!r} is not a built-in Keras "
                               "activation")
        name = str(value).lower()
        if name in COMPOSITE and self.major >= 3:
            return name
        if name not in self.activations:
            supported = ", ".join(sorted([*self.activations, *(COMPOSITE if self.major >= 3 else ())]))
            raise PegasusError(f"{node.describe()}: {key} '{value}' is not supported (supported: {supported})")
        return None if self.activations[name] is None else name

    def activated(self, node: KerasNode, op: str, inputs: list[str], attrs: dict[str, Any] | None = None,
                  activation: str | None = "config", output: str | None = None) -> str:
        """Emit ``op`` as the layer, followed by the config's ``activation=`` (or ``activation``)."""
        name = self.activation_name(node) if activation == "config" else activation
        if name in COMPOSITE:
            pre = self.graph.unique_tensor_name(f"{node.name}/pre_activation")
            self.builder.emit(op, inputs, attrs or {}, name=node.name, outputs=[pre])
            return COMPOSITE[name](self, node, pre, output or node.outputs[0], f"/{name}")
        return emit_activated(self, node, op, inputs, attrs or {}, name, output=output, table=self.activations)

    def apply_activation(self, node: KerasNode, x: str, name: str | None, output: str | None = None,
                         suffix: str = "") -> str:
        """Activation ``name`` (a table name) as its own layer on ``x``; Identity for linear."""
        if name in COMPOSITE:
            return COMPOSITE[name](self, node, x, output or self.graph.unique_tensor_name(f"{node.name}{suffix}"),
                                   suffix)
        layer = self.activations[name] if name else None
        op, attrs = layer if layer else ("Identity", {})
        outputs = [output] if output else None
        return self.emit(op, [x], attrs, node=node, outputs=outputs, suffix=suffix)[0]
