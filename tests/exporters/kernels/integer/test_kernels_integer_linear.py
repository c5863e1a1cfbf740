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
import math
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from pegasus.errors import PegasusError
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import HOST_TRIPLES, Target, host_arch, resolve_target
from pegasus.ops.fixedpoint import bits_needed, integer_range, quantize_multipliers
from pegasus.runtime import interpreter
from tests.exporters.kernels.reference.test_kernels_elementwise import Case, build_graph, check_case, ids, run_cases
from tests.support import host_runner, toolchains

RNG = np.random.default_rng(31)


def ints(shape, dtype: str, low: int | None = None, high: int | None = None) -> np.ndarray:
    """Random values over the type's range (or [low, high]); the first two are the range's ends."""
    tmin, tmax = integer_range(dtype)
    low, high = tmin if low is None else low, tmax if high is None else high
    values = RNG.integers(low, high, shape, endpoint=True).astype(dtype)
    if values.size >= 2:
        values.flat[:2] = low, high
    return values


def magnitude(dtype: str, zero_point: int) -> int:
    tmin, tmax = integer_range(dtype)
    return max(abs(tmin - zero_point), abs(tmax - zero_point))


def requant(depth: int, x: tuple[str, int], w: tuple[str, int], out_dtype: str, channels: int,
            bias: np.ndarray | None, per_channel: bool, out_zero_point: int = 0, lo=None, hi=None,
            gain: float = 1.0) -> dict:
    """Requantisation attributes spreading the outputs over ``out_dtype`` (times ``gain``)."""
    spread = [(integer_range(dtype)[1] - integer_range(dtype)[0]) / math.sqrt(12) for dtype, _ in (x, w)]
    out_span = integer_range(out_dtype)[1] - integer_range(out_dtype)[0]
    real = gain * out_span / 6 / (math.sqrt(depth) * spread[0] * spread[1])
    reals = real * RNG.uniform(0.5, 2.0, channels if per_channel else 1)
    total = depth * magnitude(*x) * magnitude(*w) + (0 if bias is None else int(np.abs(bias.astype(np.int64)).max()))
    multiplier, shift = quantize_multipliers(reals, bits_needed(total))
    return {"multiplier": multiplier, "shift": shift, "out_zero_point": out_zero_point, "out_dtype": out_dtype,
            "lo": lo, "hi": hi}


def bias_of(kind: str | None, channels: int) -> np.ndarray | None:
    if kind is None:
        return None
    if kind == "int32-extreme":
        return ints((channels,), "int32")
    dtype = "int32" if kind == "int32" else "int64"
    return RNG.integers(-(1 << 20), 1 << 20, channels).astype(dtype)


def conv(case_id: str, x_shape, w_shape, x=("int8", 0), w=("int8", 0), bias: str | None = "int32",
         per_channel=True, out_dtype="int8", out_zero_point=0, lo=None, hi=None, gain=1.0, **geometry) -> Case:
    group = geometry.get("group", 1)
    channels, depth = w_shape[0], int(np.prod(w_shape[1:]))
    b = bias_of(bias, channels)
    attrs = {**requant(depth, x, w, out_dtype, channels, b, per_channel, out_zero_point, lo, hi, gain),
             "x_zero_point": x[1], "w_zero_point": w[1], "kernel_shape": tuple(w_shape[2:]), "group": group,
             **{k: v for k, v in geometry.items() if k != "group"}}
    inputs = [ints(x_shape, x[0]), ints(w_shape, w[0])] + ([b] if b is not None else [])
    return Case(case_id, "QConv", inputs, attrs, constant=(1, 2))


def matmul(case_id: str, a_shape, b_shape, a=("int8", 0), bm=("int8", 0), bias: str | None = "int32",
           per_channel=True, constant_b=True, out_dtype="int8", out_zero_point=0, lo=None, hi=None,
           values=None) -> Case:
    columns = b_shape[-1] if len(b_shape) > 1 else 1
    b = bias_of(bias, columns)
    attrs = {**requant(a_shape[-1], a, bm, out_dtype, columns, b, per_channel, out_zero_point, lo, hi),
             "a_zero_point": a[1], "b_zero_point": bm[1]}
    a_values, b_values = values or (ints(a_shape, a[0]), ints(b_shape, bm[0]))
    inputs = [a_values, b_values] + ([b] if b is not None else [])
    return Case(case_id, "QMatMul", inputs, attrs, constant=((1,) if constant_b else ()) + (2,))


U8 = ("uint8", 128)
I8 = ("int8", 0)

# ---- the grid ----------------------------------------------------------------------------------------

OPERANDS = [  # (id, x, w): asymmetric uint8, symmetric int8, mixed, 16-bit
    ("u8-u8", ("uint8", 131), ("uint8", 119)),
    ("u8-zx0-u8-zw255", ("uint8", 0), ("uint8", 255)),
    ("i8-i8", ("int8", 0), ("int8", 0)),
    ("i8-zx-i8-zw", ("int8", -128), ("int8", 5)),
    ("u8-i8", ("uint8", 128), ("int8", 0)),
    ("i16-i8", ("int16", 0), ("int8", 0)),
    ("i16-zx-i8", ("int16", -300), ("int8", -2)),
    ("i8-i16", ("int8", 3), ("int16", 0)),
    ("i16-i16", ("int16", 0), ("int16", 0)),
    ("i16-zx-i16", ("int16", 5), ("int16", 0)),
    ("u8-i16-zw", ("uint8", 77), ("int16", 1000)),
]

CONV_OPERANDS = [conv(f"QConv-{name}", (1, 5, 9, 8), (6, 5, 3, 3), x, w, pads=(1, 0, 1, 2), strides=(2, 1))
                 for name, x, w in OPERANDS]
MATMUL_OPERANDS = [matmul(f"QMatMul-{name}", (3, 37), (37, 10), x, w) for name, x, w in OPERANDS]

REQUANT = [
    conv("QConv-per-tensor-u8-relu", (1, 3, 7, 7), (4, 3, 3, 3), U8, ("uint8", 121), per_channel=False,
         out_dtype="uint8", out_zero_point=9, lo=9, pads=(1, 1, 1, 1)),
    conv("QConv-clip-i8", (1, 4, 6, 6), (5, 4, 2, 2), I8, I8, lo=-20, hi=50, out_zero_point=-20),
    conv("QConv-no-bias", (1, 4, 6, 6), (5, 4, 2, 2), I8, I8, bias=None),
    conv("QConv-int64-bias", (1, 4, 6, 6), (5, 4, 2, 2), I8, I8, bias="int64"),
    conv("QConv-extreme-int32-bias-to-int32", (1, 2, 5, 5), (3, 2, 3, 3), I8, I8, bias="int32-extreme",
         out_dtype="int32", gain=1e-3),
    conv("QConv-to-int16-wide-multipliers", (1, 3, 6, 6), (4, 3, 3, 3), ("int16", 0), I8, out_dtype="int16",
         gain=200.0),                                  # shifts below 33 that cannot be raised: 64-bit form
    conv("QConv-to-int32", (1, 3, 6, 6), (4, 3, 3, 3), U8, ("uint8", 3), out_dtype="int32", out_zero_point=-7),
    conv("QConv-to-uint8-saturating", (1, 3, 6, 6), (4, 3, 3, 3), I8, I8, out_dtype="uint8", out_zero_point=200,
         gain=30.0),
    matmul("QMatMul-per-tensor-relu", (2, 24), (24, 9), U8, ("uint8", 100), per_channel=False, out_dtype="uint8",
           out_zero_point=4, lo=4),
    matmul("QMatMul-no-bias-clip", (4, 16), (16, 8), I8, I8, bias=None, lo=-5, hi=60),
    matmul("QMatMul-int64-bias-to-int16", (2, 20), (20, 6), ("int16", 0), ("int16", 0), bias="int64",
           out_dtype="int16"),
]

GEOMETRY = [
    conv("QConv-strides-dilations", (1, 3, 11, 10), (4, 3, 3, 2), U8, ("uint8", 140), pads=(2, 0, 1, 3),
         strides=(2, 3), dilations=(2, 2)),
    conv("QConv-1d", (2, 3, 17), (5, 3, 4), I8, I8, pads=(2, 1), strides=(3,), dilations=(2,)),
    conv("QConv-3d", (1, 2, 4, 5, 5), (3, 2, 2, 3, 3), U8, ("uint8", 128), pads=(1, 0, 1, 0, 1, 1)),
    conv("QConv-groups", (1, 6, 7, 7), (4, 3, 3, 3), I8, I8, group=2, pads=(1, 1, 1, 1)),
    conv("QConv-depthwise", (1, 5, 8, 8), (5, 1, 3, 3), U8, ("uint8", 130), group=5, pads=(1, 1, 1, 1),
         strides=(2, 2)),
    conv("QConv-depthwise-multiplier", (2, 3, 6, 7), (6, 1, 3, 3), I8, I8, group=3, pads=(0, 1, 2, 1)),
    conv("QConv-depthwise-dilated-1d-i16", (1, 4, 19), (4, 1, 5), ("int16", 0), ("int16", 0), group=4, pads=(3, 2),
         strides=(2,), dilations=(2,)),
    conv("QConv-depthwise-i8-zw-3d", (1, 2, 3, 4, 5), (2, 1, 2, 2, 3), I8, ("int8", -3), group=2,
         pads=(1, 0, 1, 0, 1, 1)),
    conv("QConv-depthwise-big-window", (1, 2, 6, 6), (2, 1, 9, 9), U8, ("uint8", 120), group=2, pads=(4, 4, 4, 4)),
    conv("QConv-kernel-over-padding", (1, 2, 3, 3), (3, 2, 5, 5), U8, ("uint8", 90), pads=(2, 2, 2, 2)),
    conv("QConv-pointwise-stride", (1, 7, 6, 6), (9, 7, 1, 1), I8, I8, strides=(2, 2)),
    conv("QConv-depth-3", (1, 1, 6, 6), (3, 1, 1, 3), I8, ("int8", 1)),
    conv("QConv-depth-5-odd-channels", (1, 1, 7, 9), (7, 1, 1, 5), U8, ("uint8", 128), pads=(0, 2, 0, 2)),
    conv("QConv-depth-6", (1, 2, 6, 6), (3, 2, 1, 3), ("int16", 0), ("int16", 0)),
    conv("QConv-same-upper", (1, 3, 7, 6), (4, 3, 3, 3), I8, I8, auto_pad="SAME_UPPER", strides=(2, 2)),
    conv("QConv-wide-kernel-row", (1, 2, 3, 40), (3, 2, 1, 19), I8, I8, pads=(0, 9, 0, 9)),
    conv("QConv-lenet-conv2", (1, 20, 12, 12), (50, 20, 5, 5), I8, I8),
    conv("QConv-lenet-conv1-u8", (1, 1, 28, 28), (20, 1, 5, 5), U8, ("uint8", 124), per_channel=False),
    matmul("QMatMul-activation-b", (3, 25), (25, 7), U8, ("uint8", 128), constant_b=False, bias=None),
    matmul("QMatMul-batched-broadcast", (2, 1, 3, 14), (3, 14, 5), I8, ("int8", -3), constant_b=False,
           bias=None, per_channel=False),
    matmul("QMatMul-batched-constant-b", (2, 3, 9), (9, 12), U8, ("uint8", 128)),
    matmul("QMatMul-1d-a", (13,), (13, 6), I8, I8),
    matmul("QMatMul-1d-b", (4, 13), (13,), U8, ("uint8", 128), per_channel=False),
    matmul("QMatMul-odd-depth-fc", (1, 801), (801, 19), ("int8", 17), I8),
    matmul("QMatMul-int16-b-columns", (2, 31), (31, 9), I8, ("int16", 0)),
]


def _random_convs(count: int) -> list[Case]:
    """Convolutions of random geometry and operands (a fixed seed: the same cases every run)."""
    cases = []
    for index in range(count):
        rank = int(RNG.integers(1, 3))
        group = int(RNG.choice([1, 1, 2, 3]))
        channels_in, channels_out = group * int(RNG.integers(1, 4)), group * int(RNG.integers(1, 4))
        kernel = tuple(int(k) for k in RNG.integers(1, 5, rank))
        dilations = tuple(int(d) for d in RNG.integers(1, 3, rank))
        strides = tuple(int(s) for s in RNG.integers(1, 4, rank))
        pads = tuple(int(p) for p in RNG.integers(0, 3, 2 * rank))
        spatial = tuple(int(RNG.integers((k - 1) * d + 1, 12)) for k, d in zip(kernel, dilations))
        _, x, w = OPERANDS[int(RNG.integers(len(OPERANDS)))]
        cases.append(conv(f"QConv-random-{index}", (int(RNG.integers(1, 3)), channels_in) + spatial,
                          (channels_out, channels_in // group) + kernel, x, w,
                          bias=[None, "int32", "int64"][int(RNG.integers(3))], per_channel=bool(RNG.integers(2)),
                          out_dtype=str(RNG.choice(["int8", "uint8", "int16"])), group=group, strides=strides,
                          dilations=dilations, pads=pads))
    return cases


I32_DEPTH = 65792     # uint8 x with zx=0 times uint8 w with zw=128: 65,792 * 255 * 128 < 2**31 <= 65,794 * 255 * 128


def _extreme_i32() -> Case:
    """An exact sum within 33,000 of -2**31 whose Σ x * w of the stored weights (up to 255 * 255 per
    term) is more than twice 2**31: the i32 accumulator wraps and must still give the exact sum back."""
    a = np.full((2, I32_DEPTH), 255, np.uint8)
    a[1, ::2] = 0
    b = np.zeros((I32_DEPTH, 4), np.uint8)
    b[:, 1] = 255
    b[::3, 2] = 200
    return matmul("QMatMul-i32-bound", (2, I32_DEPTH), (I32_DEPTH, 4), ("uint8", 0), ("uint8", 128),
                  bias="int32-extreme", out_dtype="int32", values=(a, b))


def _extreme_i64() -> Case:
    """Two terms more: the bound passes int32, and so does the exact sum, in an i64 accumulator."""
    depth = I32_DEPTH + 2
    a = np.full((1, depth), 255, np.uint8)
    b = np.zeros((depth, 2), np.uint8)
    b[::2, 1] = 255
    return matmul("QMatMul-i64-bound", (1, depth), (depth, 2), ("uint8", 0), ("uint8", 128), bias=None,
                  out_dtype="int32", values=(a, b))


def _extreme_i32_columns() -> Case:
    """The i32 bound again on 8 columns, so that x86 PMADDWD (its pairs wrapping too) takes the sums."""
    a = np.full((1, I32_DEPTH), 255, np.uint8)
    b = np.zeros((I32_DEPTH, 8), np.uint8)
    b[:, 1::2] = 255
    b[::3, 2] = 200
    return matmul("QMatMul-i32-bound-8-columns", (1, I32_DEPTH), (I32_DEPTH, 8), ("uint8", 0), ("uint8", 128),
                  bias="int32-extreme", out_dtype="int32", values=(a, b))


MADD = [  # the x86 PMADDWD paths: whole vectors of the reduction, pieces of 16 and 8, zero-padded tails
    conv("QConv-madd-depth-57-u8", (1, 1, 9, 60), (9, 1, 3, 19), U8, ("uint8", 119), pads=(1, 0, 1, 0)),
    conv("QConv-madd-depth-7", (2, 7, 5, 5), (5, 7, 1, 1), ("int8", -3), ("int8", 2)),
    conv("QConv-madd-depth-96-i16", (1, 6, 6, 6), (7, 6, 4, 4), ("int16", 11), ("int16", 0), out_dtype="int16"),
    matmul("QMatMul-madd-104-columns", (3, 45), (45, 104), U8, ("uint8", 131)),
    matmul("QMatMul-madd-24-columns-odd-depth", (5, 33), (33, 24), ("int8", -7), ("int8", 3)),
    matmul("QMatMul-madd-int16", (2, 19), (19, 40), ("int16", 0), ("int16", -4), bias="int64",
           out_dtype="int16"),
    matmul("QMatMul-madd-u8-i8-batched", (2, 1, 17), (2, 17, 16), U8, I8, constant_b=False, bias=None),
]

HOST = (CONV_OPERANDS + MATMUL_OPERANDS + REQUANT + GEOMETRY + MADD + _random_convs(16)
        + [_extreme_i32(), _extreme_i64(), _extreme_i32_columns()])


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
    a, b = (v.astype(np.int64) for v in _extreme_i32().inputs[:2])
    exact = a @ (b - 128)
    assert -(1 << 31) <= exact.min() < -(1 << 31) + 33000 and (a @ b).max() >= 1 << 31
    a, b = (v.astype(np.int64) for v in _extreme_i64().inputs[:2])
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


def output_spec(graph) -> dict:
    return {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}


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
