"""Bundles of pre-quantized TFLite models compute TFLite's arithmetic (``rounding`` tflite / tflite_wide,
pegasus.ops.fixedpoint): single layers of every integer op whose emitter carries a TFLite rounding or variant
(requantisation per tensor and per channel, exact .5 ties of negative accumulators, SRDHM's INT32_MIN
saturation, left shifts, QAddRescaled, QReduceSum, TFLite's SOFTMAX, QUANTIZE half away from zero) compared
bit for bit with the NumPy reference on the host and Cortex-M7, whose ties and saturation are checked against
TFLite's C definitions written out here in Python integers.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ops.fixedpoint import quantize_multiplier
from pegasus.quantized.rules.tflite import softmax16_tables, softmax_table
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph, check_case, ids, run_cases
from tests.support.tflite_requant import INT32_MIN, rq, tflite_requant
from tests.support.tflm import tflm_arena_bytes

RNG = np.random.default_rng(41)


def ints(shape, dtype: str, low=None, high=None) -> np.ndarray:
    info = np.iinfo(dtype)
    values = RNG.integers(info.min if low is None else low, info.max if high is None else high, shape, endpoint=True)
    return values.astype(dtype)


def ties() -> np.ndarray:
    """int32 accumulators with every residue mod 8 around zero, both signs, and the int32 extremes."""
    values = np.concatenate([np.arange(-40, 41), [INT32_MIN, INT32_MIN + 1, (1 << 31) - 1, -(1 << 30), 1 << 30]])
    return values.astype(np.int32).reshape(1, -1)


def requantize_case(id_: str, x: np.ndarray, multiplier: int, shift: int, out_dtype="int32", zp=0, in_zp=0,
                    rounding="tflite") -> Case:
    attrs = {"multiplier": (multiplier,), "shift": (shift,), "out_zero_point": zp, "out_dtype": out_dtype,
             "rounding": rounding, "in_zero_point": in_zp}
    return Case(id_, "Requantize", [x], attrs)


SINGLE = [
    # M = 2**30, S = 31: acc / 2, ties (odd acc) up for either sign; S = 33: RoundingDivideByPOT's ties away
    requantize_case("Requantize-half-ties", ties(), 1 << 30, 31),
    requantize_case("Requantize-pot-ties", ties(), 1 << 30, 33),
    requantize_case("Requantize-left-shift", ints((2, 37), "int16"), 1518500250, 29, "int32"),
    requantize_case("Requantize-saturation", ties(), INT32_MIN, 31),
    requantize_case("Requantize-i16-to-i8", ints((3, 29), "int16"), 1395864371, 38, "int8", zp=-5, in_zp=3),
    requantize_case("Requantize-wide-i32", ints((2, 41), "int32", -(1 << 28), 1 << 28), 1518500250, 44, "int16",
                    rounding="tflite_wide"),
    Case("QMul-tflite", "QMul", [ints((3, 17), "int8"), ints((1, 17), "int8")],
         {**rq(0.0071), "a_zero_point": -3, "b_zero_point": 7}),
    Case("QMatMul-per-channel-tflite", "QMatMul", [ints((4, 24), "int8"), ints((24, 6), "int8"),
                                                   ints((6,), "int32", -5000, 5000)],
         {"multiplier": tuple(quantize_multiplier(r, rounding="tflite").multiplier for r in (3e-3, 1e-3, 7e-4, 0.5,
                                                                                             2.0, 2e-5)),
          "shift": tuple(quantize_multiplier(r, rounding="tflite").shift for r in (3e-3, 1e-3, 7e-4, 0.5, 2.0,
                                                                                   2e-5)),
          "out_zero_point": 4, "out_dtype": "int8", "rounding": "tflite", "a_zero_point": -12},
         constant=(1, 2)),
    Case("QConv-per-channel-tflite", "QConv", [ints((1, 3, 7, 6), "int8"), ints((4, 3, 3, 3), "int8", -127, 127),
                                               ints((4,), "int32", -3000, 3000)],
         {"multiplier": (1 << 30, 1 << 30, 1518500250, 1395864371), "shift": (37, 40, 39, 41),
          "out_zero_point": -1, "out_dtype": "int8", "rounding": "tflite", "x_zero_point": 5, "pads": (1, 1, 1, 1),
          "lo": -128, "hi": 100}, constant=(1, 2)),
    Case("QAddRescaled-tflite", "QAddRescaled", [ints((2, 3, 9), "int8"), ints((1, 3, 1), "int8")],
         {**rq(0.8, zero_point=3), "a_zero_point": -7, "b_zero_point": 12, "left_shift": 20,
          "a_multiplier": 1073741824, "a_shift": 31, "b_multiplier": 1518500250, "b_shift": 32}),
    Case("QAddRescaled-sub-relu", "QAddRescaled", [ints((3, 11), "int8"), ints((3, 11), "int8")],
         {**rq(1.3e-6, zero_point=-128, lo=-128), "a_zero_point": 1, "b_zero_point": -2, "left_shift": 20,
          "a_multiplier": 1395864371, "a_shift": 31, "b_multiplier": 1073741824, "b_shift": 31, "subtract": True}),
    Case("QAddRescaled-int16-wide", "QAddRescaled", [ints((2, 13), "int16"), ints((2, 13), "int16")],
         {**rq(3e-5, "int16", rounding="tflite_wide"), "left_shift": 15, "a_multiplier": 1073741824, "a_shift": 31,
          "b_multiplier": 1518500250, "b_shift": 32}),
    Case("QReduceSum-mean-tflite", "QReduceSum", [ints((1, 5, 4, 6), "int8")],
         {**rq(0.9 / 20, zero_point=2), "axes": (1, 2), "x_zero_point": -9}),
    Case("QReduceSum-all-half-up", "QReduceSum", [ints((3, 4, 5), "int8")],
         {**rq(0.01, "int16", rounding="half_up"), "axes": (), "keepdims": False, "x_zero_point": 4}),
    Case("QReduceSum-last-wide", "QReduceSum", [ints((2, 3, 50), "int16")],
         {**rq(0.02, "int16", rounding="tflite_wide"), "axes": (-1,), "keepdims": False}),
    Case("QSoftmax-i8-tflite", "QSoftmax", [ints((5, 10), "int8"), softmax_table(0.09)],
         {"multiplier": (0,), "shift": (31,), "out_zero_point": -128, "out_dtype": "int8", "rounding": "tflite"},
         constant=(1,)),
    Case("QSoftmax-u8-long-rows", "QSoftmax", [ints((2, 300), "uint8"), softmax_table(0.02)],
         {"multiplier": (0,), "shift": (31,), "out_zero_point": 0, "out_dtype": "uint8", "rounding": "tflite"},
         constant=(1,)),
    Case("QSoftmax-i16-tflite", "QSoftmax", [ints((4, 12), "int16"), softmax16_tables()],
         {**rq(3e-4 / (10.0 / 65535.0), "int16"), "out_zero_point": 0}, constant=(1,)),
]
QUANTIZE = Case("QuantizeLinear-half-away", "QuantizeLinear",
                [np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 126.5, -127.5, 300.0,
                            -300.0, 0.0, 3.25]], np.float32), np.array(1.0, np.float32), np.array(0, np.int8)],
                {"rounding": "half_away"}, constant=(1, 2))
SINGLE.append(QUANTIZE)


def test_reference_is_tflite_c_arithmetic():
    """The reference's ties and saturation are TFLite's C definitions (so the bundles below are held to them)."""
    x = ties()[0].astype(np.int64)
    for case in SINGLE[:4]:
        m, s = case.attrs["multiplier"][0], case.attrs["shift"][0]
        want = [tflite_requant(int(v), m, s) for v in (case.inputs[0].astype(np.int64).ravel())]
        graph, feeds = build_graph([case])
        got = next(iter(interpreter.run(graph, feeds).values())).astype(np.int64).ravel()
        assert got.tolist() == np.clip(want, INT32_MIN, (1 << 31) - 1).tolist(), case.id
    assert tflite_requant(INT32_MIN, INT32_MIN, 31) == (1 << 31) - 1 and x.size
    q = next(iter(interpreter.run(*build_graph([QUANTIZE])).values())).ravel().tolist()
    # C's roundf: ties away from zero, and 0.49999997 (whose + 0.5 rounds to 1.0 in float32) gives 0
    assert q == [1, 2, 3, -1, -2, -3, 0, 0, 127, -128, 127, -128, 0, 3]


@pytest.fixture(scope="module")
def single_results(tmp_path_factory):
    return run_cases(SINGLE, tmp_path_factory.mktemp("tflite_single"))


@pytest.mark.parametrize("case", SINGLE, ids=ids(SINGLE))
def test_single_op_bit_exact_on_host(single_results, case):
    check_case(single_results, case)


@pytest.mark.parametrize("cpu", ["cortex-m7"])
def test_single_ops_bit_exact_on_cortex_m(cpu, tmp_path):
    graph, feeds = build_graph(SINGLE)
    with np.errstate(all="ignore"):
        expected = interpreter.run(graph, feeds)
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    for name, want in expected.items():
        np.testing.assert_array_equal(outputs[name], want, err_msg=name)


# ---- whole models: bundle == inference --dtype quantized == TFLite BUILTIN_REF -------------------------------

MODEL_SAMPLES = 5


def _model_builders():
    from tests.support import tflite_models as tq
    return [tq.int8_cnn, tq.int8_ops, tq.int8_ds_cnn, tq.int8_mobilenet_v1, tq.int8_resnet8, tq.int8_autoencoder,
            tq.uint8_model, tq.int16x8_model]


def _reference_runs(path, graph, samples: int, seed: int = 0):
    """[(feeds by graph input, TFLite BUILTIN_REF outputs by name)] on full-range random inputs."""
    from tests.support.tflite_models import full_range_feeds, invoke, reference_interpreter

    interp = reference_interpreter(path)
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(samples):
        feeds = full_range_feeds(interp, rng)
        runs.append((dict(zip(graph.inputs, feeds)), invoke(interp, feeds)))
    return runs


@pytest.mark.parametrize("builder", _model_builders(), ids=lambda b: b.__name__)
def test_model_bundle_equals_tflite_on_host(builder, lowered_models, tmp_path):
    from tests.support.host_runner import load_bundle

    path, graph = lowered_models(builder)
    runs = _reference_runs(path, graph, MODEL_SAMPLES)
    bundle = load_bundle(graph, runs[0][0], tmp_path)
    compiled = [node.op for node in bundle.result.graph.nodes]
    assert "Transpose" not in compiled, [n.name for n in bundle.result.graph.nodes if n.op == "Transpose"]
    mutable, plan = bundle.buffers[1], bundle.result.plan
    for feeds, tflite in runs:
        for name, placeholder in zip(graph.inputs, bundle.result.graph.inputs):
            loc = plan.locations[placeholder]
            data = np.ascontiguousarray(feeds[name], dtype=graph.type_of(name).dtype.numpy)
            mutable[loc.offset:loc.offset + loc.size] = np.frombuffer(data.tobytes(), dtype=np.uint8)
        reference = interpreter.run(graph, feeds)
        assert bundle() == 0
        got = bundle.outputs()
        for name in graph.outputs:
            np.testing.assert_array_equal(reference[name], tflite[name], err_msg=f"reference {name}")
            np.testing.assert_array_equal(got[name], reference[name], err_msg=f"bundle {name}")


def _cortex_m_builders():
    from tests.support import tflite_models as tq
    return [tq.int8_ds_cnn, tq.int8_resnet8]


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
@pytest.mark.parametrize("builder", _cortex_m_builders(), ids=lambda b: b.__name__)
def test_model_bundle_equals_tflite_on_cortex_m(builder, cpu, lowered_models, tmp_path):
    path, graph = lowered_models(builder)
    feeds, tflite = _reference_runs(path, graph, 1, seed=7)[0]
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], tflite[name], err_msg=name)


def _ram_builders():
    from tests.support import tflite_models as tq
    return [tq.int8_ds_cnn, tq.int8_mobilenet_v1, tq.int8_resnet8, tq.int8_autoencoder]


@pytest.mark.parametrize("builder", _ram_builders(), ids=lambda b: b.__name__)
def test_bundle_ram_within_tflm_arena(builder, lowered_models, tmp_path):
    """Issue 11: a bundle's ACTIVATIONS + MUTABLE (Cortex-M7) needs no more RAM than TFLite Micro's arena."""
    path, graph = lowered_models(builder)
    plan = export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7")).plan
    bundle = plan.activations_size + plan.mutable_size
    arena = tflm_arena_bytes(path)
    print(f"{builder.__name__}: bundle ACTIVATIONS {plan.activations_size} + MUTABLE {plan.mutable_size} = {bundle} "
          f"bytes, TFLite Micro arena {arena} bytes")
    assert bundle <= arena
