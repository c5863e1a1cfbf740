"""The unary element-wise emitters, Cast and Identity, compiled into host bundles (gcc, ctypes) and
compared with the NumPy reference interpreter: float outputs within rtol 1e-4 / atol 1e-5, integer and
bool outputs exactly.

To keep the file fast, every ``Case`` of a family becomes one layer of a single graph that is
exported once (``run_cases``); each case is then its own test. ``Case``/``run_cases``/``check_case``
are shared by the other ``test_kernels_*`` files.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import make_attrs
from pegasus.runtime import interpreter
from tests.support.bundle_cases import CASES, Case, check_case, floats_with_ties, ids, run_cases
from tests.support.host_runner import run_bundle_host

# ---- the cases (tests/support/bundle_cases.py) -----------------------------------------------------


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("elementwise"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_cast_of_nan_and_out_of_range_is_defined(tmp_path):
    """What C leaves undefined: NaN → 0 and saturation to int32 (int64 for wider or uint32 targets),
    then wrap-around to the target width."""
    x = np.float32([np.nan, 3e9, -3e9, np.inf, -np.inf, -1.0, 1e20])
    cases = [Case(dst, "Cast", [x], {"to": dst}) for dst in ("int32", "int8", "uint8", "uint32", "int64")]
    results = run_cases(cases, tmp_path)
    got = {case.id: results[case.id][0][0].tolist() for case in cases}
    assert got["int32"] == [0, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31, -1, 2 ** 31 - 1]
    assert got["int8"] == [0, -1, 0, -1, 0, -1, -1]
    assert got["uint8"] == [0, 255, 0, 255, 0, 255, 255]
    assert got["uint32"] == [0, 3_000_000_000, (-3_000_000_000) % 2 ** 32, 2 ** 32 - 1, 0, 2 ** 32 - 1, 2 ** 32 - 1]
    assert got["int64"][:3] == [0, 3_000_000_000, -3_000_000_000]


def test_in_place_chain_and_identity(tmp_path):
    """Relu and Sigmoid write over their input and the Identity layers alias it (the planner gives the
    chain one buffer: no copy); the output that is also an input becomes an Identity that copies."""
    a, b = floats_with_ties((4, 33)), floats_with_ties((33,))
    graph = Graph("chain")
    graph.inputs = ["a", "b"]
    for name, value in (("a", a), ("b", b)):
        graph.tensors[name] = Tensor(name, TensorType.of(value))
    steps = [("Add", ["a", "b"], "t0"), ("Relu", ["t0"], "t1"), ("Identity", ["t1"], "t2"),
             ("Sigmoid", ["t2"], "t3"), ("Identity", ["t3"], "y")]
    for op, inputs, out in steps:
        graph.tensors[out] = Tensor(out, TensorType.of(a))
        graph.nodes.append(Node(f"{op}_{out}", op, make_attrs(op), inputs, [out]))
    graph.outputs = ["y", "a"]     # an input that is also an output: lowered to an Identity copy
    verify(graph)
    expected = interpreter.run(graph, {"a": a, "b": b})
    actual = run_bundle_host(graph, {"a": a, "b": b}, workdir=tmp_path)
    np.testing.assert_allclose(actual["y"], expected["y"], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(actual["a"], a)


def test_float_only_op_on_integers_is_refused(tmp_path):
    with pytest.raises(PegasusError, match="Exp on int32"):
        run_cases([Case("exp-int", "Exp", [np.arange(4, dtype=np.int32)])], tmp_path)


def test_matches_onnxruntime(tmp_path):
    """Several unary ops of one input in one ONNX model (opset 18), bundle against onnxruntime."""
    import onnxruntime as ort
    x = floats_with_ties((2, 3, 17))
    ops = {"Sigmoid": {}, "Tanh": {}, "Erf": {}, "Softplus": {}, "HardSwish": {}, "Round": {}, "Atan": {},
           "Mish": {}, "Elu": {"alpha": 0.7}, "Cast": {"to": TensorProto.INT8}}
    nodes = [helper.make_node(op, ["x"], [f"y_{op}"], **attrs) for op, attrs in ops.items()]
    graph = helper.make_graph(nodes, "unary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(f"y_{op}", ops[op].get("to", TensorProto.FLOAT), None)
                               for op in ops])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    for op, want in zip(ops, theirs):
        got = ours[f"y_{op}"]
        assert got.dtype == want.dtype, op
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=op)
