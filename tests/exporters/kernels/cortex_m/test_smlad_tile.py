"""Every block of an im2col tile in one function (exporters/glow/kernels/cortex_m/integer_smlad_tile.py), reading the
``tile_stream`` that replaces a paired layer's biases and weights (integer_conv_plan.py: TFLite rounding whose
rounding constants fold — a fused ReLU —, an even number of output channels, at most TILE_GROUPS groups).

- The stream's layout against the layer's biases, weights and requantisation written out here.
- Bundles on Cortex-M4/M7/M33/M55 (and M0, which keeps bytes) against the reference interpreter bit for bit:
  1x1 and 3x3 layers, strides, padding, 3 and 6 input channels (reordered taps), uint8, clamps at both ends,
  an odd number of positions (the last tile of one position walks the stream block by block), 72 groups
  (the most the stream takes) and 73 (the block table instead); layers of one depth and clamp but different
  output channels share one function (the output's row an argument).
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import TILE_GROUPS
from pegasus.exporters.glow.kernels.integer.integer_conv_weights import block_table, pack_weights
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph
from tests.support.paired_weights import assert_bundle_matches, conv


def relu6(name: str, channels: int, outputs: int, kernel: int, **geometry) -> Case:
    """``conv`` with a ReLU and an upper clamp (both clamp ends in the requantisation)."""
    case = conv(name, channels, outputs, kernel, relu=True, **geometry)
    return Case(case.id, case.op, case.inputs, {**case.attrs, "hi": 90}, constant=case.constant)


CASES = [
    conv("1x1-12to16-odd-positions", 12, 16, 1, relu=True, size=(5, 5)),   # 25 positions: a last tile of one
    conv("1x1-16to4", 16, 4, 1, relu=True),
    conv("1x1-16to6-same-function", 16, 6, 1, relu=True),                  # shares 1x1-16to4's function
    relu6("3x3-8to6-stride2-pad", 8, 6, 3, stride=2, pad=1, size=(7, 9)),
    conv("3x3-8to4-uint8", 8, 4, 3, pad=1, unsigned=True, relu=True),
    conv("3x3-3to8-first-layer", 3, 8, 3, stride=2, pad=1, relu=True, size=(9, 8)),   # reordered taps
    conv("3x3-6to2", 6, 2, 3, pad=1, relu=True, size=(5, 3)),
    conv("1x1-288to2-most-groups", 4 * TILE_GROUPS, 2, 1, relu=True, size=(3, 3)),
    conv("1x1-292to2-table", 4 * TILE_GROUPS + 4, 2, 1, relu=True, size=(3, 3)),
]


def _stream(case: Case) -> np.ndarray | None:
    graph, _ = build_graph([case])
    return pack_weights(graph.nodes[0], graph, resolve_target("arm", "cortex-m7")).get(2)


def test_stream_layout():
    """Per pair of output channels: 2 b0, 2 b1, the pair's interleaved doubled weights (test_paired_weights'
    layout), then M0, t0 + 1, M1, t1 + 1, K0, K1 and whether another pair follows; the weights input keeps one
    row; 73 groups: the block table."""
    case = conv("layout", 8, 4, 3, pad=1, relu=True)
    graph, _ = build_graph([case])
    node = graph.nodes[0]
    packed = pack_weights(node, graph, resolve_target("arm", "cortex-m7"))
    stream, depth = packed[2], 72
    assert packed[1].shape == (1, 3, 3, 4) and stream.dtype == np.int32
    assert stream.shape == (2 * (depth + 9),)
    table = block_table(node, graph, depth).reshape(2, 8)
    bias = case.inputs[2].astype(np.int64)
    w = 2 * case.inputs[1].astype(np.int64)
    rows = w.transpose(0, 2, 3, 1).reshape(4, -1)
    for pair in range(2):
        part = stream[pair * (depth + 9):(pair + 1) * (depth + 9)]
        np.testing.assert_array_equal(part[:2], 2 * bias[2 * pair:2 * pair + 2])
        np.testing.assert_array_equal(part[2 + depth:-1], table[pair, 2:])
        assert part[-1] == (pair == 0)
        halves = part[2:2 + depth].view(np.int16).reshape(depth // 4, 2, 2, 2)     # group, half, row, pair
        for c in range(2):
            for q in range(depth // 4):
                got = np.concatenate([halves[q, 0, c], halves[q, 1, c]])
                np.testing.assert_array_equal(got, rows[2 * pair + c, 4 * q:4 * q + 4][[0, 2, 1, 3]])
    assert table[0, 3] == int(case.attrs["shift"][0]) - 32 + 1 and table[0, 6] != 0    # t + 1, K folded
    assert _stream(CASES[-2]).shape == (2 + 4 * TILE_GROUPS + 7,)
    assert _stream(CASES[-1]).shape == (8,)                 # the block table
    assert _stream(conv("no-relu", 8, 4, 1)).shape == (12,)  # K does not fold: the block table
    assert _stream(conv("odd-outputs", 8, 5, 1, relu=True)).shape == (24,)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m33", "cortex-m55", "cortex-m0"])
def test_bundles_on_cortex_m(cpu, tmp_path):
    assert_bundle_matches(CASES, cpu, tmp_path)
    if cpu != "cortex-m0":
        tiles = sorted(line.split()[-1] for line in toolchains.arm_symbols(tmp_path / "net.o")
                       if "pegasus_tile_" in line)
        # one function per (depth, clamp): the two 1x1 layers of 16 channels share theirs; no function for the
        # layer of 73 groups
        assert len(tiles) == len(CASES) - 2, tiles


def test_cortex_m7_macs_per_instruction(tmp_path):
    """MobileNetV1 0.25's 1x1 32 -> 32 layer on 24x24 positions (ReLU at the output's zero point -128): at least
    1.15 MACs per instruction on Cortex-M7, the im2col copy and the requantisation included (measured 1.17; a
    call per block of 2 x 2 took 1.09)."""
    case = conv("mobilenet-32to32", 32, 32, 1, relu=True, size=(24, 24))
    case = Case(case.id, case.op, case.inputs, {**case.attrs, "out_zero_point": -128, "lo": -128},
                constant=case.constant)
    graph, feeds = build_graph([case])
    export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    spec = {"c0_y0": (graph.type_of("c0_y0").shape, graph.type_of("c0_y0").dtype.numpy)}
    run = toolchains.run_cortex_m_detailed(tmp_path, "net", "cortex-m7", feeds, spec, icount=True)
    np.testing.assert_array_equal(run.outputs["c0_y0"], interpreter.run(graph, feeds)["c0_y0"])
    instructions = run.ticks * toolchains.board_for("cortex-m7").instructions_per_tick
    assert 24 * 24 * 32 * 32 / instructions >= 1.15
