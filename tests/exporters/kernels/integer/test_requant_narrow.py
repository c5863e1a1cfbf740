"""The narrow requantisation of the integer MAC kernels (integer_dot.Requant: acc + bias in 32 bits, the high
word of one 32x32 multiply, a branch to the 64-bit rule when a 32-bit sum overflows) computes exactly the
64-bit rule: layers whose biases put ``acc + bias`` past 2**31 and ``2 (acc + bias)`` past 2**31 (TFLite's
SMMULR operand) on both sides, per tensor and per channel, for ``tflite`` and ``half_up`` rounding, through
every kernel that calls it (im2col with SMLAD on Cortex-M, channels-last depthwise, matrix product), and
tables the narrow form does not take (TFLite's e = 0, half_up's S = 32) — checked against Python integers
written out here from TFLite's C definitions, then bundle against reference on the host and Cortex-M7.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph, check_case, ids, run_cases
from tests.support.tflite_requant import tflite_requant

RNG = np.random.default_rng(1917)
BIG = [(1 << 31) - 700, -(1 << 31) + 650, (1 << 30) - 300, -(1 << 30) + 250, (1 << 30) + 20, 17, -(1 << 29)]


def i8(shape, low=-128, high=127) -> np.ndarray:
    return RNG.integers(low, high, shape, endpoint=True).astype(np.int8)


def biases(count: int) -> np.ndarray:
    return np.array([BIG[i % len(BIG)] for i in range(count)], np.int32)


def half_up(acc: int, m: int, s: int) -> int:
    return (acc * m + (1 << (s - 1))) >> s


def rule(rounding: str):
    return tflite_requant if rounding == "tflite" else half_up


def attrs(rounding: str, multipliers, shifts, zp: int = 3, **extra) -> dict:
    return {"multiplier": tuple(multipliers), "shift": tuple(shifts), "out_zero_point": zp, "out_dtype": "int8",
            "rounding": rounding, **extra}


# multipliers small enough that the huge sums land inside int8 after the shift, so the rounding is seen
TFLITE = ((1900, 1 << 30, 2100, (1 << 31) - 1, 1500, 1 << 30, 2300), (37, 61, 37, 60, 36, 55, 38))
HALF_UP = ((1700, 1 << 29, 2100, (1 << 31) - 1, 1300, 1 << 30, 2500), (38, 62, 38, 63, 37, 57, 39))


def matmul_case(rounding: str, table, per_channel: bool) -> Case:
    m, s = table if per_channel else ((table[0][0],), (table[1][0],))
    return Case(f"QMatMul-{rounding}-{'pc' if per_channel else 'pt'}", "QMatMul",
                [i8((5, 40)), i8((40, 7), -127), biases(7)], {**attrs(rounding, m, s), "a_zero_point": -9},
                constant=(1, 2))


def conv_case(rounding: str, table, kernel: int, depthwise: bool, channels: int = 7, relu: bool = False) -> Case:
    x = i8((1, 6, 5, channels))
    w = i8((channels, 1 if depthwise else channels, kernel, kernel), -127)   # (M, C/group, k, k) as stored
    extra = {"channels_last": True, "pads": (kernel // 2,) * 4, "x_zero_point": 5,
             "group": channels if depthwise else 1, **({"lo": 3} if relu else {})}
    table = tuple(tuple((column * 2)[:channels]) for column in table)
    return Case(f"QConv-{rounding}-{'dw' if depthwise else 'dense'}{kernel}-{channels}{'-relu' if relu else ''}",
                "QConv", [x, w, biases(channels)], {**attrs(rounding, *table), **extra}, constant=(1, 2))


CASES = [matmul_case(r, t, pc) for r, t in (("tflite", TFLITE), ("half_up", HALF_UP)) for pc in (True, False)]
# one row (a dense layer: 4 channels per block on Cortex-M), 13 columns (a block of 1 at the end)
CASES += [Case("QMatMul-tflite-one-row", "QMatMul", [i8((1, 44)), i8((44, 13), -127), biases(13)],
               {**attrs("tflite", (TFLITE[0] * 2)[:13], (TFLITE[1] * 2)[:13]),
                "a_zero_point": 7}, constant=(1, 2))]
CASES += [conv_case(r, t, k, dw) for r, t in (("tflite", TFLITE), ("half_up", HALF_UP))
          for k, dw in ((1, False), (3, False), (3, True))]
# tables outside the narrow form: TFLite's e = 0 (S = 31) beside others, half_up's S = 32 with M >= 2**30
CASES += [conv_case("tflite", ((1 << 30,) + TFLITE[0][1:], (31,) + TFLITE[1][1:]), 1, False),
          conv_case("half_up", (((1 << 30) + 5,) + HALF_UP[0][1:], (32,) + HALF_UP[1][1:]), 3, True)]
CASES[-2].id += "-e0"
CASES[-1].id += "-s32"
# a fused ReLU (lo = zero point: TFLite's rounding of negative values is skipped), and reductions of 72 taps
# (the SMLAD loop in a function of its own on Cortex-M), with and without it
CASES += [conv_case("tflite", TFLITE, 3, dw, channels, relu) for dw, channels, relu in
          ((False, 7, True), (True, 8, True), (False, 8, True), (False, 8, False))]


def ties_case(depthwise: bool, relu: bool) -> Case:
    """Small sums whose TFLite rule ties often: SRDHM(x, 2**30) halves x, then RoundingDivideByPOT by 4 rounds
    every y = 2 (mod 4) half away from zero — a negative one down, where dropping the sign correction (only
    right under a fused ReLU) rounds it up."""
    channels = 8
    x = RNG.integers(-3, 13, (1, 6, 5, channels)).astype(np.int8)
    w = RNG.integers(-2, 2, (channels, 1 if depthwise else channels, 3, 3), endpoint=True).astype(np.int8)
    extra = {"channels_last": True, "pads": (1,) * 4, "x_zero_point": 5, "group": channels if depthwise else 1,
             **({"lo": -4} if relu else {})}
    return Case(f"QConv-tflite-ties-{'dw' if depthwise else 'dense'}{'-relu' if relu else ''}", "QConv",
                [x, w, RNG.integers(-9, 9, channels).astype(np.int32)],
                {**attrs("tflite", (1 << 30,), (33,), zp=-4), **extra}, constant=(1, 2))


TIES = [ties_case(dw, relu) for dw in (False, True) for relu in (False, True)]

def expected(case: Case) -> np.ndarray:
    """The layer in Python integers (no NumPy arithmetic that could wrap): sums, bias, rule, zero point."""
    a = case.attrs
    requant = rule(a["rounding"])
    x, w, bias = (v.astype(np.int64) for v in case.inputs)
    if case.op == "QMatMul":
        acc = (x - a["a_zero_point"]) @ w
        channel_axis = -1
    else:
        pad = a["pads"][0]
        xp = np.pad(x - a["x_zero_point"], ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        k, channels = w.shape[-1], w.shape[0]
        acc = np.zeros((1, x.shape[1], x.shape[2], channels), np.int64)
        for i in range(x.shape[1]):
            for j in range(x.shape[2]):
                window = xp[0, i:i + k, j:j + k, :]
                for c in range(channels):
                    taps = w[c].transpose(1, 2, 0)          # (k, k, C/group)
                    acc[0, i, j, c] = (window[..., c:c + 1] * taps).sum() if a["group"] > 1 else (window * taps).sum()
        channel_axis = -1
    m, s = a["multiplier"], a["shift"]
    out = np.empty(acc.shape, np.int64)
    for index in np.ndindex(acc.shape):
        c = index[channel_axis] if len(m) > 1 else 0
        value = requant(int(acc[index]) + int(bias[index[channel_axis]]), m[c], s[c]) + a["out_zero_point"]
        out[index] = min(max(value, a.get("lo", -128)), 127)
    return out.astype(np.int8)


def test_cases_reach_the_overflow_branches():
    """The cases are what they claim: 32-bit sums overflow in both directions, and outputs are not all clamped."""
    for case in CASES:
        x, w, bias = (v.astype(np.int64) for v in case.inputs)
        zx = case.attrs.get("a_zero_point", case.attrs.get("x_zero_point"))
        bound = np.abs(x - zx).max() * np.abs(w).max() * (w.size // w.shape[0] if case.op == "QConv" else w.shape[0])
        assert bias.max() + bound >= 1 << 31 and bias.min() - bound < -(1 << 31), case.id
        ref = next(iter(interpreter.run(*build_graph([case])).values()))
        assert (np.abs(ref.astype(int)) < 127).mean() > 0.3, case.id


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_reference_is_the_integer_rule(case):
    got = next(iter(interpreter.run(*build_graph([case])).values()))
    np.testing.assert_array_equal(got, expected(case))


@pytest.fixture(scope="module")
def host_results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("narrow"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_on_host(host_results, case):
    check_case(host_results, case)


def test_overflow_branch_only_where_the_biases_need_it(tmp_path):
    """The bias values as exported bound the 32-bit sums (TensorRef.bounds): small biases compile without the
    overflow branch (no BVS on Cortex-M7), biases near 2**31 keep it — and both stay exact on the host above."""
    import subprocess

    small = conv_case("tflite", TFLITE, 1, False)
    small.inputs[2] = np.array([-1000, 2000, 5, 0, 77, -3, 12], np.int32)
    listings = {}
    for name, case in (("small", small), ("huge", conv_case("tflite", TFLITE, 1, False))):
        graph, feeds = build_graph([case])
        folder = tmp_path / name
        export_bundle(graph, folder, "net", resolve_target("arm", "cortex-m7"))
        listings[name] = subprocess.run([toolchains.require_tool("arm-none-eabi-objdump"), "-d", str(folder / "net.o")],
                                        capture_output=True, text=True, check=True).stdout
        np.testing.assert_array_equal(run_cases([case], folder)[case.id][0][0], expected(case))
    assert "bvs" not in listings["small"] and "bvs" in listings["huge"]


def _every_pair() -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    return a.astype(np.int8).reshape(1, -1), b.astype(np.int8).reshape(1, -1)


# TFLite ADD's three roundings in 32 bits (requant.narrow_scale): operand shifts with e = 0, 1 and a left shift,
# output shifts from e = 1 to e = 30; every pair of int8 operands
ADDS = [Case(f"QAddRescaled-every-pair-{i}", "QAddRescaled", list(_every_pair()),
             {"multiplier": (m,), "shift": (s,), "out_zero_point": zp, "out_dtype": "int8", "rounding": "tflite",
              "a_zero_point": za, "b_zero_point": zb, "left_shift": 20, "a_multiplier": am, "a_shift": ash,
              "b_multiplier": bm, "b_shift": bsh, "subtract": sub})
        for i, (m, s, zp, za, zb, am, ash, bm, bsh, sub) in enumerate([
            (1518500250, 51, -3, 5, -7, 1073741824, 31, 1395864371, 32, False),
            (150, 32, 0, -128, 127, 2147483647, 30, 1073741824, 31, True),
            (1073741824, 50, 10, 0, 0, 1073741824, 31, 1073741824, 31, False)])]   # (x + y) / 2: ties


@pytest.mark.parametrize("case", ADDS, ids=ids(ADDS))
def test_add_rescaled_every_pair_on_host(case, tmp_path):
    from pegasus.ops.fixedpoint import multiply_by_quantized_multiplier as mbqm

    a = case.attrs
    x, y = (v.astype(np.int64) for v in case.inputs)
    first = mbqm((x - a["a_zero_point"]) << 20, a["a_multiplier"], 31 - a["a_shift"])
    second = mbqm((y - a["b_zero_point"]) << 20, a["b_multiplier"], 31 - a["b_shift"])
    total = first - second if a["subtract"] else first + second
    want = np.clip(mbqm(total, a["multiplier"][0], 31 - a["shift"][0]) + a["out_zero_point"], -128, 127)
    reference = next(iter(interpreter.run(*build_graph([case])).values()))
    np.testing.assert_array_equal(reference, want)
    assert len(np.unique(want)) > 20       # not all clamped
    check_case(run_cases([case], tmp_path), case)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m0"])
def test_bundle_on_cortex_m(cpu, tmp_path):
    graph, feeds = build_graph(CASES + ADDS + TIES)
    want = interpreter.run(graph, feeds)
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    for name, value in want.items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)


@pytest.mark.parametrize("case", TIES, ids=ids(TIES))
def test_negative_ties_on_host(case, tmp_path):
    """The rule rounds many negative halves (so a wrongly dropped sign correction shows), and the bundle
    computes it, with and without a fused ReLU."""
    want = expected(case)
    np.testing.assert_array_equal(next(iter(interpreter.run(*build_graph([case])).values())), want)
    assert len(np.unique(want)) >= 6
    check_case(run_cases([case], tmp_path), case)


def test_large_add_reads_its_operands_scaled_from_tables(tmp_path):
    """An add of more elements than an 8-bit operand has values looks each operand's scaled value up in a table
    of the weights (two of 256 words); the every-pair checks above run that path bit for bit."""
    graph, _ = build_graph(ADDS[:1])
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    assert [len(data) for _, data in result.plan.parameters] == [2 * 256 * 4]
    listing = subprocess.run([toolchains.require_tool("arm-none-eabi-objdump"), "-d", str(tmp_path / "net.o")],
                             capture_output=True, text=True, check=True).stdout
    assert "smmulr" in listing and "umlal" not in listing     # the sum's rounding: one SMMULR, not a 64-bit product
    small, _ = build_graph([Case("QAddRescaled-small", "QAddRescaled", [v[:, :200] for v in _every_pair()],
                                 ADDS[0].attrs)])
    assert not export_bundle(small, tmp_path / "small", "net", resolve_target("arm", "cortex-m7")).plan.parameters
