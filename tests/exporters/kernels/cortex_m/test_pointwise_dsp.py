"""1x1 QConv layers of 4 or 8 input channels on DSP Cortex-M cores, each position's inputs held in registers
and one record per output channel (exporters/glow/kernels/cortex_m/integer_pointwise_dsp.py,
integer_conv_weights.pointwise_records).

- The records' layout against the layer's weights, biases and requantisation written out here, and which
  layers get them (stride 2, padding, 16 channels, no fused ReLU, an odd number of outputs: not).
- Bundles on Cortex-M4/M7/M33/M55 (and M0, which keeps bytes) against the reference interpreter bit for bit:
  4 and 8 channels, 2 to 24 outputs (channel loops of 1 to 3 iterations), uint8 inputs with a zero point,
  clamps at both ends, a batch of 2, odd positions.
- On Cortex-M7 a chain pre -> layer -> post whose layer output the memory plan places the aligned
  ``overlap_bytes`` below its dying input stays exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.integer.integer_conv_weights import block_table, pack_weights
from pegasus.exporters.glow.memory.plan import align, overlap_bytes
from pegasus.exporters.glow.pipeline import stream_of
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import make_attrs
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case
from tests.support.depthwise_layers import append_layer, conv1x1
from tests.support.paired_weights import assert_bundle_matches, conv

RNG = np.random.default_rng(88)


def batched(case: Case) -> Case:
    x = case.inputs[0]
    return Case(case.id, case.op, [np.concatenate([x, x[:, ::-1]]), *case.inputs[1:]], case.attrs,
                constant=case.constant)


def clamped(case: Case) -> Case:
    return Case(case.id, case.op, case.inputs, {**case.attrs, "hi": 80}, constant=case.constant)


CASES = [
    conv("8to16-odd-positions", 8, 16, 1, relu=True, size=(5, 7)),
    conv("4to6", 4, 6, 1, relu=True),
    clamped(conv("8to2-relu6", 8, 2, 1, relu=True, size=(3, 3))),
    conv("8to24-uint8", 8, 24, 1, relu=True, unsigned=True),       # three iterations of 8 channels
    batched(conv("4to10-batch", 4, 10, 1, relu=True, size=(4, 3))),
    conv("8to4-stride2", 8, 4, 1, stride=2, relu=True, size=(6, 6)),  # not held in registers: a tile stream
]


def _records(case: Case) -> np.ndarray | None:
    graph = _graph(case)
    return pack_weights(graph.nodes[0], graph, resolve_target("arm", "cortex-m7")).get(2)


def _graph(case: Case) -> Graph:
    from tests.support.bundle_cases import build_graph

    return build_graph([case])[0]


def test_records_layout():
    """Per output channel: its doubled weights as (w0, w2), (w1, w3) per four channels, 2 b, M, t + 1, K."""
    case = conv("layout", 8, 6, 1, relu=True)
    graph = _graph(case)
    node = graph.nodes[0]
    packed = pack_weights(node, graph, resolve_target("arm", "cortex-m7"))
    records = packed[2].reshape(6, 8)
    assert packed[1].shape == (1, 1, 1, 4)
    table = block_table(node, graph, 8).reshape(3, 8)
    w = 2 * case.inputs[1][:, :, 0, 0].astype(np.int64)
    for c in range(6):
        halves = records[c, :4].view(np.int16)
        for q in range(2):
            np.testing.assert_array_equal(halves[4 * q:4 * q + 4], w[c, 4 * q:4 * q + 4][[0, 2, 1, 3]])
        pair, second = divmod(c, 2)
        np.testing.assert_array_equal(records[c, 4:], table[pair, [0 + second, 2 + 2 * second, 3 + 2 * second,
                                                                   6 + second]])
        assert records[c, 4] == 2 * case.inputs[2][c]
    # stride 2, padding, 16 channels: the tile stream (a pair's biases, its weights, six parameters, a flag)
    assert _records(CASES[-1]).shape == (2 * (8 + 9),)
    assert _records(conv("padded", 8, 4, 1, pad=1, relu=True)).shape == (2 * (8 + 9),)
    assert _records(conv("sixteen", 16, 4, 1, relu=True)).shape == (2 * (16 + 9),)
    assert _records(conv("no-relu", 8, 4, 1)).shape == (12,)            # the block table
    assert _records(conv("odd", 8, 5, 1, relu=True)).shape == (24,)     # the block table


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m33", "cortex-m55", "cortex-m0"])
def test_bundles_on_cortex_m(cpu, tmp_path):
    assert_bundle_matches(CASES, cpu, tmp_path)
    if cpu != "cortex-m0":
        symbols = toolchains.arm_symbols(tmp_path / "net.o")
        assert sum("pegasus_pointwise_" in line for line in symbols) == len(CASES) - 1


def test_output_over_its_dying_input_stays_exact(tmp_path):
    """x -> 1x1 (8 channels, dying at the layer) -> the layer (8 -> 16, ReLU) -> 1x1 to 4 channels, the layer's
    output placed the aligned delta below its input, on Cortex-M7."""
    x = RNG.integers(-128, 127, (1, 9, 11, 8), endpoint=True).astype(np.int8)
    graph = Graph("chain")
    graph.tensors["x"] = Tensor("x", TensorType.of(x))
    graph.inputs.append("x")
    pre = conv1x1(graph, "pre", "x", 8)
    layer = conv("pw", 8, 16, 1, relu=True)
    for index, value in enumerate(layer.inputs[1:], start=1):
        graph.tensors[f"pw_in{index}"] = Tensor.constant(f"pw_in{index}", value)
    out = append_layer(graph, "pw", make_attrs("QConv", **layer.attrs), [pre, "pw_in1", "pw_in2"])
    graph.outputs.append(conv1x1(graph, "post", out, 4))
    verify(graph)
    target = resolve_target("arm", "cortex-m7")
    result = export_bundle(graph, tmp_path, "net", target)
    node = next(n for n in result.graph.nodes if n.name == "pw")
    stream = stream_of(result.graph, node.name, target)
    plan = result.plan
    assert plan.locations["pre_y"].offset - plan.locations["pw_y"].offset == align(overlap_bytes(stream))
    spec = {"post_y": (graph.type_of("post_y").shape, graph.type_of("post_y").dtype.numpy)}
    got = toolchains.run_cortex_m(tmp_path, "net", "cortex-m7", {"x": x}, spec)
    np.testing.assert_array_equal(got["post_y"], interpreter.run(graph, {"x": x})["post_y"])


def test_cortex_m7_instructions_per_output(tmp_path):
    """MobileNetV1 0.25's 8 -> 16 layer on 24x24 positions (ReLU at the output's zero point -128): at most 10.2
    instructions per output on Cortex-M7, the position's loads and loops included (measured 9.88; the im2col
    kernel took 13.8)."""
    case = conv("mobilenet-8to16", 8, 16, 1, relu=True, size=(24, 24))
    case = Case(case.id, case.op, case.inputs, {**case.attrs, "out_zero_point": -128, "lo": -128},
                constant=case.constant)
    graph = _graph(case)
    export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    spec = {"c0_y0": (graph.type_of("c0_y0").shape, graph.type_of("c0_y0").dtype.numpy)}
    run = toolchains.run_cortex_m_detailed(tmp_path, "net", "cortex-m7", {"c0_x0": case.inputs[0]}, spec,
                                           icount=True)
    np.testing.assert_array_equal(run.outputs["c0_y0"], interpreter.run(graph, {"c0_x0": case.inputs[0]})["c0_y0"])
    instructions = run.ticks * toolchains.board_for("cortex-m7").instructions_per_tick
    assert instructions / (24 * 24 * 16) <= 10.2
