"""QPRelu's emitter (exporters/glow/kernels/integer/integer_prelu.py) bit for bit against its NumPy reference: single-op
layers over uint8/int8/int16 inputs, int8/uint8/int16 slopes broadcast per channel (channels first and last), per
element or one for all, under the tflite and half_up roundings, with clamps and identity factors above 1 (a left
shift), the identity side from a table when x has more elements than levels, on the host and bare metal on
Cortex-M7/M4 under qemu; and whole models: the TFLite full-int8 PReLU model and a float ONNX PReLU model pegasus
quantizes per-channel int8, their bundles equal to ``inference --dtype quantized``."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ops.fixedpoint import bits_needed, quantize_multiplier, tflite_multiplier
from pegasus.quantized.lower import lower_to_integer
from pegasus.runtime import interpreter
from tests.importers.tflite.harness import cached_model, import_cli
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph, check_case, ids, run_cases
from tests.support.integer_average import ints
from tests.support.prelu_models import float_prelu_graph, int8_prelu, prelu_samples
from tests.support.quantized_bundles import SCHEMES, assert_bit_exact, quantize
from tests.support.tflite_models import assert_bundle_matches_inference


def bits(dtype: str) -> int:
    info = np.iinfo(dtype)
    return bits_needed(int(info.max) - int(info.min))


def prelu(case_id: str, x: np.ndarray, alpha: np.ndarray, identity: float, below: float, *, zx: int = 0,
          za: int = 0, zy: int = 0, out_dtype: str = "int8", rounding: str = "half_up", lo=None, hi=None) -> Case:
    """A QPRelu layer with the multipliers its rule derives for the real factors ``identity`` and ``below``."""
    if rounding == "tflite":
        up, down = tflite_multiplier(identity), tflite_multiplier(below)
    else:
        up = quantize_multiplier(identity, bits(x.dtype))
        down = quantize_multiplier(below, bits(x.dtype) + bits(alpha.dtype))
    attrs = {"multiplier": (up.multiplier,), "shift": (up.shift,), "out_zero_point": zy, "out_dtype": out_dtype,
             "lo": lo, "hi": hi, "rounding": rounding, "x_zero_point": zx, "alpha_zero_point": za,
             "alpha_multiplier": down.multiplier, "alpha_shift": down.shift}
    return Case(case_id, "QPRelu", [x, alpha], attrs, constant=(1,))


CASES = [
    prelu("i8-tflite-channels-last", ints((1, 6, 5, 8), "int8"), ints((1, 1, 8), "int8"), 0.91, 0.0072,
          zx=3, zy=-9, rounding="tflite"),
    prelu("i8-tflite-elementwise", ints((1, 4, 3, 6), "int8"), ints((1, 4, 3, 6), "int8"), 1.64, 0.0031,
          zx=-3, za=-20, zy=-86, rounding="tflite"),
    prelu("i8-tflite-one-slope", ints((2, 37), "int8"), ints((1,), "int8"), 0.5, 0.004, zx=-128, za=7,
          rounding="tflite"),
    prelu("u8-channels-first", ints((1, 4, 5, 6), "uint8"), ints((4, 1, 1), "uint8"), 1.18, 0.0051, zx=117, za=46,
          zy=91, out_dtype="uint8"),
    prelu("i8-clamped", ints((1, 5, 7), "int8"), ints((5, 1), "int8", -60, 100), 0.73, 0.0093, zx=-11, za=-82,
          zy=-37, lo=-37, hi=80),
    prelu("i8-identity-above-one", ints((3, 16), "int8"), ints((16,), "int8"), 3.7, 0.02, zx=5, zy=2),
    prelu("i16-i16-wide-product", ints((1, 4, 3, 5), "int16"), ints((4, 1, 1), "int16"), 1.0, 2.0 ** -15,
          out_dtype="int16"),
    prelu("i16-tflite-i8-slope", ints((1, 3, 9), "int16"), ints((3, 1), "int8"), 0.8, 0.0061, rounding="tflite",
          out_dtype="int16"),
    prelu("i8-to-i16", ints((2, 3, 4), "int8"), ints((3, 1), "int8"), 64.0, 0.25, zx=1, za=2, out_dtype="int16"),
    # more elements than levels: the identity side from a table
    prelu("i8-tflite-table", ints((1, 9, 8, 16), "int8"), ints((1, 1, 16), "int8"), 1.07, 0.0068, zx=-5, zy=-17,
          rounding="tflite"),
    prelu("u8-table-clamped", ints((1, 8, 6, 7), "uint8"), ints((8, 1, 1), "uint8"), 0.66, 0.0044, zx=131, za=100,
          zy=12, out_dtype="uint8", lo=12, hi=200),
    prelu("i8-tflite-table-negatives-clamped", ints((1, 300), "int8"), ints((300,), "int8"), 0.9, 0.007, zx=9,
          za=3, zy=-20, lo=-20, rounding="tflite"),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("prelu"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_qprelu_matches_reference(results, case):
    check_case(results, case)
    got, want = results[case.id][0]
    assert len(np.unique(want)) > 8   # both signs seen, not a clamped constant


@pytest.fixture(scope="module")
def bare_metal_graph():
    graph, feeds = build_graph(CASES)
    return graph, feeds, interpreter.run(graph, feeds)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
def test_qprelu_on_cortex_m(cpu, bare_metal_graph, tmp_path):
    graph, feeds, expected = bare_metal_graph
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    assert_bit_exact(toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec), expected)


@pytest.mark.framework
@pytest.mark.xdist_group("tflite")
@pytest.mark.parametrize("cpu", ["host", "cortex-m7"])
def test_tflite_prelu_model_bundle(cpu, tmp_path_factory, tmp_path):
    """The TFLite full-int8 PReLU model (its PRELU layers as QPRelu, rounding tflite) on ``cpu``."""
    path = cached_model(int8_prelu)
    imported = (path, *import_cli(path, tmp_path_factory.mktemp("int8_prelu")))
    result = assert_bundle_matches_inference(imported, cpu, tmp_path, seed=36)
    assert [node.op for node in result.graph.nodes].count("QPRelu") == 2


def test_pegasus_quantized_prelu_model_bundle(tmp_path):
    """Conv -> PRelu -> Conv -> PRelu quantized per-channel int8 by pegasus: one host bundle, every layer integer."""
    graph = float_prelu_graph()
    lowered = lower_to_integer(graph, quantize(graph, prelu_samples(16), *SCHEMES["pc8"]))
    assert lowered.float_layers == []
    feeds = prelu_samples(1, seed=2)[0]
    export_bundle(lowered.graph, tmp_path, "net", resolve_target(None, None))
    spec = {name: (lowered.graph.type_of(name).shape, lowered.graph.type_of(name).dtype.numpy)
            for name in lowered.graph.outputs}
    assert_bit_exact(toolchains.run_host(tmp_path, "net", feeds, spec), interpreter.run(lowered.graph, feeds))
