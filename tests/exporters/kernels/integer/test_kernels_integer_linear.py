"""QConv and QMatMul compiled into bundles and compared with the NumPy reference bit for bit: a grid over
operand types and zero points (asymmetric uint8, symmetric int8 per channel, int16), biases (none, int32,
int64, extreme values), per-tensor and per-channel requantisation (the high-word path and the 64-bit
one), fused clamps, output types, Conv geometry (pads, strides, dilations, groups, depthwise, 1-D, 2-D,
3-D, windows that only cross the padding) and matrix products (constant or activation B, batches that
broadcast, 1-D operands, odd depths), and i32 and i64 accumulators at their extremes. Most cases run
on the host; a handful run bare metal on Cortex-M7/M4/M33 under qemu, where the DSP path (SMLAD) must
give the same bytes, appear in the object, and stay fast on a LeNet-sized convolution.

Attributes are realistic: multipliers and shifts come from ``quantize_multipliers`` with the accumulator
width the lowering rule uses, scaled so that outputs spread over their type rather than saturate.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from pegasus.errors import PegasusError
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import HOST_TRIPLES, Target, host_arch, resolve_target
from pegasus.runtime import interpreter
from tests.support import host_runner, toolchains
from tests.support.bundle_cases import build_graph, check_case, ids, run_cases
from tests.support.integer_cases import HOST, I8, MADD, MATMUL_OPERANDS, conv, extreme_i32, extreme_i64, output_spec

# ---- the grid ----------------------------------------------------------------------------------------


@functools.cache
def _host_results() -> dict:
    """Computed once per process: pytest-xdist may tear a module fixture down after a worker's first test
    (it does not know the next one yet), and these bundles take seconds to build."""
    with tempfile.TemporaryDirectory() as folder:
        return run_cases(HOST, Path(folder), per_bundle=24)


@pytest.fixture
def host_results():
    return _host_results()


@pytest.mark.xdist_group("integer_linear_host")
@pytest.mark.parametrize("case", HOST, ids=ids(HOST))
def test_bundle_matches_reference_on_host(host_results, case):
    check_case(host_results, case)


@pytest.mark.parametrize("cpu", ["x86-64", "x86-64-v3"])      # PMADDWD of 8 (SSE2) and 16 (AVX2) lanes
def test_narrower_x86_vectors_match_reference(cpu, monkeypatch, tmp_path):
    if host_arch() != "x86_64" or (cpu == "x86-64-v3" and not llvm.get_host_cpu_features().get("avx2")):
        pytest.skip("needs an x86-64 host with the CPU's features")
    monkeypatch.setattr(host_runner, "resolve_target",
                        lambda *args: Target("x86_64", cpu, HOST_TRIPLES["x86_64"], "hard", "pic"))
    cases = MADD + MATMUL_OPERANDS[:4] + [BY_ID["QConv-lenet-conv2"]]
    results = run_cases(cases, tmp_path)
    for case in cases:
        check_case(results, case)


def test_object_for_avx512_vnni_uses_vpdpwssd(tmp_path):
    """For a CPU with AVX-512 VNNI the dot products are VPDPWSSD (PMADDWD folded into the sum): compiled for
    x86-64-v4 + VNNI whatever the host, and read back with binutils' objdump."""
    graph, _ = build_graph([BY_ID["QConv-lenet-conv2"], MADD[3]])
    target = Target("x86_64", "x86-64-v4", HOST_TRIPLES["x86_64"], "hard", "pic", "+avx512vnni")
    export_bundle(graph, tmp_path, "net", target)
    objdump = toolchains.require_tool("x86_64-linux-gnu-objdump" if host_arch() != "x86_64" else "objdump")
    disassembly = subprocess.run([objdump, "-d", str(tmp_path / "net.o")], capture_output=True, text=True).stdout
    assert "vpdpwssd" in disassembly and "vpmulld" not in disassembly


def test_extreme_cases_reach_the_bounds():
    """The extreme cases exercise what they claim (their sums computed here in int64)."""
    a, b = (v.astype(np.int64) for v in extreme_i32().inputs[:2])
    exact = a @ (b - 128)
    assert -(1 << 31) <= exact.min() < -(1 << 31) + 33000 and (a @ b).max() >= 1 << 31
    a, b = (v.astype(np.int64) for v in extreme_i64().inputs[:2])
    assert (a @ (b - 128)).min() < -(1 << 31)


def test_unsupported_operand_type_is_refused(tmp_path):
    case = conv("QConv-int32-input", (1, 2, 4, 4), (2, 2, 3, 3), ("int8", 0), I8)
    case.inputs[0] = case.inputs[0].astype(np.int32)
    graph, _ = build_graph([case])
    with pytest.raises(PegasusError, match="int32 input is not supported"):
        export_bundle(graph, tmp_path, "net", resolve_target(None, None, None, "pic"))


# ---- Cortex-M ----------------------------------------------------------------------------------------

CORTEX_M = ["cortex-m7", "cortex-m4", "cortex-m33"]
BY_ID = {case.id: case for case in HOST}
BARE_METAL = [BY_ID[case_id] for case_id in (
    "QConv-u8-u8", "QConv-i8-i8", "QConv-i8-zx-i8-zw", "QConv-i16-zx-i8", "QConv-i8-i16", "QConv-i16-i16",
    "QConv-i16-zx-i16",
    "QConv-to-int16-wide-multipliers", "QConv-per-tensor-u8-relu", "QConv-depthwise", "QConv-depth-5-odd-channels",
    "QConv-kernel-over-padding", "QConv-1d", "QConv-depthwise-multiplier", "QConv-depthwise-dilated-1d-i16",
    "QConv-extreme-int32-bias-to-int32", "QConv-to-uint8-saturating",
    "QConv-depth-3", "QConv-strides-dilations", "QMatMul-u8-u8", "QMatMul-i8-i16",
    "QMatMul-activation-b", "QMatMul-odd-depth-fc", "QMatMul-int16-b-columns", "QMatMul-batched-broadcast",
    "QMatMul-int64-bias-to-int16")]


@pytest.fixture(scope="module")
def bare_metal_graph():
    graph, feeds = build_graph(BARE_METAL)
    return graph, feeds, interpreter.run(graph, feeds)


@pytest.mark.xdist_group("integer_linear_cortex_m")
@pytest.mark.parametrize("cpu", CORTEX_M)
def test_bundle_matches_reference_on_cortex_m(cpu, bare_metal_graph, tmp_path):
    graph, feeds, expected = bare_metal_graph
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, output_spec(graph))
    for index, case in enumerate(BARE_METAL):
        name = f"c{index}_y0"
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=case.id)


@pytest.fixture(scope="module")
def lenet_conv2_m7(tmp_path_factory):
    """LeNet's second convolution (int8, per channel; 1.6 M MACs) exported for Cortex-M7."""
    case = BY_ID["QConv-lenet-conv2"]
    graph, feeds = build_graph([case])
    folder = tmp_path_factory.mktemp("lenet_conv2")
    export_bundle(graph, folder, "net", resolve_target("arm", "cortex-m7"))
    return graph, feeds, folder


@pytest.mark.xdist_group("integer_linear_cortex_m")
def test_cortex_m7_object_uses_dual_macs(lenet_conv2_m7):
    _, _, folder = lenet_conv2_m7
    listing = subprocess.run([toolchains.require_tool("arm-none-eabi-objdump"), "-d", str(folder / "net.o")],
                             capture_output=True, text=True, check=True).stdout
    assert "smlad" in listing and "sxtb16" in listing


@pytest.mark.xdist_group("integer_linear_cortex_m")
def test_cortex_m7_lenet_conv2_is_fast_and_exact(lenet_conv2_m7):
    graph, feeds, folder = lenet_conv2_m7
    run = toolchains.run_cortex_m_detailed(folder, "net", "cortex-m7", feeds, output_spec(graph), icount=True)
    expected = interpreter.run(graph, feeds)
    np.testing.assert_array_equal(run.outputs["c0_y0"], expected["c0_y0"])
    macs = 50 * 8 * 8 * 20 * 5 * 5
    instructions = run.ticks * toolchains.board_for("cortex-m7").instructions_per_tick
    assert instructions < 1.6 * macs, f"{instructions} instructions for {macs} MACs"
