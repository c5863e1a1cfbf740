"""PyTorch converters for the recurrent layers: lstm, gru, rnn_tanh, rnn_relu (layers, bidirectional,
batch_first) onto the registry's LSTM, GRU and RNN (ONNX's definitions), one registry layer per torch layer.

PyTorch's flat parameter list holds, per layer and direction, w_ih, w_hh, b_ih, b_hh (without the biases
when ``bias=False``; a projection, ``proj_size``, adds w_hr and is refused). The gate blocks are reordered
once at import: LSTM's i, f, g, o becomes ONNX's i, o, f, c; GRU's r, z, n becomes z, r, h, with
``linear_before_reset=1`` (PyTorch applies r to (W_hn h + b_hn)). B is b_ih then b_hh. With batch_first
the layers run in ONNX layout 1, whose Y (B, T, directions, H) reshapes to PyTorch's (B, T, directions * H)
for free; time-major Y (T, directions, B, H) is transposed first. The initial states (layers * directions,
B, H) are sliced per layer (constants fold); the final states are the layers' Y_h (and Y_c) concatenated.
"""

from __future__ import annotations

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.pytorch.context import TorchContext, converter

#: aten op -> (registry op, gates, ONNX gate order as positions in PyTorch's, extra attributes)
_KINDS = {"lstm": ("LSTM", 4, (0, 3, 1, 2), {}), "gru": ("GRU", 3, (1, 0, 2), {"linear_before_reset": 1}),
          "rnn_tanh": ("RNN", 1, (0,), {"activations": ("Tanh",)}),
          "rnn_relu": ("RNN", 1, (0,), {"activations": ("Relu",)})}


def _gates(array: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    blocks = np.split(array, len(order))
    return np.concatenate([blocks[i] for i in order])


def _weights(ctx: TorchContext, node: SourceNode, params: list[str], layer: int, directions: int, has_biases: bool,
             order: tuple[int, ...]) -> list[str]:
    """W, R, B of one layer (all directions), reordered to ONNX's gates."""
    per = 4 if has_biases else 2
    w, r, b = [], [], []
    for direction in range(directions):
        values = [ctx.builder.constant(p, node=node.name, op=node.op_type, what="recurrent weights")
                  for p in params[(layer * directions + direction) * per:][:per]]
        w.append(_gates(values[0], order))
        r.append(_gates(values[1], order))
        biases = values[2:] if has_biases else [np.zeros(values[0].shape[0], values[0].dtype)] * 2
        b.append(np.concatenate([_gates(v, order) for v in biases]))
    return [ctx.add_constant(f"{node.name}/{what}_l{layer}", np.stack(v)) for what, v in (("W", w), ("R", r), ("B", b))]


def _state(ctx: TorchContext, node: SourceNode, state: str, layer: int, directions: int, batch_first: bool) -> str:
    """Layer ``layer``'s slice of an initial state (layers * directions, B, H), in the layer's layout."""
    start = layer * directions
    part = ctx.emit("Slice", [state], {"starts": (start,), "ends": (start + directions,), "axes": (0,)}, node=node,
                    suffix=f"/state_l{layer}")[0]
    if batch_first:
        part = ctx.emit("Transpose", [part], {"perm": (1, 0, 2)}, node=node, suffix=f"/state_l{layer}_bdh")[0]
    return part


@converter("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu")
def recurrent(ctx: TorchContext, node: SourceNode) -> None:
    kind = node.op_type.split("::")[1]
    op, gates, order, extra = _KINDS[kind]
    args = ctx.args(node)
    if "batch_sizes" in args:
        raise PegasusError(f"{node.describe()}: {kind} over a packed sequence (pack_padded_sequence) is not supported")
    x, params = args["input"], list(args["params"])
    layers, bidirectional = int(args["num_layers"]), bool(args["bidirectional"])
    batch_first, has_biases = bool(args["batch_first"]), bool(args["has_biases"])
    directions = 2 if bidirectional else 1
    if len(params) != layers * directions * (4 if has_biases else 2):
        raise PegasusError(f"{node.describe()}: {len(params)} parameters for {layers} layers: a projection "
                           "(proj_size) is not supported")
    if args.get("train"):
        raise PegasusError(f"{node.describe()}: {kind} in training mode; call model.eval() before saving")
    hidden = ctx.shape(params[1])[1]
    states = list(args["hx"]) if isinstance(args["hx"], (list, tuple)) else [args["hx"]]
    outputs = ctx.output_names(node, 1 + len(states))
    attrs = {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward",
             "layout": int(batch_first), **extra}
    sequence, finals = x, [[] for _ in states]
    for layer in range(layers):
        initial = [_state(ctx, node, s, layer, directions, batch_first) for s in states]
        inputs = [sequence, *_weights(ctx, node, params, layer, directions, has_biases, order), "", *initial]
        suffix = f"/l{layer}" if layers > 1 else ""
        names = [ctx.graph.unique_tensor_name(f"{node.name}{suffix}/{what}") for what in ("Y", "Y_h", "Y_c")]
        results = ctx.emit(op, inputs, attrs, node=node, outputs=names[:1 + len(states)],
                           suffix=f"/l{layer}" if layer else "")
        y = results[0]
        if not batch_first:  # (T, D, B, H) -> (T, B, D, H)
            y = ctx.emit("Transpose", [y], {"perm": (0, 2, 1, 3)}, node=node, suffix=f"{suffix}/tbdh")[0]
        shape = ctx.shape(y)
        last = layer == layers - 1
        sequence = ctx.emit("Reshape", [y], {"shape": shape[:2] + (directions * hidden,)}, node=node,
                            suffix="" if last else f"{suffix}/sequence", outputs=outputs[:1] if last else None)[0]
        for finals_of, state in zip(finals, results[1:]):
            if batch_first:  # (B, D, H) -> (D, B, H)
                state = ctx.emit("Transpose", [state], {"perm": (1, 0, 2)}, node=node, suffix=f"{suffix}/dbh")[0]
            finals_of.append(state)
    for out, parts in zip(outputs[1:], finals):
        ctx.emit("Concat", parts, {"axis": 0}, node=node, outputs=[out], suffix=f"/{out.rsplit(':', 1)[-1]}_n")
