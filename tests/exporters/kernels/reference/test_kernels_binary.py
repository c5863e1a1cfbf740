"""The broadcasting element-wise emitters (arithmetic, comparisons, logic, variadic, PRelu, Where)
compiled into one host bundle and compared with the reference interpreter, over the broadcasting
patterns the loop emitter specialises (equal shapes, scalar, per-channel, both sides broadcast) and
integer dtypes with the cases C leaves undefined (division by zero, INT_MIN / -1, wide shifts);
a few are also checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from pegasus.exporters.glow.llvm.lanes import broadcast_strides, coalesce
from pegasus.importers.onnx.loader import import_onnx
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(3)

SHAPES = {
    "equal": ((2, 3, 5), (2, 3, 5)),
    "scalar": ((2, 3, 5), ()),
    "scalar-first": ((), (4, 3)),
    "vector": ((2, 3, 5), (5,)),
    "per-channel": ((2, 16, 3, 3), (16, 1, 1)),
    "outer": ((7, 1), (1, 9)),
    "both": ((1, 3, 1), (2, 1, 4)),
}
FLOAT_OPS = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
             "Sum", "Mean"]


def _floats(shape, low=-4.0, high=4.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


def _ints(shape, dtype, low, high) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


def _int_cases(dtype: str) -> list[Case]:
    info = np.iinfo(dtype)
    low, high = max(info.min, -100), min(info.max, 100)
    a, b = _ints((4, 6), dtype, low, high), _ints((6,), dtype, low, high)
    b[:2] = [0, 1]                                        # division and remainder by zero
    cases = [Case(f"{op}-{dtype}", op, [a, b]) for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal",
                                                          "Less", "GreaterOrEqual", "Sum", "Mean")]
    cases += [Case(f"Mod-{dtype}", "Mod", [a, b]), Case(f"Mod-fmod-{dtype}", "Mod", [a, b], {"fmod": 1})]
    bases = _ints((4, 6), dtype, max(info.min, -3), 4)
    bases[bases == 0] = 2                                 # 0 ** -n is undefined in NumPy's float path
    cases.append(Case(f"Pow-{dtype}", "Pow", [bases, _ints((6,), dtype, -3 if info.min else 0, 5)]))
    if info.min:
        edge = np.array([info.min, info.min, info.max, -7, 7, -7], dtype)
        cases.append(Case(f"Div-edges-{dtype}", "Div", [edge, np.array([-1, 1, -1, 2, -2, -2], dtype)]))
        cases.append(Case(f"Mod-edges-{dtype}", "Mod", [edge, np.array([-1, 3, 5, 2, -2, 3], dtype)]))
    return cases


BINARY_CASES = (
    [Case(f"{op}-{name}", op, [_floats(sa), _floats(sb)]) for op in FLOAT_OPS for name, (sa, sb) in SHAPES.items()]
    + [Case(f"Pow-{name}", "Pow", [_floats(sa, 0.1, 3), _floats(sb)]) for name, (sa, sb) in SHAPES.items()]
    + [Case(f"Mod-{name}", "Mod", [_floats(sa, -9, 9), _floats(sb, 0.5, 3) * RNG.choice(np.float32([-1, 1]), sb)])
       for name, (sa, sb) in SHAPES.items()]
    + [Case(f"Mod-fmod-{name}", "Mod", [_floats(sa, -9, 9), _floats(sb, 0.5, 3)], {"fmod": 1})
       for name, (sa, sb) in SHAPES.items()]
    + [Case(f"PRelu-{name}", "PRelu", [_floats((2, 16, 3, 3)), _floats(shape)])
       for name, shape in (("per-channel", (16, 1, 1)), ("scalar", (1,)), ("full", (2, 16, 3, 3)))]
    + [
        Case("Mod-f64", "Mod", [RNG.uniform(-9, 9, (3, 4)), RNG.uniform(0.5, 3, 4) * RNG.choice([-1, 1], 4)]),
        Case("Pow-negative-base-integral-exponent", "Pow", [_floats((3, 4)), np.float32([0, 1, 2, 3])]),
        Case("Pow-int-exponent", "Pow", [_floats((3, 4), 0.5, 2), np.int64([0, 1, 2, -3])]),
        Case("Pow-int8-base-int32-exponent", "Pow", [np.int8([[3], [-2], [5]]), np.int32([7, 300, 33, 2])]),
        Case("Pow-int-base-float-exponent", "Pow", [np.int32([[2], [3], [5], [7], [1]]),
                                                   np.float32([2, 3, -1, 0, 0.5, 1.5, 2.5])]),
        Case("Pow-negative-int-base-float-exponent", "Pow", [np.int64([[-2], [-3], [-1]]),
                                                            np.float32([2, 3, -1, 0, 5])]),
        Case("Add-constant-per-channel", "Add", [_floats((1, 8, 5, 5)), _floats((8, 1, 1))], constant=(1,)),
        Case("Mul-constant-scalar", "Mul", [_floats((33,)), np.float32(0.5)], constant=(1,)),
        Case("Add-f16", "Add", [_floats((3, 7)).astype(np.float16), _floats((7,)).astype(np.float16)]),
        Case("Max-f16", "Max", [_floats((3, 7)).astype(np.float16), _floats((7,)).astype(np.float16)]),
        Case("Max-nan", "Max", [np.float32([np.nan, 1, 2, np.nan]), np.float32([0, np.nan, 3, np.nan])]),
        Case("Min-nan", "Min", [np.float32([np.nan, 1, 2, np.nan]), np.float32([0, np.nan, 3, np.nan])]),
        Case("Less-nan", "Less", [np.float32([np.nan, 1, 2]), np.float32([0, np.nan, 3])]),
    ]
    + [case for dtype in ("int8", "uint8", "int32", "int64", "uint16") for case in _int_cases(dtype)]
    + [Case(f"{op}-bool", op, [RNG.random((3, 5)) > 0.5, RNG.random((5,)) > 0.5]) for op in ("And", "Or", "Xor",
                                                                                              "Equal")]
    + [Case(f"BitShift-{direction}-{dtype}", "BitShift",
            [_ints((3, np.dtype(dtype).itemsize * 8 + 3), dtype, 0, 250),
             np.arange(np.dtype(dtype).itemsize * 8 + 3).astype(dtype)], {"direction": direction})
       for direction in ("LEFT", "RIGHT") for dtype in ("uint8", "uint16", "uint32", "uint64")]
    + [Case(f"BitShift-{direction}-int32", "BitShift", [np.int32([5, -5, 7, -7, 1, -1]),
                                                         np.int32([1, 2, -1, 33, 31, 32])], {"direction": direction})
       for direction in ("LEFT", "RIGHT")]
    + [Case(f"{op}-{n}-inputs", op, [_floats(s) for s in [(3, 1, 4), (5, 1), (4,), ()][:n]])
       for op in ("Max", "Min", "Sum", "Mean") for n in (1, 3, 4)]
    + [Case("Mean-int32", "Mean", [_ints((3, 4), "int32", -50, 50), _ints((4,), "int32", -50, 50),
                                   _ints((3, 1), "int32", -50, 50)])]
    + [Case(f"Where-{name}", "Where", [RNG.random(sc) > 0.5, x, y]) for name, sc, x, y in (
        ("float", (3, 1), _floats((3, 4)), _floats((4,))),
        ("int64", (4,), _ints((2, 4), "int64", -9, 9), _ints((1,), "int64", -9, 9)),
        ("bool", (2, 3), RNG.random((3,)) > 0.5, RNG.random((2, 1)) > 0.5),
        ("f16", (5,), _floats((5,)).astype(np.float16), _floats(()).astype(np.float16)))]
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(BINARY_CASES, tmp_path_factory.mktemp("binary"))


@pytest.mark.parametrize("case", BINARY_CASES, ids=ids(BINARY_CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_loops_merge_what_every_operand_walks_contiguously():
    out = (2, 16, 3, 3)
    strides = [broadcast_strides(out, out), broadcast_strides(out, (16, 1, 1))]
    assert strides[1] == (0, 1, 0, 0)
    assert coalesce(out, strides) == ([2, 16, 9], [[144, 9, 1], [0, 1, 0]])
    assert coalesce((4, 5, 6), [(30, 6, 1), (30, 6, 1)]) == ([120], [[1], [1]])
    assert coalesce((4, 5), [(5, 1), (0, 0)]) == ([20], [[1], [0]])


def test_matches_onnxruntime(tmp_path):
    """Add (per-channel), Pow, integer Div and Where in one ONNX model, bundle against onnxruntime."""
    x, c = _floats((1, 4, 3, 3)), _floats((4, 1, 1))
    i, j = _ints((2, 5), "int32", -50, 50), _ints((5,), "int32", 1, 9) * RNG.choice([-1, 1], 5).astype(np.int32)
    nodes = [helper.make_node("Add", ["x", "c"], ["sum"]), helper.make_node("Pow", ["sum", "two"], ["square"]),
             helper.make_node("Div", ["i", "j"], ["quotient"]), helper.make_node("Greater", ["x", "c"], ["gt"]),
             helper.make_node("Where", ["gt", "x", "c"], ["picked"])]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
        helper.make_tensor_value_info("c", TensorProto.FLOAT, c.shape),
        helper.make_tensor_value_info("i", TensorProto.INT32, i.shape),
        helper.make_tensor_value_info("j", TensorProto.INT32, j.shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("square", TensorProto.FLOAT),
                                                               ("quotient", TensorProto.INT32),
                                                               ("picked", TensorProto.FLOAT))],
        initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": x, "c": c, "i": i, "j": j}
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = run_bundle_host(import_onnx(model), feeds, workdir=tmp_path)
    np.testing.assert_allclose(ours["square"], theirs[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(ours["quotient"], theirs[1])
    np.testing.assert_allclose(ours["picked"], theirs[2], rtol=1e-4, atol=1e-5)
