"""Keras converters for the recurrent layers SimpleRNN, LSTM and GRU, and the Bidirectional wrapper, onto the
registry's RNN, LSTM and GRU (ONNX's definitions), batch-major (``layout`` 1).

Weights: a Keras kernel (input, gates * units) is ONNX's W transposed, stacked per direction, with the gate
blocks reordered: Keras' LSTM gates are i, f, c, o and ONNX's i, o, f, c; GRU's are z, r, h in both. The
bias is ONNX's input bias (the recurrent bias zero), except for GRU with ``reset_after`` (Keras' default
since TF 2), whose (2, 3 * units) bias is the input and the recurrent bias, and whose cell is ONNX's
``linear_before_reset``. ``activation`` and ``recurrent_activation`` become the ops' activations (ONNX's
f, g, h: recurrent, activation, activation), hard_sigmoid as the file's Keras version defines it.

Outputs: ``return_sequences`` gives every step (Y without its direction axis), else the last state; with
``go_backwards`` the layer runs in reverse (ONNX ``reverse``) and Keras returns the steps in the order it
computed them, so the sequence is reversed back. ``return_state`` adds the final states (h, and c for
LSTM). Bidirectional is one op with ``direction`` bidirectional; ``merge_mode`` concat (one Reshape of Y's
direction axis into the features), sum, ave, mul, or None (two outputs), then the states forward first.
Masks, initial states given as inputs, ``time_major`` and stateful carry-over are not supported.

TimeDistributed (here as the other wrapper) applies its layer's converter to the input with batch and time
merged into one axis, and splits them again after.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.keras.context import TABLE, KerasContext, converter
from pegasus.importers.keras.graph import KerasNode

#: Keras class -> (registry op, gate blocks, ONNX gate order as positions in Keras' order, states)
CELLS = {"SimpleRNN": ("RNN", 1, (0,), 1), "LSTM": ("LSTM", 4, (0, 3, 1, 2), 2), "GRU": ("GRU", 3, (0, 1, 2), 1)}
#: Keras activation -> (ONNX activation name, alpha, beta) for the recurrent ops
_ACTIVATIONS = {"tanh": ("Tanh", None, None), "sigmoid": ("Sigmoid", None, None), "relu": ("Relu", None, None),
                "linear": ("Affine", 1.0, 0.0), "softsign": ("Softsign", None, None),
                "softplus": ("Softplus", None, None), "elu": ("Elu", 1.0, None)}
_HARD_SIGMOID = {2: ("HardSigmoid", 0.2, 0.5), 3: ("HardSigmoid", 1.0 / 6.0, 0.5)}


def _activation(ctx: KerasContext, node: KerasNode, cfg: dict, key: str, default: str) -> tuple:
    name = str(cfg.get(key) or default).lower()
    if name == "hard_sigmoid":
        return _HARD_SIGMOID[3 if ctx.major >= 3 else 2]
    if name not in _ACTIVATIONS:
        raise PegasusError(f"{node.describe()}: {key} '{name}' is not supported in a recurrent layer "
                           f"({', '.join(sorted(_ACTIVATIONS) + ['hard_sigmoid'])})")
    return _ACTIVATIONS[name]


def _refuse_variants(node: KerasNode, cfg: dict) -> None:
    if cfg.get("time_major"):
        raise PegasusError(f"{node.describe()}: time_major=True is not supported")
    if len(node.inputs) != 1:
        raise PegasusError(f"{node.describe()}: initial states given as inputs are not supported")


def _direction_weights(cls: str, cfg: dict, arrays: list[np.ndarray], node: KerasNode) -> tuple[np.ndarray, ...]:
    """(W, R, B) of one direction in ONNX's layout from Keras' kernel, recurrent kernel and bias."""
    _, gates, order, _ = CELLS[cls]
    if len(arrays) != (3 if cfg.get("use_bias", True) else 2):
        raise PegasusError(f"{node.describe()}: expected the kernel, recurrent kernel and bias (when use_bias) of "
                           f"a {cls} cell, the file holds {len(arrays)} arrays")
    kernel, recurrent = (a.astype(np.float32) for a in arrays[:2])
    units = recurrent.shape[0] if recurrent.ndim == 2 else 0
    bias_shapes = [(gates * units,)] + ([(2, gates * units)] if cls == "GRU" else [])
    if kernel.ndim != 2 or kernel.shape[1] != gates * units or units == 0 or \
            recurrent.shape != (units, gates * units) or \
            (len(arrays) > 2 and arrays[2].shape not in bias_shapes):
        raise PegasusError(f"{node.describe()}: weights of shapes {[list(a.shape) for a in arrays]} are not the "
                           f"kernel, recurrent kernel and bias of a {cls} cell with {gates} gates")

    def reorder(blocks: np.ndarray) -> np.ndarray:
        parts = np.split(blocks, gates, axis=0)
        return np.concatenate([parts[g] for g in order], axis=0)

    w, r = reorder(kernel.T), reorder(recurrent.T)
    bias = arrays[2].astype(np.float32) if len(arrays) > 2 else np.zeros(gates * units, np.float32)
    if cls == "GRU" and cfg.get("reset_after", True) and bias.ndim == 2:
        b = np.concatenate([reorder(bias[0]), reorder(bias[1])])
    else:
        b = np.concatenate([reorder(bias.reshape(-1)), np.zeros(gates * units, np.float32)])
    return w, r, b


def emit_recurrent(ctx: KerasContext, node: KerasNode, x: str, cls: str, configs: list[dict],
                   weights: list[list[np.ndarray]], direction: str) -> list[str]:
    """One registry recurrent op over ``x`` (B, T, F): returns Y (B, T, D, H) and the final states (B, D, H)."""
    op, _, _, states = CELLS[cls]
    cfg = configs[0]
    parts = [_direction_weights(cls, c, w, node) for c, w in zip(configs, weights)]
    w, r, b = (np.stack([p[i] for p in parts]) for i in range(3))
    specs = [_activation(ctx, node, cfg, "recurrent_activation", "sigmoid")] if op != "RNN" else []
    specs += [_activation(ctx, node, cfg, "activation", "tanh")] * (2 if op == "LSTM" else 1)
    specs = specs * len(parts)
    attrs: dict[str, Any] = {"hidden_size": r.shape[-1], "direction": direction, "layout": 1,
                             "activations": tuple(s[0] for s in specs),
                             "activation_alpha": tuple(s[1] for s in specs if s[1] is not None),
                             "activation_beta": tuple(s[2] for s in specs if s[2] is not None)}
    if op == "GRU":
        attrs["linear_before_reset"] = int(bool(cfg.get("reset_after", True)))
    inputs = [x, ctx.param(node, "W", w), ctx.param(node, "R", r), ctx.param(node, "B", b)]
    outputs = [ctx.graph.unique_tensor_name(f"{node.name}/{what}") for what in ("sequence", "h", "c")[:1 + states]]
    return ctx.emit(op, inputs, attrs, node=node, outputs=outputs)


def _write(ctx: KerasContext, node: KerasNode, index: int, op: str, inputs: list[str], attrs: dict,
           what: str) -> None:
    """Emit output ``index`` of the layer when the model reads it (an unread state is not computed)."""
    if index < len(node.outputs) and node.outputs[index]:
        ctx.emit(op, inputs, attrs, node=node, outputs=[node.outputs[index]], suffix=f"/{what}")


def _reverse_time(ctx: KerasContext, node: KerasNode, sequence: str) -> str:
    steps = ctx.type_of(sequence).shape[1]
    return ctx.emit("Slice", [sequence], {"starts": (steps - 1,), "ends": (-steps - 1,), "axes": (1,),
                                          "steps": (-1,)}, node=node, suffix="/reverse")[0]


@converter(*CELLS)
def recurrent(ctx: KerasContext, node: KerasNode) -> None:
    cfg = node.attrs
    _refuse_variants(node, cfg)
    backwards = bool(cfg.get("go_backwards", False))
    y, *states = emit_recurrent(ctx, node, node.inputs[0], node.op_type, [cfg], [node.weights],
                                "reverse" if backwards else "forward")
    batch, steps, _, hidden = ctx.type_of(y).shape
    if cfg.get("return_sequences"):
        if backwards:
            y = _reverse_time(ctx, node, y)
        _write(ctx, node, 0, "Reshape", [y], {"shape": (batch, steps, hidden)}, "sequence")
    else:
        _write(ctx, node, 0, "Reshape", [states[0]], {"shape": (batch, hidden)}, "last")
    if cfg.get("return_state"):
        for k, state in enumerate(states, start=1):
            _write(ctx, node, k, "Reshape", [state], {"shape": (batch, hidden)}, f"state_{k}")


#: merge_mode -> reduction of the direction axis (concat is a Reshape, None two outputs, mul a product)
_MERGES = {"sum": "ReduceSum", "ave": "ReduceMean"}


@converter("Bidirectional")
def bidirectional(ctx: KerasContext, node: KerasNode) -> None:
    cfg = node.attrs
    forward = cfg["layer"]
    backward = cfg.get("backward_layer") or forward
    cls = str(forward.get("class_name"))
    inner = forward.get("config", {})
    if cls not in CELLS or backward.get("class_name") != cls:
        raise PegasusError(f"{node.describe()}: wraps {cls} / {backward.get('class_name')}; supported: the same "
                           f"one of {', '.join(CELLS)} both ways")
    _refuse_variants(node, inner)
    half = len(node.weights) // 2
    y, *states = emit_recurrent(ctx, node, node.inputs[0], cls, [inner, backward.get("config", inner)],
                                [node.weights[:half], node.weights[half:]], "bidirectional")
    batch, steps, _, hidden = ctx.type_of(y).shape
    sequences = bool(inner.get("return_sequences"))
    merged, axis = (y, 2) if sequences else (states[0], 1)
    keep = (batch, steps) if sequences else (batch,)
    mode = cfg.get("merge_mode", "concat")
    if mode == "concat":
        _write(ctx, node, 0, "Reshape", [merged], {"shape": (*keep, 2 * hidden)}, "concat")
        count = 1
    elif mode in _MERGES:
        _write(ctx, node, 0, _MERGES[mode], [merged], {"axes": (axis,), "keepdims": False}, mode)
        count = 1
    elif mode in ("mul", None):
        halves = ctx.emit("Split", [merged], {"axis": axis, "split": (1, 1)}, node=node, suffix="/split",
                          outputs=[ctx.graph.unique_tensor_name(f"{node.name}/{d}") for d in ("forward", "backward")])
        if mode == "mul":
            product = ctx.emit("Mul", halves, node=node, suffix="/product")[0]
            _write(ctx, node, 0, "Squeeze", [product], {"axes": (axis,)}, "mul")
            count = 1
        else:
            for k, half_ in enumerate(halves):
                _write(ctx, node, k, "Squeeze", [half_], {"axes": (axis,)}, f"direction_{k}")
            count = 2
    else:
        raise PegasusError(f"{node.describe()}: merge_mode '{mode}' is not supported")
    if inner.get("return_state"):
        for k, state in enumerate(states):      # (B, 2, H): forward then backward of each state
            for d in range(2):
                index = count + d * len(states) + k
                part = ctx.emit("Slice", [state], {"starts": (d,), "ends": (d + 1,), "axes": (1,)}, node=node,
                                suffix=f"/state_{index}_slice")[0]
                _write(ctx, node, index, "Reshape", [part], {"shape": (batch, hidden)}, f"state_{index}")


@converter("TimeDistributed")
def time_distributed(ctx: KerasContext, node: KerasNode) -> None:
    """The wrapped layer applied to every step: batch and time merged into one axis around it."""
    inner = node.attrs["layer"]
    x = node.inputs[0]
    shape = ctx.type_of(x).shape
    if len(shape) < 3:
        raise PegasusError(f"{node.describe()}: needs (batch, time, ...) inputs, got {list(shape)}")
    merged = ctx.emit("Reshape", [x], {"shape": (shape[0] * shape[1], *shape[2:])}, node=node, suffix="/merge")[0]
    name = str(inner.get("config", {}).get("name", "layer"))
    stepped = ctx.graph.unique_tensor_name(f"{node.name}/{name}")
    inner_node = KerasNode(f"{node.name}/{name}", str(inner.get("class_name")), [merged], [stepped],
                           dict(inner.get("config", {})), where=node.where, weights=node.weights,
                           layer=f"{node.layer}/{name}")
    TABLE.find(inner_node.op_type)(ctx, inner_node)
    out = ctx.type_of(stepped).shape
    ctx.emit("Reshape", [stepped], {"shape": (shape[0], shape[1], *out[1:])}, node=node, outputs=node.outputs[:1])


@converter("TimeDistributedMerge")
def time_distributed_merge(ctx: KerasContext, node: KerasNode) -> None:
    """Before a model a TimeDistributed wraps (graph.py inlines the model): (B, T, ...) -> (B * T, ...)."""
    shape = ctx.type_of(node.inputs[0]).shape
    if len(shape) < 3:
        raise PegasusError(f"{node.describe()}: needs (batch, time, ...) inputs, got {list(shape)}")
    ctx.emit("Reshape", node.inputs[:1], {"shape": (shape[0] * shape[1], *shape[2:])}, node=node,
             outputs=node.outputs[:1])


@converter("TimeDistributedSplit")
def time_distributed_split(ctx: KerasContext, node: KerasNode) -> None:
    """After it: (B * T, ...) -> (B, T, ...), B and T those of the wrapper's input (the second input)."""
    stepped, original = (ctx.type_of(name).shape for name in node.inputs)
    ctx.emit("Reshape", node.inputs[:1], {"shape": (original[0], original[1], *stepped[1:])}, node=node,
             outputs=node.outputs[:1])
