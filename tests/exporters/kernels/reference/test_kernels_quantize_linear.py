"""QuantizeLinear and DequantizeLinear emitters in a host bundle against the reference interpreter
(integers bit-exact, including ties that round half to even and saturation), per tensor, per axis
and blocked; and against onnxruntime for a QDQ pair."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(11)

X = (RNG.standard_normal((2, 3, 8)) * 60).astype(np.float32)
TIES = np.arange(-20, 21, dtype=np.float32) * np.float32(0.25)     # x / 0.5 hits every .5 tie
HUGE = np.float32([1e10, -1e10, 3e9, -3e9, 65535.4, -32768.6, 0.0, 1e-30])
NONFINITE = np.float32([np.nan, np.inf, -np.inf, -np.nan, 1.0])   # NaN gives the type's minimum (onnxruntime)


def _blocked(shape, axis, block, dtype) -> tuple[np.ndarray, np.ndarray]:
    params = [-(-d // block) if i == axis else d for i, d in enumerate(shape)]
    scale = RNG.uniform(0.2, 2.0, params).astype(np.float32)
    return scale, RNG.integers(-5, 5, params).astype(dtype)


QUANTIZE = (
    [Case(f"Q-tensor-{dtype}", "QuantizeLinear", [X, np.float32(0.37), np.array(zp, dtype)])
     for dtype, zp in (("uint8", 128), ("int8", -3), ("uint16", 30000), ("int16", -7), ("int32", 11))]
    + [Case(f"Q-saturate-{dtype}", "QuantizeLinear", [HUGE, np.float32(0.5), np.array(zp, dtype)])
       for dtype, zp in (("uint8", 3), ("int8", -3), ("int16", 100), ("uint16", 0), ("int32", -5))]
    + [
        Case("Q-nonfinite-uint8", "QuantizeLinear", [NONFINITE, np.float32(0.1), np.uint8(128)]),
        Case("Q-nonfinite-int8", "QuantizeLinear", [NONFINITE, np.float32(0.1), np.int8(-3)]),
        Case("Q-ties", "QuantizeLinear", [TIES, np.float32(0.5), np.int8(0)]),
        Case("Q-ties-zero-point", "QuantizeLinear", [TIES, np.float32(0.5), np.uint8(7)]),
        Case("Q-float16-scale", "QuantizeLinear", [X / 3, np.float16(0.3), np.int8(1)]),
        Case("Q-float16-input", "QuantizeLinear", [TIES.astype(np.float16), np.float32(0.5), np.int8(0)]),
        Case("Q-precision-float16", "QuantizeLinear", [X / 3, np.float32(0.3), np.int8(1)], {"precision": "float16"}),
        Case("Q-no-zero-point", "QuantizeLinear", [X, np.float32(0.5)]),
        Case("Q-output-dtype", "QuantizeLinear", [X, np.float32(0.5)], {"output_dtype": "int8"}),
        Case("Q-constant-params", "QuantizeLinear", [X, np.float32(0.25), np.int8(2)], constant=(1, 2)),
        Case("Q-axis1", "QuantizeLinear", [X, np.float32([0.5, 1, 2]), np.uint8([1, 128, 250])], {"axis": 1}),
        Case("Q-axis0", "QuantizeLinear", [X, np.float32([0.3, 3]), np.int8([-1, 1])], {"axis": 0}),
        Case("Q-axis-last", "QuantizeLinear", [X, RNG.uniform(0.1, 1, 8).astype(np.float32),
                                               RNG.integers(-9, 9, 8).astype(np.int8)], {"axis": -1}),
        Case("Q-blocked-last", "QuantizeLinear", [X, *_blocked(X.shape, 2, 3, np.int8)],
             {"axis": 2, "block_size": 3}),
        Case("Q-blocked-middle", "QuantizeLinear", [X, *_blocked(X.shape, 1, 2, np.uint8)],
             {"axis": 1, "block_size": 2}),
    ]
)

DEQUANTIZE = (
    [Case(f"DQ-tensor-{dtype}", "DequantizeLinear", [RNG.integers(lo, hi, (2, 3, 8)).astype(dtype), np.float32(0.37),
                                                     np.array(zp, dtype)])
     for dtype, lo, hi, zp in (("uint8", 0, 256, 128), ("int8", -128, 128, -3), ("int16", -32768, 32768, 12),
                               ("uint16", 0, 65536, 40000), ("int32", -2 ** 31, 2 ** 31 - 1, -2 ** 31 + 5))]
    + [
        Case("DQ-no-zero-point", "DequantizeLinear", [RNG.integers(-128, 128, 17).astype(np.int8), np.float32(0.1)]),
        Case("DQ-axis1", "DequantizeLinear", [RNG.integers(0, 256, (2, 3, 4)).astype(np.uint8),
                                              np.float32([0.5, 1, 2]), np.uint8([1, 128, 250])], {"axis": 1}),
        Case("DQ-axis0-constant", "DequantizeLinear", [RNG.integers(-128, 128, (4, 5)).astype(np.int8),
                                                       RNG.uniform(0.01, 1, 4).astype(np.float32),
                                                       np.zeros(4, np.int8)], {"axis": 0}, constant=(0, 1, 2)),
        Case("DQ-blocked", "DequantizeLinear", [RNG.integers(-128, 128, (2, 3, 8)).astype(np.int8),
                                                *_blocked((2, 3, 8), 2, 3, np.int8)], {"axis": 2, "block_size": 3}),
        Case("DQ-float16", "DequantizeLinear", [RNG.integers(0, 256, 40).astype(np.uint8), np.float16(0.37),
                                                np.uint8(100)]),
        Case("DQ-output-float16", "DequantizeLinear", [RNG.integers(-128, 128, 40).astype(np.int8),
                                                       np.float32(0.37)], {"output_dtype": "float16"}),
    ]
)

CASES = QUANTIZE + DEQUANTIZE


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("quantize"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_qdq_matches_onnxruntime(tmp_path):
    """A per-channel QuantizeLinear → DequantizeLinear pair (opset 13) against onnxruntime."""
    x = (RNG.standard_normal((1, 4, 5)) * 10).astype(np.float32)
    scale, zero = np.float32([0.1, 0.2, 0.05, 1.0]), np.int8([0, -3, 5, 1])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("q", TensorProto.INT8, None),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    np.testing.assert_array_equal(ours["q"], theirs[0])
    np.testing.assert_allclose(ours["y"], theirs[1], rtol=1e-4, atol=1e-5)
