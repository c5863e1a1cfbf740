"""The channels-last int8 depthwise QConv of DSP Cortex-M cores (kernels/cortex_m/integer_depthwise_dsp.py:
blocks of up to four positions along a row, channel pairs, the positions after the second kept on the stack).

- Bundles of many geometries byte for byte against the reference interpreter on Cortex-M4, M7, M33 and M55:
  rows of one to 48 outputs (blocks of four, of three, a shorter last block, blocks of one), strides,
  dilations, asymmetric and SAME padding, 1-D and 3-D windows, 5x5 kernels, 4 to 260 channels (fewer
  positions per block past 128 and 256), int8 and uint8 inputs with zero points, asymmetric weights, no bias,
  an int64 bias, per-tensor and per-channel requantisation, TFLite's and pegasus's roundings, fused clamps;
  and with ``--compact-weights`` (weights read as bytes and spread by SXTB16).
- A chain pre -> depthwise -> post whose depthwise output the memory plan places exactly the aligned
  ``overlap_bytes`` below its dying input (the position-by-position bound of ``qconv_stream``) on Cortex-M7:
  still exact for channel counts whose delta is not a multiple of the channels (48, 20), where writing each
  block's third and fourth positions before its windows are read gives wrong bytes (so the check can fail).
- Instructions per MAC on Cortex-M7 of a DS-CNN depthwise layer, requantisation included.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.cortex_m import integer_depthwise_dsp
from pegasus.exporters.glow.memory.plan import align, overlap_bytes
from pegasus.exporters.glow.pipeline import stream_of
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import make_attrs
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph
from tests.support.depthwise_layers import RNG, append_layer, conv1x1


def dw(name: str, channels: int, size: tuple[int, ...], kernel: tuple[int, ...] = (3, 3), unsigned: bool = False,
       x_zero_point: int = -128, w_zero_point: int = 0, bias: str | None = "int32", per_channel: bool = True,
       rounding: str = "tflite", clamp: tuple[int | None, int | None] = (None, None), out_zero_point: int = -3,
       **geometry) -> Case:
    """A depthwise QConv, channels last, random int8 (uint8) data; the requantisation spreads the outputs."""
    dtype = np.uint8 if unsigned else np.int8
    lo, hi = (0, 255) if unsigned else (-128, 127)
    x = RNG.integers(lo, hi, (1, *size, channels), endpoint=True).astype(dtype)
    w = RNG.integers(lo, hi, (channels, 1, *kernel), endpoint=True).astype(dtype)
    inputs = [x, w]
    if bias is not None:
        inputs.append(RNG.integers(-20000, 20000, channels).astype(bias))
    count = channels if per_channel else 1
    depth = int(np.prod(kernel))
    attrs = {"multiplier": tuple(int(v) for v in RNG.integers(1 << 30, 1 << 31, count)),
             "shift": tuple(int(v) for v in RNG.integers(37, 40, count) + depth.bit_length() // 2),
             "out_zero_point": 5 if unsigned else out_zero_point, "out_dtype": "uint8" if unsigned else "int8",
             "rounding": rounding, "lo": clamp[0], "hi": clamp[1], "channels_last": True, "group": channels,
             "kernel_shape": kernel, "x_zero_point": x_zero_point, "w_zero_point": w_zero_point, **geometry}
    return Case(name, "QConv", inputs, attrs, constant=(1, 2))


CASES = [
    dw("ds-cnn-64ch-25x5", 64, (25, 5), pads=(1, 1, 1, 1), clamp=(-3, None)),    # blocks of 3 and 2
    dw("8ch-48-wide", 8, (4, 48), pads=(1, 1, 1, 1)),            # 12 blocks, the 10 inside without tests
    dw("12ch-stride2-same", 12, (7, 13), strides=(2, 2), pads=(0, 0, 1, 1)),
    dw("20ch-w13-uint8", 20, (5, 13), unsigned=True, x_zero_point=131, w_zero_point=120, pads=(1, 1, 1, 1),
       clamp=(5, 200)),                                          # 4 + 4 + 4 + 1
    dw("16ch-dilated", 16, (7, 9), dilations=(2, 2), pads=(2, 2, 2, 2)),
    dw("4ch-w1", 4, (5, 1), pads=(1, 1, 1, 1), bias=None),         # blocks of one position
    dw("8ch-w2-no-pad", 8, (4, 4), x_zero_point=7),
    dw("192ch-blocks-of-3", 192, (3, 8), pads=(1, 1, 1, 1)),   # 3 + 3 + 2: two positions on the stack pass 256 B
    dw("260ch-blocks-of-2", 260, (3, 5), pads=(1, 1, 1, 1)),
    dw("8ch-1d", 8, (25,), kernel=(3,), pads=(1, 1)),
    dw("8ch-3d", 8, (3, 4, 6), kernel=(3, 3, 3), pads=(1, 1, 1, 1, 1, 1)),
    dw("16ch-5x5-int64-bias", 16, (6, 11), kernel=(5, 5), pads=(2, 2, 2, 2), bias="int64"),
    dw("24ch-per-tensor-half-up", 24, (6, 7), pads=(1, 0, 0, 1), per_channel=False, rounding="half_up"),
    dw("32ch-asymmetric-pads", 32, (6, 10), pads=(0, 1, 2, 2), w_zero_point=-2),
    # a fused ReLU under TFLite's rounding: the bias replaced by the table (2 b, K, M, t + 1), doubled weights
    dw("8ch-48-wide-relu", 8, (4, 48), pads=(1, 1, 1, 1), clamp=(-3, None)),
    dw("12ch-stride2-same-relu", 12, (7, 13), strides=(2, 2), pads=(0, 0, 1, 1), clamp=(-3, 90)),
    dw("8ch-w1-relu", 8, (9, 1), pads=(1, 1, 1, 1), clamp=(-3, None)),
    dw("260ch-blocks-of-2-relu", 260, (3, 5), pads=(1, 1, 1, 1), clamp=(-3, None), w_zero_point=3),
    dw("8ch-3d-relu", 8, (3, 4, 6), kernel=(3, 3, 3), pads=(1, 1, 1, 1, 1, 1), clamp=(-3, None)),
    dw("16ch-dilated-relu-per-tensor", 16, (7, 9), dilations=(2, 2), pads=(2, 2, 2, 2), clamp=(-3, None),
       per_channel=False, x_zero_point=11),
]
CPUS = ["cortex-m7", "cortex-m4", "cortex-m33", "cortex-m55"]


def _run(cases: list[Case], cpu: str, folder, target=None) -> None:
    graph, feeds = build_graph(cases)
    want = interpreter.run(graph, feeds)
    export_bundle(graph, folder, "net", target or resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    got = toolchains.run_cortex_m(folder, "net", cpu, feeds, spec)
    for index, case in enumerate(cases):
        name = f"c{index}_y0"
        assert len(np.unique(want[name])) > 8, case.id           # the outputs are spread, not clamped
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{cpu} {case.id}")


@pytest.mark.parametrize("cpu", CPUS)
def test_bundles_match_the_reference(cpu, tmp_path):
    _run(CASES, cpu, tmp_path)


def test_compact_weights_spread_by_sxtb16(tmp_path):
    """Weights kept as bytes (``--compact-weights``): the same kernel spreads them (and subtracts an
    asymmetric zero point) as it reads them."""
    target = dataclasses.replace(resolve_target("arm", "cortex-m7"), byte_weights=True)
    cases = [case for case in CASES if case.id in ("ds-cnn-64ch-25x5", "20ch-w13-uint8", "32ch-asymmetric-pads")]
    _run(cases, "cortex-m7", tmp_path, target)


# ---- streaming ---------------------------------------------------------------------------------------


def _chain(case: Case) -> tuple[Graph, dict[str, np.ndarray]]:
    """x -> 1x1 (the depthwise layer's input, dying there) -> the depthwise ``case`` -> 1x1 to 4 channels."""
    x = case.inputs[0]
    graph = Graph("chain")
    graph.tensors["x"] = Tensor("x", TensorType.of(x))
    graph.inputs.append("x")
    pre = conv1x1(graph, "pre", "x", x.shape[-1])
    for position, value in enumerate(case.inputs[1:], start=1):
        graph.tensors[f"dw_in{position}"] = Tensor.constant(f"dw_in{position}", value)
    layer = append_layer(graph, "dw", make_attrs("QConv", **case.attrs), [pre, "dw_in1", "dw_in2"])
    graph.outputs.append(conv1x1(graph, "post", layer, 4))
    verify(graph)
    return graph, {"x": x}


STREAMING = [dw("48ch-24-wide", 48, (5, 24), pads=(1, 1, 1, 1)), dw("20ch-w4", 20, (6, 4), pads=(1, 1, 1, 1)),
             dw("64ch-ds-cnn", 64, (25, 5), pads=(1, 1, 1, 1)),
             dw("48ch-24-wide-relu", 48, (5, 24), pads=(1, 1, 1, 1), clamp=(-3, None))]


def _streamed(case: Case, tmp_path) -> tuple[np.ndarray, np.ndarray]:
    """(bundle's output on Cortex-M7, reference) of the chain, the depthwise output placed the aligned delta
    below its input."""
    graph, feeds = _chain(case)
    target = resolve_target("arm", "cortex-m7")
    result = export_bundle(graph, tmp_path, "net", target)
    node = next(n for n in result.graph.nodes if n.name == "dw")
    stream = stream_of(result.graph, node.name, target)
    plan = result.plan
    assert plan.locations["pre_y"].offset - plan.locations["dw_y"].offset == align(overlap_bytes(stream))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    got = toolchains.run_cortex_m(tmp_path, "net", "cortex-m7", feeds, spec)
    return got["post_y"], interpreter.run(graph, feeds)["post_y"]


@pytest.mark.parametrize("case", STREAMING, ids=[case.id for case in STREAMING])
def test_output_over_its_dying_input_stays_exact(case, tmp_path):
    got, want = _streamed(case, tmp_path)
    np.testing.assert_array_equal(got, want)


def test_positions_written_early_give_wrong_bytes(tmp_path, monkeypatch):
    """The check above can fail: with every position written as soon as its pass is done, the 48-channel
    layer's third and fourth positions overwrite input bytes of later channels the block still reads (its
    delta, 1,280, is not a multiple of 48)."""
    monkeypatch.setattr(integer_depthwise_dsp, "deferred", lambda count: 0)
    got, want = _streamed(STREAMING[0], tmp_path)
    assert not np.array_equal(got, want)


# ---- instructions ------------------------------------------------------------------------------------


def test_cortex_m7_instructions_per_mac(tmp_path):
    """DS-CNN's depthwise layer (64 channels of 25x5, 3x3, TFLite's rounding, ReLU at the output's zero point
    -128, which SSAT's range ends at): at most 2.6 instructions per MAC, requantisation included (measured
    2.48 with the layer's table of (2 b, K, M, t + 1) and doubled weights, 2.86 before it; the single-position
    kernel before took 3.65)."""
    case = dw("ds-cnn", 64, (25, 5), pads=(1, 1, 1, 1), out_zero_point=-128, clamp=(-128, None))
    graph, feeds = build_graph([case])
    export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    spec = {"c0_y0": (graph.type_of("c0_y0").shape, graph.type_of("c0_y0").dtype.numpy)}
    run = toolchains.run_cortex_m_detailed(tmp_path, "net", "cortex-m7", feeds, spec, icount=True)
    np.testing.assert_array_equal(run.outputs["c0_y0"], interpreter.run(graph, feeds)["c0_y0"])
    instructions = run.ticks * toolchains.board_for("cortex-m7").instructions_per_tick
    assert instructions / (25 * 5 * 64 * 9) <= 2.6
