"""Gemm and MatMul emitters in host bundles against the reference interpreter (rtol 1e-4 / atol 1e-5;
integers exactly): both register tiles (rows of Y for a row-major B, dot products for a transposed B
or a single column), every transpose, alpha/beta and broadcast shape of C, K and N that leave tails,
batched and 1-D MatMul, float16/float64 and integer types; under the tilings of test_kernels_conv.py;
plus onnxruntime on the LeNet classifier head.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.conv_tilings import TILINGS, half_precision, run_tiled
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(9)


def _x(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


def _w(*shape, fan_in: int, dtype=np.float32) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)


def _ints(*shape, dtype="int32") -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -20), min(info.max, 20), shape).astype(dtype)


def _gemm(id_, a, b, c=None, constant=(1, 2), **attrs) -> Case:
    return Case(id_, "Gemm", [a, b] + ([c] if c is not None else []), attrs, constant=constant)


GEMM_CASES = [
    _gemm("lenet-fc1", _x(1, 800), _w(500, 800, fan_in=800), _x(500), transB=1),
    _gemm("lenet-fc2", _x(1, 500), _w(10, 500, fan_in=500), _x(10), transB=1),
    _gemm("rows", _x(7, 33), _w(33, 19, fan_in=33), _x(19)),
    _gemm("rows-wide", _x(2, 40), _w(40, 75, fan_in=40), _x(75)),
    _gemm("transA", _x(33, 7), _w(33, 19, fan_in=33), _x(19), transA=1),
    _gemm("transA-transB", _x(33, 7), _w(19, 33, fan_in=33), _x(19), transA=1, transB=1),
    _gemm("dots-several-rows", _x(5, 37), _w(11, 37, fan_in=37), _x(11), transB=1),
    _gemm("alpha-beta", _x(6, 9), _w(9, 5, fan_in=9), _x(6, 1), alpha=0.5, beta=2.0),
    _gemm("alpha-transB", _x(3, 21), _w(4, 21, fan_in=21), _x(3, 4), alpha=-1.5, beta=0.25, transB=1),
    _gemm("beta-zero", _x(4, 6), _w(6, 5, fan_in=6), _x(4, 5), beta=0.0),
    _gemm("no-c", _x(4, 6), _w(6, 5, fan_in=6)),
    _gemm("c-scalar", _x(4, 6), _w(6, 5, fan_in=6), _x(1)),
    _gemm("c-row", _x(4, 6), _w(6, 5, fan_in=6), _x(1, 5)),
    _gemm("c-column", _x(4, 6), _w(5, 6, fan_in=6), _x(4, 1), transB=1),
    _gemm("c-full", _x(4, 6), _w(6, 5, fan_in=6), _x(4, 5)),
    _gemm("k-one", _x(3, 1), _w(1, 6, fan_in=1), _x(6)),
    _gemm("inputs-not-constants", _x(3, 10), _w(10, 4, fan_in=10), _x(4), constant=()),
    _gemm("f64", _x(3, 20, dtype=np.float64), _w(20, 6, fan_in=20, dtype=np.float64), _x(6, dtype=np.float64)),
    half_precision(_gemm("f16", _x(3, 20, dtype=np.float16), _w(6, 20, fan_in=20, dtype=np.float16),
                         _x(6, dtype=np.float16), transB=1)),
    _gemm("int32", _ints(4, 9), _ints(9, 5), _ints(5)),
    _gemm("int64-transB", _ints(3, 9, dtype="int64"), _ints(5, 9, dtype="int64"), _ints(3, 5, dtype="int64"),
          transB=1),
]


def _matmul(id_, a, b, constant=(1,)) -> Case:
    return Case(id_, "MatMul", [a, b], constant=constant)


MATMUL_CASES = [
    _matmul("2d", _x(5, 12), _w(12, 9, fan_in=12)),
    _matmul("row-vector-times-matrix", _x(1, 800), _w(800, 500, fan_in=800)),
    _matmul("batched-broadcast", _x(2, 3, 5, 6), _w(3, 6, 9, fan_in=6)),
    _matmul("batched-both", _x(2, 1, 4, 6), _w(1, 3, 6, 7, fan_in=6), constant=()),
    _matmul("1d-a", _x(6), _w(2, 6, 9, fan_in=6)),
    _matmul("1d-b", _x(4, 6), _w(6, fan_in=6)),
    _matmul("1d-both", _x(37), _w(37, fan_in=37)),
    _matmul("column-b", _x(3, 45), _w(45, 1, fan_in=45)),
    _matmul("narrow-n", _x(9, 16), _w(16, 3, fan_in=16)),
    _matmul("f64", _x(4, 10, dtype=np.float64), _w(10, 6, fan_in=10, dtype=np.float64)),
    half_precision(_matmul("f16", _x(4, 30, dtype=np.float16), _w(30, 6, fan_in=30, dtype=np.float16))),
    _matmul("int32", _ints(3, 17), _ints(17, 5)),
    _matmul("int64-batched", _ints(2, 3, 4, dtype="int64"), _ints(4, 5, dtype="int64")),
    _matmul("uint8-wraps", _ints(3, 8, dtype="uint8"), _ints(8, 4, dtype="uint8")),
]

CASES = GEMM_CASES + MATMUL_CASES


@pytest.fixture(scope="module", params=list(TILINGS), ids=list(TILINGS))
def results(request, tmp_path_factory):
    return run_tiled(CASES, tmp_path_factory, f"linear-{request.param}", TILINGS[request.param])


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_integer_gemm_with_scaling_is_refused(tmp_path):
    with pytest.raises(PegasusError, match="integer Gemm with alpha=2.0"):
        run_cases([_gemm("int", _ints(2, 3), _ints(3, 2), alpha=2.0)], tmp_path)


def test_matches_onnxruntime(tmp_path):
    """LeNet's classifier head (Gemm transB + Relu + Gemm) and a MatMul, bundle against onnxruntime."""
    x = _x(2, 800)
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("w1", _w(500, 800, fan_in=800)), ("b1", _x(500)), ("w2", _w(10, 500, fan_in=500)), ("b2", _x(10)),
        ("m", _w(800, 7, fan_in=800)))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1),
             helper.make_node("MatMul", ["x", "m"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    np.testing.assert_allclose(ours["y"], theirs[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours["z"], theirs[1], rtol=1e-4, atol=1e-5)
