"""The reduction emitters (Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax) compiled into one host bundle and
compared with the reference interpreter: every Reduce* over axis sets that merge into one loop or not
(leading, trailing, interleaved, negative, all), with and without keepdims, the no-op rule, empty
reductions (their identities), integer dtypes (exact, with wrap-around), bool, float16 and float64;
ArgMax/ArgMin with ties and NaNs both ways round; Softmax/LogSoftmax on every axis with infinities,
NaNs and large values. A model is also checked against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from tests.support.bundle_cases import Case, build_graph, check_case, ids, run_cases
from tests.support.host_runner import run_bundle_host
from tests.support.shape_samples import sample

pytestmark = pytest.mark.filterwarnings("ignore:Mean of empty slice")  # ReduceMean-empty: NaN, as wanted
X = sample((2, 3, 4, 5)) / 4
POSITIVE = np.abs(X) + np.float32(0.1)
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
INT_OPS = ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceSumSquare"]
AXES = {"all": (), "channels": (1,), "spatial": (2, 3), "interleaved": (0, 2), "negative": (-1, 1),
        "every": (0, 1, 2, 3)}


def _input(op: str) -> np.ndarray:
    return POSITIVE if op == "ReduceLogSum" else X


def _ties(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Few distinct values (ties for ArgMax/ArgMin)."""
    return sample(shape, dtype) if dtype == "bool" else (sample(shape, "int8") // 25).astype(dtype)


REDUCE_CASES = (
    [Case(f"{op}-{name}-keep{keep}", op, [_input(op)], {"axes": axes, "keepdims": keep})
     for op in REDUCE_OPS for name, axes in AXES.items() for keep in (1, 0)]
    + [Case(f"{op}-noop", op, [X], {"noop_with_empty_axes": 1}) for op in REDUCE_OPS]
    + [Case(f"{op}-empty", op, [sample((2, 0, 3))], {"axes": (1,)}) for op in ("ReduceSum", "ReduceProd",
                                                                               "ReduceMax", "ReduceMin",
                                                                               "ReduceMean", "ReduceLogSumExp")]
    + [Case(f"{op}-{dtype}-{name}", op, [sample((2, 3, 4, 5), dtype)], {"axes": axes})
       for op in INT_OPS for dtype in ("int8", "uint8", "int32", "int64")
       for name, axes in (("channels", (1,)), ("interleaved", (0, 2)))]
    + [Case(f"{op}-bool", op, [sample((4, 70), "bool") | (np.arange(70) < 3)], {"axes": (1,)})
       for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")]
    + [Case("ReduceSum-bool-256-true", "ReduceSum", [np.ones((256,), bool)], {"keepdims": 0})]
    # NumPy accumulates float16 in float16; the bundle in float32 (more accurate)
    + [Case(f"{op}-f16", op, [_input(op).astype(np.float16)], {"axes": (1, 3)}, rtol=3e-3, atol=3e-3)
       for op in REDUCE_OPS]
    + [Case(f"{op}-f64", op, [_input(op).astype(np.float64)], {"axes": (2,)}) for op in REDUCE_OPS]
    + [Case("ReduceMax-nan", "ReduceMax", [np.float32([[1, np.nan, 3], [np.inf, 2, -np.inf]])], {"axes": (1,)}),
       Case("ReduceLogSumExp-infinite", "ReduceLogSumExp",
            [np.float32([[-np.inf, -np.inf], [np.inf, 1], [800, 799], [-800, -801]])], {"axes": (1,)}),
       Case("ReduceSum-long", "ReduceSum", [sample((3, 1000))], {"axes": (1,)}),
       Case("ReduceMean-global-pool", "ReduceMean", [sample((1, 32, 7, 7))], {"axes": (2, 3)})]
)

TIES = np.float32([[3, 1, 3, 0], [2, 2, 2, 2], [-1, 5, 5, -1], [0, 0, 1, 1]])
NANS = np.float32([[1, np.nan, 3, np.nan], [np.nan, 2, 2, 0], [0, 1, 2, 3], [np.inf, -np.inf, np.inf, 0]])
ARG_CASES = (
    [Case(f"{op}-axis{axis}-last{last}-keep{keep}", op, [X], {"axis": axis, "select_last_index": last,
                                                             "keepdims": keep})
     for op in ("ArgMax", "ArgMin") for axis in (0, 1, -1) for last in (0, 1) for keep in (1, 0)]
    + [Case(f"{op}-{name}-axis{axis}-last{last}", op, [values], {"axis": axis, "select_last_index": last})
       for op in ("ArgMax", "ArgMin") for name, values in (("ties", TIES), ("nans", NANS))
       for axis in (0, 1) for last in (0, 1)]
    + [Case(f"{op}-{dtype}-last{last}", op, [_ties((3, 4, 6), dtype)], {"axis": 2, "select_last_index": last})
       for op in ("ArgMax", "ArgMin") for dtype in ("int8", "uint8", "int64", "bool", "float16") for last in (0, 1)]
)

EXTREMES = np.float32([[1000, 999, -1000, 0], [np.inf, 1, 2, 3], [-np.inf] * 4, [np.nan, 0, 1, 2],
                       [-np.inf, 0, -np.inf, 1], [1e-30, -1e-30, 0, 0]])
SOFTMAX_CASES = (
    [Case(f"{op}-axis{axis}", op, [X * 4], {"axis": axis}) for op in ("Softmax", "LogSoftmax")
     for axis in (0, 1, 2, -1)]
    + [Case(f"{op}-extremes", op, [EXTREMES]) for op in ("Softmax", "LogSoftmax")]
    + [Case(f"{op}-classifier", op, [sample((1, 1000))]) for op in ("Softmax", "LogSoftmax")]
    + [Case(f"{op}-f16", op, [X.astype(np.float16)], rtol=3e-3, atol=3e-3) for op in ("Softmax", "LogSoftmax")]
    + [Case(f"{op}-f64", op, [X.astype(np.float64)], {"axis": 1}) for op in ("Softmax", "LogSoftmax")]
)

CASES = REDUCE_CASES + ARG_CASES + SOFTMAX_CASES


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("reduce"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "Softmax"])
def test_float_only_reductions_refuse_integers(tmp_path, op):
    graph, feeds = build_graph([Case("int", op, [np.arange(6, dtype=np.int32).reshape(2, 3)])])
    with pytest.raises(PegasusError, match=f"{op} on int32"):
        run_bundle_host(graph, feeds, workdir=tmp_path)


def test_matches_onnxruntime(tmp_path):
    """ReduceMean (global pool), ReduceLogSumExp, ArgMax and Softmax of one input, against onnxruntime."""
    x = sample((2, 6, 3, 4)) / 3
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[2, 3], keepdims=1),
             helper.make_node("ReduceLogSumExp", ["x"], ["lse"], axes=[1], keepdims=0),
             helper.make_node("ArgMax", ["x"], ["arg"], axis=1, select_last_index=1),
             helper.make_node("Softmax", ["x"], ["soft"], axis=1)]
    outputs = [("mean", TensorProto.FLOAT), ("lse", TensorProto.FLOAT), ("arg", TensorProto.INT64),
               ("soft", TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    import onnxruntime as ort
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    for (name, _), want in zip(outputs, theirs):
        np.testing.assert_allclose(ours[name], want, rtol=1e-4, atol=1e-5)
