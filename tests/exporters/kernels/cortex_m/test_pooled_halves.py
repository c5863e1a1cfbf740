"""Channels-first QConv + MaxPool layers whose weights are stored as halfword pairs of channels
(integer_conv_pool.pack_pooled_halves, integer_halves.py): per pair of output channels one row of ``256 w1 + w0``
in the order the fused kernel reads each row of the window (whole groups of four as (0, 2, 1, 3)), the input's
zero point folded into the biases. Checked: which layers take the layout (8-bit signed weights of zero point 0,
an even number of channels, a constant int32 bias, no padding, dilation 1, a DSP CPU) and what it stores; the
bundles on Cortex-M7/M4/M33 (the SMLAD paths: rows of 4q + 1 taps whose neighbouring windows share words, longer
and shorter rows, single taps only, odd input channel counts, odd pooling widths, uint8 inputs with a zero
point, sums near the 2**23 bound) and Cortex-M0 (bytes) bit for bit against the reference interpreter; and
that a layout in the natural tap order gives wrong bytes (so these checks can fail).
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.cortex_m import integer_halves
from pegasus.exporters.glow.kernels.fused import integer_conv_pool
from pegasus.exporters.glow.pipeline import schedule
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.conv_pool_chains import P22, chain, fused_graph
from tests.support.integer_cases import I8, output_spec


def symmetric(case_pool, low: int = -127, high: int = 127):
    """The chain's weights within [low, high] (a symmetric quantizer's: no -128, so every pair of channels has
    exact halfwords)."""
    case, pool = case_pool
    case.inputs[1] = np.clip(case.inputs[1], low, high).astype(case.inputs[1].dtype)
    return case, pool


def extreme():
    """Sums near 2**23 for the odd channels: weights ±127 over 20 x 5 x 5 taps, inputs of magnitude up to 128."""
    case, pool = chain(P22, "near-bound", (1, 20, 12, 12), (4, 20, 5, 5), ("int8", 0), I8)
    rng = np.random.default_rng(5)
    case.inputs[1] = np.where(rng.random(case.inputs[1].shape) < 0.5, 127, -127).astype(np.int8)
    case.inputs[0] = np.where(rng.random(case.inputs[0].shape) < 0.8, -128, 127).astype(np.int8)
    return case, pool


HALVES = [
    symmetric(chain(P22, "lenet-conv2", (1, 8, 12, 12), (10, 8, 5, 5), ("int8", 3), I8)),
    symmetric(chain(P22, "lenet-conv1", (1, 1, 16, 16), (6, 1, 5, 5), ("int8", -128), I8)),
    symmetric(chain(P22, "3x3-7ch-singles", (1, 7, 9, 9), (4, 7, 3, 3), ("int8", -5), I8)),
    symmetric(chain(P22, "rows-of-6", (1, 3, 10, 11), (6, 3, 2, 6), ("int8", 9), I8)),
    symmetric(chain({"kernel_shape": (2, 2), "strides": (1, 1)}, "rows-of-9-overlapping", (1, 2, 12, 14),
                    (4, 2, 2, 9), ("int8", 1), I8)),
    symmetric(chain({"kernel_shape": (3, 3), "strides": (2, 2)}, "odd-pool-width", (1, 5, 11, 11), (4, 5, 3, 5),
                    ("int8", -2), I8)),
    symmetric(chain(P22, "uint8-inputs", (1, 3, 10, 10), (4, 3, 5, 5), ("uint8", 119), I8, out_dtype="uint8")),
    extreme(),
]
BYTES = [
    symmetric(chain(P22, "odd-channels-5", (1, 4, 9, 9), (5, 4, 3, 3), ("int8", 2), I8)),
    symmetric(chain(P22, "padded", (1, 4, 9, 9), (4, 4, 3, 3), ("int8", 2), I8, pads=(1, 1, 1, 1))),
    symmetric(chain(P22, "no-bias", (1, 8, 8, 8), (4, 8, 3, 3), ("int8", -1), I8, bias=None)),
    chain(P22, "weights-128", (1, 4, 8, 8), (4, 4, 3, 3), ("int8", 3), ("int8", 0)),
]
ALL = HALVES + BYTES


def stored_dtypes(graph, cpu: str) -> list:
    lowered = schedule(graph, resolve_target("arm", cpu)).graph
    return [lowered.value_of(node.inputs[1]).dtype for node in lowered.nodes if node.op == "QConv"]


@pytest.fixture(scope="module")
def chains():
    BYTES[-1][0].inputs[1][1, 0, 0, :2] = [-128, -128]      # channel 1's -128 over channel 0's negative weight
    BYTES[-1][0].inputs[1][0, 0, 0, :2] = [-3, -128]
    graph, feeds = fused_graph(ALL)
    return graph, feeds, interpreter.run(graph, feeds)


def test_which_layers_take_halves(chains):
    graph = chains[0]
    assert stored_dtypes(graph, "cortex-m7") == [np.int16] * len(HALVES) + [np.int8] * len(BYTES)
    assert stored_dtypes(graph, "cortex-m0") == [np.int8] * len(ALL)


def test_stored_layout(chains):
    """Per pair of channels, per row of the window: 256 w1 + w0 of taps (0, 2, 1, 3), 4 ... ; the biases less
    zx Σ w."""
    graph = chains[0]
    lowered = schedule(graph, resolve_target("arm", "cortex-m4")).graph
    node = next(node for node in lowered.nodes if node.op == "QConv")
    case = HALVES[0][0]
    w = case.inputs[1].astype(np.int64)                      # (10, 8, 5, 5)
    halves = lowered.value_of(node.inputs[1]).astype(np.int64)
    assert halves.shape == (5, 8, 5, 5)
    want = 256 * w[1::2] + w[0::2]
    np.testing.assert_array_equal(halves[..., [0, 2, 1, 3, 4]], want)
    bias = lowered.value_of(node.inputs[2]).astype(np.int64)
    np.testing.assert_array_equal(bias, case.inputs[2] - 3 * w.reshape(10, -1).sum(axis=1))


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m33", "cortex-m0"])
def test_bundles_match_reference(cpu, chains, tmp_path):
    graph, feeds, expected = chains
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    got = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, output_spec(graph))
    for index, (case, _) in enumerate(ALL):
        name = f"c{index}_pool"
        np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{case.id} on {cpu}")


def test_natural_order_fails(chains, tmp_path, monkeypatch):
    """Halfwords stored in the natural tap order (the kernel reads (0, 2, 1, 3)) give other bytes."""
    monkeypatch.setattr(integer_halves, "run_order", lambda taps, run: list(range(taps)))
    graph, feeds, expected = chains
    export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    got = toolchains.run_cortex_m(tmp_path, "net", "cortex-m7", feeds, output_spec(graph))
    assert not np.array_equal(got["c0_pool"], expected["c0_pool"])
    assert integer_conv_pool.pack_pooled_halves     # the packer these checks exercise
