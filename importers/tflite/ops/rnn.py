"""TFLite converter for UNIDIRECTIONAL_SEQUENCE_LSTM onto the registry's LSTM (ONNX's definition).

The TFLite op takes 24 inputs: x; the input and recurrent weights of the gates i, f, c, o; peephole
weights (i, f, o); the gate biases; projection weights and bias; the h and c state variables; layer-norm
coefficients. ONNX stacks the gates as i, o, f, c, so the blocks are reordered once at import; the
recurrent bias is zero (TFLite has one bias per gate). Peepholes map (ONNX's P is i, o, f and applies
the output gate's to the new cell state, as TFLite does). TFLite's cell clipping (``cell_clip``, 10.0 in
every Keras LSTM the converter writes) is the registry LSTM's ``cell_clip``, not ONNX's ``clip`` (which
clips the gates' inputs, a different function). Variants the registry LSTM cannot express are refused by
name: CIFG (no input gate: TFLite couples i = 1 - f, ONNX's input_forget couples f = 1 - i), projection,
layer normalization and diagonal recurrent weights.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tflite.context import TfliteContext, converter

_INPUT_WEIGHTS, _RECURRENT_WEIGHTS, _BIASES = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)   # gates i, f, c, o
_PEEPHOLES = (9, 10, 11)                # i, f, o
_H_STATE, _C_STATE = 18, 19
_ONNX_GATES = (0, 3, 1, 2)              # i, o, f, c as positions in TFLite's i, f, c, o
_ONNX_PEEPHOLES = (0, 2, 1)             # i, o, f as positions in TFLite's i, f, o
#: inputs whose presence makes a variant the registry LSTM cannot express
_UNSUPPORTED_INPUTS = {16: "projection weights", 17: "projection bias", 20: "input layer-norm coefficients",
                       21: "forget layer-norm coefficients", 22: "cell layer-norm coefficients",
                       23: "output layer-norm coefficients"}
#: fused_activation_function -> ONNX activation name for the cell input and output
_CELL_ACTIVATIONS = {"TANH": "Tanh", "RELU": "Relu", "SIGMOID": "Sigmoid"}


def _refuse_variants(node: SourceNode) -> None:
    found = [what for index, what in _UNSUPPORTED_INPUTS.items() if node.input(index)]
    if not node.input(_INPUT_WEIGHTS[0]):
        found.append("CIFG (no input gate)")
    if node.attrs.get("diagonal_recurrent_tensors", False):
        found.append("diagonal recurrent weights")
    activation = str(node.attrs.get("fused_activation_function", "TANH"))
    if activation not in _CELL_ACTIVATIONS:
        found.append(f"cell activation {activation}")
    if found:
        raise PegasusError(f"{node.describe()}: LSTM variant not supported: {', '.join(found)}")


@converter("UNIDIRECTIONAL_SEQUENCE_LSTM")
def unidirectional_sequence_lstm(ctx: TfliteContext, node: SourceNode) -> None:
    _refuse_variants(node)
    gates = [ctx.weights(node, i, "input weights") for i in _INPUT_WEIGHTS]
    recurrent = [ctx.weights(node, i, "recurrent weights") for i in _RECURRENT_WEIGHTS]
    biases = [ctx.weights(node, i, "gate bias", optional=True) for i in _BIASES]
    hidden = recurrent[0].shape[0]
    biases = [np.zeros(hidden, np.float32) if b is None else b for b in biases]
    w = np.concatenate([gates[g] for g in _ONNX_GATES])[None]
    r = np.concatenate([recurrent[g] for g in _ONNX_GATES])[None]
    b = np.concatenate([biases[g] for g in _ONNX_GATES] + [np.zeros(4 * hidden, np.float32)])[None]
    time_major = bool(node.attrs.get("time_major", False))
    batch = ctx.type_of(node.inputs[0]).shape[1 if time_major else 0]
    state_shape = (1, batch, hidden) if time_major else (batch, 1, hidden)
    states = [ctx.add_constant(f"{node.name}/{what}", ctx.weights(node, index, what).reshape(state_shape))
              for index, what in ((_H_STATE, "initial_h"), (_C_STATE, "initial_c"))]
    inputs = [node.inputs[0], ctx.add_constant(f"{node.name}/W", w), ctx.add_constant(f"{node.name}/R", r),
              ctx.add_constant(f"{node.name}/B", b), "", *states]
    peepholes = [ctx.weights(node, i, "peephole weights", optional=True) for i in _PEEPHOLES]
    if any(p is not None for p in peepholes):
        p = [np.zeros(hidden, np.float32) if v is None else v for v in peepholes]
        inputs.append(ctx.add_constant(f"{node.name}/P", np.concatenate([p[k] for k in _ONNX_PEEPHOLES])[None]))
    cell = _CELL_ACTIVATIONS[str(node.attrs.get("fused_activation_function", "TANH"))]
    attrs = {"hidden_size": hidden, "layout": 0 if time_major else 1, "activations": ("Sigmoid", cell, cell)}
    if float(node.attrs.get("cell_clip", 0.0)) > 0:   # the TFLite converter writes 10.0 for every Keras LSTM
        attrs["cell_clip"] = float(node.attrs["cell_clip"])
    sequence = ctx.graph.unique_tensor_name(f"{node.name}/sequence")
    ctx.builder.emit("LSTM", inputs, attrs, name=node.name, outputs=[sequence])
    # Y is (T, 1, B, H) time major, else (B, T, 1, H): drop the direction axis
    ctx.emit("Squeeze", [sequence], {"axes": (1 if time_major else 2,)}, node=node, outputs=node.outputs[:1],
             suffix="/squeeze")
