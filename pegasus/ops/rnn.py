"""Op family: recurrent layers (RNN, GRU, LSTM), one layer each, as ONNX defines them (opset 22).

The three ops share everything but the cell: the shape rule, the layout (time-major or batch-major),
the directions, the per-batch sequence lengths (steps past a sequence's end keep the state and output
zeros; an empty sequence ends in zero states, as onnxruntime does) and the activation functions named
by string. The reference projects the whole input sequence through W at once, then loops over time
steps with one recurrent matrix product per step. Activations reuse the element-wise ops' formulas;
ONNX's Affine and ScaledTanh have no op of their own."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import OpDef, ShapeError, get_op, make_attrs, register

Activation = Callable[[np.ndarray], np.ndarray]
ActivationSpec = tuple[str, dict[str, float]]  # (op name, alpha/beta values given)

#: ONNX activation name (case-insensitive) -> (element-wise op, the parameters it takes)
_ACTIVATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "relu": ("Relu", ()), "tanh": ("Tanh", ()), "sigmoid": ("Sigmoid", ()), "softsign": ("Softsign", ()),
    "softplus": ("Softplus", ()), "leakyrelu": ("LeakyRelu", ("alpha",)), "elu": ("Elu", ("alpha",)),
    "thresholdedrelu": ("ThresholdedRelu", ("alpha",)), "hardsigmoid": ("HardSigmoid", ("alpha", "beta")),
    "affine": ("Affine", ("alpha", "beta")), "scaledtanh": ("ScaledTanh", ("alpha", "beta")),
}


def _affine(x: np.ndarray, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    return alpha * x + beta


def _scaled_tanh(x: np.ndarray, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    return alpha * np.tanh(beta * x)


_LOCAL: dict[str, Callable[..., np.ndarray]] = {"Affine": _affine, "ScaledTanh": _scaled_tanh}


def activation_specs(names: Sequence[str], alphas: Sequence[float], betas: Sequence[float]) -> list[ActivationSpec]:
    """(op name, its alpha/beta values) per activation name. alpha/beta values are consumed in order by the
    activations that take them (as onnxruntime does); an activation left without a value uses its op's
    default. The reference and the code generator both build their formulas from these."""
    supply = {"alpha": iter(alphas), "beta": iter(betas)}
    specs = []
    for name in names:
        if name.lower() not in _ACTIVATIONS:
            raise ShapeError(f"unknown activation '{name}' (known: {sorted(_ACTIVATIONS)})")
        op, params = _ACTIVATIONS[name.lower()]
        values = {param: value for param in params if (value := next(supply[param], None)) is not None}
        specs.append((op, values))
    return specs


def _numpy_activation(op: str, values: dict[str, float]) -> Activation:
    if op in _LOCAL:
        return functools.partial(_LOCAL[op], **values)
    opdef = get_op(op)
    return functools.partial(opdef.fn, make_attrs(opdef, **values))


@dataclass(frozen=True)
class RecurrentAttrs:
    """Attributes every recurrent op has; hidden_size None means R's last dimension."""

    hidden_size: int | None = None
    direction: str = "forward"
    activations: tuple[str, ...] = ()
    activation_alpha: tuple[float, ...] = ()
    activation_beta: tuple[float, ...] = ()
    clip: float | None = None
    layout: int = 0


_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


class Recurrent(OpDef):
    """Inputs X, W, R, B, sequence_lens, initial_h[, initial_c, P]; outputs Y, Y_h[, Y_c].

    Subclasses give the number of gate blocks in W/R, of states, of peephole blocks in P, the default
    activations (per direction) and ``cell``, one time step for one direction.
    """

    Attrs = RecurrentAttrs
    gates: ClassVar[int]
    states: ClassVar[int] = 1
    peepholes: ClassVar[int] = 0
    default_activations: ClassVar[tuple[str, ...]]

    @staticmethod
    def directions(attrs: RecurrentAttrs) -> tuple[bool, ...]:
        """Per direction, whether it runs backwards in time."""
        return _DIRECTIONS[attrs.direction]

    @classmethod
    def activation_specs(cls, attrs: RecurrentAttrs) -> list[list[ActivationSpec]]:
        """The activations (op name, alpha/beta values) of each direction."""
        dirs, per_dir = len(cls.directions(attrs)), len(cls.default_activations)
        names = attrs.activations or cls.default_activations * dirs
        if len(names) != per_dir * dirs:
            raise ShapeError(f"{cls.name} {attrs.direction} takes {per_dir * dirs} activations, got {list(names)}")
        specs = activation_specs(names, attrs.activation_alpha, attrs.activation_beta)
        return [specs[k * per_dir:(k + 1) * per_dir] for k in range(dirs)]

    @classmethod
    def activations(cls, attrs: RecurrentAttrs) -> list[list[Activation]]:
        """The NumPy activation functions of each direction."""
        return [[_numpy_activation(op, values) for op, values in direction]
                for direction in cls.activation_specs(attrs)]

    @classmethod
    def infer(cls, attrs: RecurrentAttrs, inputs: Sequence[TensorType | None]) -> list[TensorType]:
        if attrs.direction not in _DIRECTIONS or attrs.layout not in (0, 1):
            raise ShapeError(f"direction must be one of {list(_DIRECTIONS)} and layout 0 or 1, "
                             f"got '{attrs.direction}' and {attrs.layout}")
        cls.activations(attrs)
        x, w, r = inputs[:3]
        if x.rank != 3 or w.rank != 3 or r.rank != 3:
            raise ShapeError(f"{cls.name} needs 3-D X, W and R")
        seq, batch, size = (x.shape[1], x.shape[0], x.shape[2]) if attrs.layout else x.shape
        dirs, hidden = len(_DIRECTIONS[attrs.direction]), r.shape[-1]
        if attrs.hidden_size not in (None, hidden):
            raise ShapeError(f"hidden_size {attrs.hidden_size} differs from R's last dimension {hidden}")
        state = (batch, dirs, hidden) if attrs.layout else (dirs, batch, hidden)
        g = cls.gates * hidden
        expected = [x.shape, (dirs, g, size), (dirs, g, hidden), (dirs, 2 * g), (batch,), state, state,
                    (dirs, cls.peepholes * hidden)]
        for name, t, shape in zip(_INPUTS, inputs, expected):
            if t is not None and t.shape != shape:
                raise ShapeError(f"{cls.name} {name} has shape {list(t.shape)}, expected {list(shape)}")
        y = (batch, seq, dirs, hidden) if attrs.layout else (seq, dirs, batch, hidden)
        return [TensorType(y, x.dtype)] + [TensorType(state, x.dtype)] * cls.states

    @staticmethod
    def cell(attrs, fns: list[Activation], xw: np.ndarray, state: tuple[np.ndarray, ...], r: np.ndarray,
             rb: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, ...]:
        """One step: ``xw`` = X_t W^T + Wb, ``r``/``rb``/``p`` this direction's R, Rb, P; returns the new states."""
        raise NotImplementedError

    @classmethod
    def reference(cls, attrs: RecurrentAttrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        x, w, r, b, lens, h0, c0, p = list(inputs) + [None] * (8 - len(inputs))
        work = np.float32 if x.dtype == np.float16 else x.dtype
        x, w, r = (a.astype(work) for a in (x, w, r))
        initial = [h0, c0][:cls.states]
        if attrs.layout:
            x, initial = x.transpose(1, 0, 2), [None if s is None else s.transpose(1, 0, 2) for s in initial]
        (seq, batch, _), (dirs, g, _), hidden = x.shape, w.shape, r.shape[-1]
        b = np.zeros((dirs, 2 * g), work) if b is None else b.astype(work)
        p = np.zeros((dirs, cls.peepholes * hidden), work) if p is None else p.astype(work)
        lens = np.full(batch, seq) if lens is None else np.asarray(lens)
        initial = [np.zeros((dirs, batch, hidden), work) if s is None else s.astype(work) for s in initial]
        y, finals = np.zeros((seq, dirs, batch, hidden), work), []
        for k, (reverse, fns) in enumerate(zip(cls.directions(attrs), cls.activations(attrs))):
            step = functools.partial(cls.cell, attrs, fns, r=r[k], rb=b[k, g:], p=p[k])
            finals.append(_scan(step, x @ w[k].T + b[k, :g], tuple(s[k] for s in initial), lens, reverse, y[:, k]))
        states = [np.stack(s) for s in zip(*finals)]
        if attrs.layout:
            y, states = y.transpose(2, 0, 1, 3), [s.transpose(1, 0, 2) for s in states]
        return [a.astype(inputs[0].dtype) for a in [y, *states]]


def _scan(step: Callable[..., tuple[np.ndarray, ...]], xw: np.ndarray, state: tuple[np.ndarray, ...],
          lens: np.ndarray, reverse: bool, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Run ``step`` over the time steps of one direction, writing each H_t into ``y``; the final states.

    Batch entries whose sequence has ended keep their state and output zeros; an empty sequence ends
    in zero states (as onnxruntime does).
    """
    for t in reversed(range(len(xw))) if reverse else range(len(xw)):
        new = step(xw[t], state)
        valid = (t < lens)[:, None]
        state = tuple(np.where(valid, n, s) for n, s in zip(new, state))
        y[t] = np.where(valid, new[0], 0)
    return tuple(np.where((lens > 0)[:, None], s, 0) for s in state)


def _clip(attrs: RecurrentAttrs, v: np.ndarray) -> np.ndarray:
    """Gate pre-activations are clipped to [-clip, clip] when clip is set."""
    return v if attrs.clip is None else np.clip(v, -attrs.clip, attrs.clip)


@register
class RNN(Recurrent):
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb), f = Tanh by default (ONNX RNN-22)."""

    name = "RNN"
    num_inputs = (3, 6)
    gates = 1
    default_activations = ("Tanh",)

    @staticmethod
    def cell(attrs, fns, xw, state, r, rb, p):
        (h,) = state
        return (fns[0](_clip(attrs, xw + h @ r.T + rb)),)


@dataclass(frozen=True)
class GRUAttrs(RecurrentAttrs):
    linear_before_reset: int = 0


@register
class GRU(Recurrent):
    """z, r = f(X W_zr^T + H R_zr^T + b); h~ = g(X W_h^T + (r*H) R_h^T + b), or with linear_before_reset
    g(X W_h^T + Wb_h + r*(H R_h^T + Rb_h)); H_t = (1 - z)*h~ + z*H (ONNX GRU-22, gates z, r, h)."""

    name = "GRU"
    Attrs = GRUAttrs
    num_inputs = (3, 6)
    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    @staticmethod
    def cell(attrs, fns, xw, state, r, rb, p):
        (h,) = state
        n = h.shape[-1]
        z, reset = np.split(fns[0](_clip(attrs, xw[:, :2 * n] + h @ r[:2 * n].T + rb[:2 * n])), 2, axis=-1)
        if attrs.linear_before_reset:
            candidate = xw[:, 2 * n:] + reset * (h @ r[2 * n:].T + rb[2 * n:])
        else:
            candidate = xw[:, 2 * n:] + (reset * h) @ r[2 * n:].T + rb[2 * n:]
        return ((1 - z) * fns[1](_clip(attrs, candidate)) + z * h,)


@dataclass(frozen=True)
class LSTMAttrs(RecurrentAttrs):
    input_forget: int = 0
    #: TFLite's cell_clip: the new cell state C_t clipped to [-cell_clip, cell_clip] before the output gate
    #: reads it (None: not clipped); ONNX has no such attribute (its ``clip`` is on the gates' inputs)
    cell_clip: float | None = None


@register
class LSTM(Recurrent):
    """i, f = f(X W^T + H R^T + P*C_{t-1} + b); c~ = g(...); C_t = f*C_{t-1} + i*c~;
    o = f(... + P_o*C_t); H_t = o*h(C_t); input_forget couples f = 1 - i (ONNX LSTM-22, gates i, o, f, c);
    cell_clip clips C_t (TFLite's LSTMs)."""

    name = "LSTM"
    Attrs = LSTMAttrs
    num_inputs = (3, 8)
    gates = 4
    states = 2
    peepholes = 3
    default_activations = ("Sigmoid", "Tanh", "Tanh")

    @staticmethod
    def cell(attrs, fns, xw, state, r, rb, p):
        h, c = state
        gate_i, gate_o, gate_f, gate_c = np.split(xw + h @ r.T + rb, 4, axis=-1)
        p_i, p_o, p_f = np.split(p, 3)
        i = fns[0](_clip(attrs, gate_i + p_i * c))
        f = 1 - i if attrs.input_forget else fns[0](_clip(attrs, gate_f + p_f * c))
        c = f * c + i * fns[1](_clip(attrs, gate_c))
        if attrs.cell_clip is not None:
            c = np.clip(c, -attrs.cell_clip, attrs.cell_clip)
        o = fns[0](_clip(attrs, gate_o + p_o * c))
        return o * fns[2](c), c
