"""``pegasus quantize --MLE``: tighten each activation's range when clipping a few rare large values buys a
finer grid for all the others (Acuity guide §3.6.9: "minimizes per-layer quantization errors").

For every integer activation in the table with calibration values, candidate ranges
``(lo * a, hi * b)`` with ``a, b`` each in 20 steps from 1.0 down to 0.3 are searched (both ends
together, then each end alone, alternating until neither moves); each candidate's grid
is what the scheme would give that range (``scheme.activation``), and its cost is the mean squared
error between the values and their quantize → dequantize on that grid (clipping included). The entry
is replaced (same dtype/qtype) when a candidate beats it. Weights, biases and per-channel entries are
left alone.

Tensors sharing one grid — the output of a MaxPool/Reshape/... gets a copy of its input's entry (the
``tied`` op fact, pegasus.ops.facts) so that it runs on integers unchanged — are refined as one group, on the
values of all of them, and keep sharing the new grid. The group is found from the table alone: entries
with identical parameters.
"""

from __future__ import annotations

import copy

import numpy as np

from pegasus.ops.fixedpoint import dequantize_values, quantize_values
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.quantizers.schemes import Scheme

#: the shrink factors tried for each end of the range
FACTORS = np.linspace(1.0, 0.3, 20)


def quantization_mse(values: np.ndarray, q: TensorQuant) -> float:
    """Mean squared error of ``values`` after quantize → dequantize on ``q``'s (per-tensor) grid."""
    scale, zero = float(q.scale[0]), int(q.zero_point[0])
    back = dequantize_values(quantize_values(values, scale, zero, q.numpy_dtype), scale, zero)
    diff = values - back.astype(np.float64)
    return float(diff @ diff) / max(values.size, 1)


def _key(q: TensorQuant) -> tuple:
    return (q.qtype, q.dtype, q.method, tuple(q.scale), tuple(q.zero_point), q.fl, tuple(q.min_value),
            tuple(q.max_value))


def _entry_scheme(q: TensorQuant, model: Scheme) -> Scheme | None:
    """The scheme that made ``q``: the model's, or dynamic_fixed_point-i16 for a customized layer."""
    for scheme in (model, Scheme("dynamic_fixed_point", "i16")):
        if not scheme.is_float:
            made = scheme.activation(0.0, 1.0)
            if (made.qtype, made.dtype) == (q.qtype, q.dtype):
                return scheme
    return None


def best_range(values: np.ndarray, q: TensorQuant, scheme: Scheme) -> TensorQuant | None:
    """The candidate entry with the lowest MSE on ``values`` if it beats ``q``, else None.

    The search starts with both ends shrunk together, then alternates shrinking each end alone (the
    other one fixed) until neither moves: a few dozen grids instead of all 400 pairs."""
    lo, hi = float(q.min_value[0]), float(q.max_value[0])
    costs: dict[tuple, tuple[float, TensorQuant]] = {}

    def cost(a: float, b: float) -> float:
        candidate = scheme.activation(lo * a, hi * b)
        key = (tuple(candidate.scale), tuple(candidate.zero_point))
        if key not in costs:
            costs[key] = (quantization_mse(values, candidate), candidate)
        return costs[key][0]

    a = b = min(FACTORS, key=lambda f: cost(f, f))
    for _ in range(10):
        new_b = min(FACTORS, key=lambda f: cost(a, f))
        new_a = min(FACTORS, key=lambda f: cost(f, new_b))
        if (new_a, new_b) == (a, b):
            break
        a, b = new_a, new_b
    best_cost, best = min(costs.values(), key=lambda item: item[0])
    return best if best_cost < quantization_mse(values, q) * (1 - 1e-9) else None


def refine_ranges(table: QuantTable, values: dict[str, np.ndarray], scheme: Scheme) -> int:
    """Refine the activations of ``table`` in place on their calibration ``values``; the number of
    tensors whose entry changed."""
    groups: dict[tuple, list[str]] = {}
    for name, q in table.tensors.items():
        if name in values and q.is_integer and not q.per_channel and q.min_value and q.max_value:
            groups.setdefault(_key(q), []).append(name)
    changed = 0
    for names in groups.values():
        q = table.tensors[names[0]]
        own = _entry_scheme(q, scheme)
        if own is None:
            continue
        data = np.concatenate([np.asarray(values[n], dtype=np.float64).ravel() for n in names])
        if not data.size:
            continue
        better = best_range(data, q, own)
        if better is None:
            continue
        for name in names:
            table.tensors[name] = copy.deepcopy(better)
        changed += len(names)
    return changed
