"""Dense layers whose weights are stored as halfword pairs of rows (exporters/glow/kernels/cortex_m/integer_halves.py):
``256 w1 + w0`` per tap of rows 2i, 2i + 1, one SMLAD summing 256 A1 + A0 and one over the SXTB16'd low bytes
summing A0. Checked: the stored layout decoded here (the borrow that makes each halfword exact, the taps'
(0, 2, 1, 3) order, blocks of four rows interleaved per group, an M % 4 == 2 layer's last pair alone); which
layers take it (8-bit signed weights of zero point 0, even M, whole groups of four taps, |A1 + bias| < 2**23,
DSP CPUs only); the bundles on Cortex-M4/M7/M33 and M0 (bytes) bit for bit against the reference interpreter,
including sums near the 2**23 bound (T wraps) and weights of -128; and that the same kernels fed halfwords
without the borrow give wrong bytes (so these checks can fail).
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.cortex_m.integer_halves import HALF_LIMIT, halve_rows, halves_rows
from pegasus.exporters.glow.kernels.integer import integer_flavours
from pegasus.exporters.glow.pipeline import schedule
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph

RNG = np.random.default_rng(77)


def dense(name: str, depth: int, columns: int, weights: np.ndarray | None = None, x: np.ndarray | None = None,
          bias: int = 3000, shift: int | None = None) -> Case:
    a = RNG.integers(-128, 127, (1, depth), endpoint=True).astype(np.int8) if x is None else x
    b = RNG.integers(-127, 127, (depth, columns), endpoint=True).astype(np.int8) if weights is None else weights
    attrs = {"multiplier": tuple(int(v) for v in RNG.integers(1 << 29, 1 << 30, columns)),
             "shift": (shift or 38 + depth.bit_length() // 2,) * columns, "out_zero_point": 2, "out_dtype": "int8",
             "rounding": "tflite", "a_zero_point": -7}
    return Case(name, "QMatMul", [a, b, RNG.integers(-bias, bias, columns).astype(np.int32)], attrs, constant=(1, 2))


def decode(halves: np.ndarray, m: int, taps: int) -> np.ndarray:
    """(M, taps) int8 weights back from ``halve_rows``' layout, reading it as the kernel does."""
    words = halves.reshape(-1).view(np.uint32)
    out = np.zeros((m, taps), np.int64)
    groups = taps // 4
    for c0 in range(0, m, 4):
        width = min(4, m - c0)
        block = words[c0 * taps // 4:(c0 + width) * taps // 4].reshape(groups, width // 2, 2)
        for g in range(groups):
            for pair in range(width // 2):
                for half, (ta, tb) in enumerate(((0, 2), (1, 3))):
                    word = int(block[g, pair, half])
                    for tap, h in ((ta, word & 0xFFFF), (tb, word >> 16)):
                        h -= (h >> 15) << 16                   # the signed halfword
                        low = ((h & 0xFF) ^ 0x80) - 0x80        # SXTB16's byte: w0
                        assert (h - low) % 256 == 0
                        out[c0 + 2 * pair, 4 * g + tap] = low
                        out[c0 + 2 * pair + 1, 4 * g + tap] = (h - low) // 256
    return out


@pytest.mark.parametrize("m,taps", [(8, 12), (6, 8), (2, 4), (10, 20)])
def test_layout_decodes(m, taps):
    w = RNG.integers(-127, 127, (m, taps), endpoint=True).astype(np.int8)
    w[0, :2] = [-128, -1]        # the lowest low bytes, their borrow taken from a high byte of -127
    w[1, :2] = [-127, -127]
    halves = halve_rows(w)
    assert halves.dtype == np.int16 and halves.shape == (m // 2, taps)
    np.testing.assert_array_equal(decode(halves, m, taps), w)


def test_which_weights_qualify():
    w = RNG.integers(-127, 127, (4, 16), endpoint=True).astype(np.int8)
    assert halves_rows(w, None, 135, 0)
    assert not halves_rows(w, None, 135, 3)                            # asymmetric weights
    assert not halves_rows(w[:3], None, 135, 0)                        # odd M
    assert not halves_rows(w[:, :14], None, 135, 0)                    # not whole groups of four
    assert not halves_rows(w.astype(np.uint8), None, 135, 0)
    low = w.copy()
    low[1, 5], low[0, 5] = -128, -1                                    # 256 * -128 - 1 is no int16
    assert not halves_rows(low, None, 135, 0)
    low[0, 5] = 0
    assert halves_rows(low, None, 135, 0)
    # the odd rows' sums (with their biases) within 2**23
    big = np.full((2, 512), 121, np.int8)
    assert halves_rows(big, np.array([0, 1000]), 134, 0)
    assert not halves_rows(big, np.array([0, HALF_LIMIT - 134 * 121 * 512]), 134, 0)
    assert halves_rows(big, np.array([HALF_LIMIT, 0]), 134, 0)          # an even row's bias never shifts


def stored(case: Case, cpu: str) -> np.ndarray:
    graph, _ = build_graph([case])
    lowered = schedule(graph, resolve_target("arm", cpu)).graph
    node = next(node for node in lowered.nodes if node.op == "QConv")
    return lowered.value_of(node.inputs[1])


def test_dense_layers_take_halves_on_dsp_cpus():
    assert stored(dense("d", 64, 8), "cortex-m7").dtype == np.int16
    assert stored(dense("d", 64, 8), "cortex-m7").nbytes == 64 * 8       # one byte a weight
    assert stored(dense("d", 64, 8), "cortex-m0").dtype == np.int8        # no SMLAD
    assert stored(dense("d", 64, 7), "cortex-m7").dtype == np.int8        # odd M
    assert stored(dense("d", 30, 8), "cortex-m7").dtype == np.int8        # 30 taps
    w = RNG.integers(-127, 127, (64, 8), endpoint=True).astype(np.int8)
    w[3, 1], w[3, 0] = -128, -5                                          # row 1 of -128 under row 0's -5
    assert stored(dense("d", 64, 8, w), "cortex-m7").dtype == np.int8
    assert stored(dense("d", 1024, 4, np.full((1024, 4), 127, np.int8)), "cortex-m4").dtype == np.int8  # 2**23


def small(name: str, depth: int, columns: int) -> Case:
    """Weights -1, 0, 1 and inputs within ±30 at a scale of about 1/6: an error in a sum shows."""
    return dense(name, depth, columns, RNG.integers(-1, 1, (depth, columns), endpoint=True).astype(np.int8),
                 RNG.integers(-30, 30, (1, depth), endpoint=True).astype(np.int8), bias=40, shift=32)


def extreme(name: str) -> Case:
    """Odd rows' sums just under 2**23 (inputs 127, centred 134; weights ±121 over 512 taps): T wraps many
    times; low bytes of -128 and -1 under high bytes of -127 and 121."""
    w = np.where(RNG.random((512, 6)) < 0.5, 121, -121).astype(np.int8)
    w[:, 1] = 121
    w[:, 3] = -121
    w[:64, 0], w[64:128, 0], w[:32, 2] = -128, -1, -128
    x = np.full((1, 512), 127, np.int8)
    x[0, ::7] = -128
    return dense(name, 512, 6, w, x, bias=100)


CASES = [dense("64x8", 64, 8), dense("20x10", 20, 10), dense("800x12", 800, 12), dense("36x6", 36, 6),
         dense("30x6-bytes", 30, 6), dense("64x7-bytes", 64, 7), extreme("extreme"), small("small", 96, 30),
         dense("64x4-128", 64, 4, np.where(RNG.random((64, 4)) < 0.3, -128, 127).astype(np.int8) * np.array(
             [1, 0, 1, 0], np.int8))]     # low bytes of -128 under high bytes of 0: the borrow makes them -1


def assert_bundle_matches(cases: list[Case], cpu: str, folder) -> None:
    graph, feeds = build_graph(cases)
    want = interpreter.run(graph, feeds)
    export_bundle(graph, folder, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    got = toolchains.run_cortex_m(folder, "net", cpu, feeds, spec)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{name} on {cpu}")


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m33", "cortex-m0"])
def test_bundles_on_cortex_m(cpu, tmp_path):
    graph, feeds = build_graph(CASES)
    outputs = interpreter.run(graph, feeds)
    lowered = schedule(graph, resolve_target("arm", cpu)).graph
    kinds = [lowered.value_of(node.inputs[1]).dtype for node in lowered.nodes if node.op == "QConv"]
    halves = [not case.id.endswith("bytes") and cpu != "cortex-m0" for case in CASES]
    assert kinds == [np.int16 if half else np.int8 for half in halves]
    assert sum(len(np.unique(v)) > 2 for v in outputs.values()) >= len(CASES) - 1     # not all clamped
    assert_bundle_matches(CASES, cpu, tmp_path)


def test_halfwords_without_the_borrow_fail(tmp_path, monkeypatch):
    """The same kernels over halfwords whose high byte is w1 itself (no borrow from a negative w0) compute
    other bytes: the checks above can fail."""
    def no_borrow(w: np.ndarray) -> np.ndarray:
        right = halve_rows(w).view(np.uint16).astype(np.int64)
        borrowed = np.zeros_like(w)
        borrowed[0::2] = w[0::2] < 0                     # laid out as the halfwords are
        laid = halve_rows(borrowed).view(np.uint16).astype(np.int64)
        return ((right + 256 * laid) & 0xFFFF).astype(np.uint16).view(np.int16)

    monkeypatch.setitem(integer_flavours.FLAVOURS, "halves.pack", no_borrow)
    with pytest.raises(AssertionError):
        assert_bundle_matches([small("small", 96, 30)], "cortex-m7", tmp_path)
