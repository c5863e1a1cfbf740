"""PRelu's integer rule on a float model pegasus quantizes itself (Conv -> PRelu with a slope per channel, one of
them negative -> Conv -> PRelu with one slope): under every scheme (asymmetric uint8, dynamic fixed point int8 and
int16, per-channel int8) no layer stays float, both PReLUs are QPRelu, and the integer model is as close to the
float one as with PRelu left in float between converters (within 1.5 dB: the slope is on the scheme's grid). A
slope the rule cannot take (per-channel grid, no table entry) leaves the layer in float, saying why."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pegasus.ops.fixedpoint import multiply_by_quantized_multiplier
from pegasus.ops.integer_prelu import QPRelu
from pegasus.ops.registry import make_attrs
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantized.params import QuantTable
from pegasus.runtime.interpreter import run
from tests.support.prelu_models import float_prelu_graph, prelu_samples
from tests.support.quantized_bundles import SCHEMES, quantize


def snr_db(reference: np.ndarray, value: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - value) ** 2)
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / max(noise, 1e-30)))


def output_snr(graph, lowered, samples) -> float:
    want = np.concatenate([run(graph, feeds)["y"].ravel() for feeds in samples])
    got = np.concatenate([run(lowered.graph, feeds)["y"].ravel() for feeds in samples])
    return snr_db(want, got)


@pytest.fixture(scope="module")
def model():
    graph = float_prelu_graph()
    return graph, prelu_samples(16), prelu_samples(8, seed=1)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_prelu_runs_in_integers(model, scheme):
    graph, calibration, held_out = model
    table = quantize(graph, calibration, *SCHEMES[scheme])
    lowered = lower_to_integer(graph, table)
    assert lowered.float_layers == []
    ops = [node.op for node in lowered.graph.nodes]
    assert ops.count("QPRelu") == 2 and "PRelu" not in ops, ops
    # as before the rule: each PRelu in float between a DequantizeLinear and a QuantizeLinear (a slope with no
    # table entry makes the rule decline)
    in_float = lower_to_integer(graph, _with_entry(_with_entry(table, "slope1", None), "slope2", None))
    assert [layer for layer, _, _ in in_float.float_layers] == ["prelu1", "prelu2"]
    integer, floating = output_snr(graph, lowered, held_out), output_snr(graph, in_float, held_out)
    # the slope on the scheme's grid (a weight) costs at most ~1.3 dB here: 0.01 on an 8-bit grid is 1 or 2 steps
    assert integer >= floating - 1.5, (integer, floating)
    assert integer >= (60.0 if scheme == "dfp16" else 28.0), integer


def test_dynamic_fixed_point_is_pure_shifts(model):
    """Power-of-two scales: both multipliers of a dfp8 QPRelu are powers of two (shifts, no multiply)."""
    graph, calibration, _ = model
    lowered = lower_to_integer(graph, quantize(graph, calibration, *SCHEMES["dfp8"]))
    prelus = [node for node in lowered.graph.nodes if node.op == "QPRelu"]
    assert len(prelus) == 2
    for node in prelus:
        for m in (node.attrs.multiplier[0], node.attrs.alpha_multiplier):
            assert m > 0 and m & (m - 1) == 0, node.attrs


def _with_entry(table: QuantTable, tensor: str, entry) -> QuantTable:
    tensors = dict(table.tensors)
    if entry is None:
        del tensors[tensor]
    else:
        tensors[tensor] = entry
    return dataclasses.replace(table, tensors=tensors)


def test_unusable_slope_grid_stays_float_with_the_reason(model):
    graph, calibration, _ = model
    table = quantize(graph, calibration, *SCHEMES["pc8"])
    slope = table.get("slope1")
    channels = dataclasses.replace(slope, method="channel", scale=list(slope.scale) * 6,
                                   zero_point=[0] * 6, min_value=list(slope.min_value) * 6,
                                   max_value=list(slope.max_value) * 6, axis=0)
    lowered = lower_to_integer(graph, _with_entry(table, "slope1", channels))
    assert [(layer, op) for layer, op, _ in lowered.float_layers] == [("prelu1", "PRelu")]
    assert "per-channel grid" in lowered.float_layers[0][2]
    lowered = lower_to_integer(graph, _with_entry(table, "slope2", None))
    assert [(layer, op) for layer, op, _ in lowered.float_layers] == [("prelu2", "PRelu")]
    assert "no entry" in lowered.float_layers[0][2]


def test_reference_is_tflites_formula():
    """QPRelu under the tflite rounding computes PRELU's reference kernel: MultiplyByQuantizedMultiplier of
    x - zx (identity multiplier) or of (x - zx) * (alpha - za) (the slope's), + zy, clamped to int8."""
    rng = np.random.default_rng(36)
    x = rng.integers(-128, 128, (2, 5, 4, 8)).astype(np.int8)
    alpha = rng.integers(-128, 128, (1, 1, 8)).astype(np.int8)
    attrs = make_attrs(QPRelu, multiplier=(1518500250,), shift=(30,), out_zero_point=-7, out_dtype="int8",
                       rounding="tflite", x_zero_point=3, alpha_zero_point=-5, alpha_multiplier=1900000000,
                       alpha_shift=38)
    centred = x.astype(np.int64) - 3
    up = multiply_by_quantized_multiplier(centred, 1518500250, 1)
    down = multiply_by_quantized_multiplier(centred * (alpha.astype(np.int64) + 5), 1900000000, -7)
    want = np.clip(np.where(centred >= 0, up, down) - 7, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(QPRelu.reference(attrs, [x, alpha])[0], want)
