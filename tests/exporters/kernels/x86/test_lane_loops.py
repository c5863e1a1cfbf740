"""Element-wise layers in explicit vectors on hosted targets (binary.py ``lane_loop``: broadcasting arithmetic,
unary ops, BatchNormalization, Concat): every layer against onnxruntime over shapes whose contiguous innermost
runs hold whole vectors and a remainder, operands read contiguously or repeated (stride 0), runs shorter than a
vector, NaNs through Max/Min, float64, and a chain whose outputs the planner may write over their inputs.
The vector width is the host's: whatever it is, these runs have a remainder (prime lengths).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(29)
F32, F64 = np.float32, np.float64


def _model(nodes, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray], output: str):
    kind = {F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE}
    graph = helper.make_graph(
        nodes, "lanes", [helper.make_tensor_value_info(n, kind[v.dtype.type], v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info(output, kind[next(iter(inputs.values())).dtype.type], None)],
        [numpy_helper.from_array(v, n) for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _binary(op: str, a: np.ndarray, b: np.ndarray):
    return _model([helper.make_node(op, ["a", "b"], ["y"])], {"a": a, "b": b}, {}, "y"), {"a": a, "b": b}


def _unary(op: str, x: np.ndarray, **attrs):
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, {}, "y"), {"x": x}


def _clip(x: np.ndarray):
    bounds = {"lo": np.array(-1, x.dtype), "hi": np.array(0.5, x.dtype)}
    return _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": x}, bounds, "y"), {"x": x}


def _floats(*shape, dtype=F32) -> np.ndarray:
    return RNG.uniform(-3, 3, shape).astype(dtype)


def _with_nans(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.reshape(-1)[::7] = np.nan
    return x


def _batch_norm(x: np.ndarray):
    c = x.shape[1]
    constants = {name: _floats(c, dtype=x.dtype) for name in ("scale", "bias", "mean")}
    constants["var"] = RNG.uniform(0.5, 2, c).astype(x.dtype)
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3)
    return _model([node], {"x": x}, constants, "y"), {"x": x}


def _concat(axis: int, *xs: np.ndarray):
    names = [f"x{i}" for i in range(len(xs))]
    return _model([helper.make_node("Concat", names, ["y"], axis=axis)], dict(zip(names, xs)), {}, "y"), \
        dict(zip(names, xs))


def _chain(x: np.ndarray):
    """Relu, then Mul by a per-channel constant, then Sigmoid: each output may take its input's bytes."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "s"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["y"])]
    return _model(nodes, {"x": x}, {"s": _floats(x.shape[1], 1, 1)}, "y"), {"x": x}


CASES = {
    "add-equal-prime": lambda: _binary("Add", _floats(3, 37), _floats(3, 37)),
    "mul-per-channel-rows-of-53": lambda: _binary("Mul", _floats(1, 6, 53), _floats(6, 1)),
    "sub-scalar-first": lambda: _binary("Sub", _floats(1), _floats(2, 43)),
    "div-row-broadcast": lambda: _binary("Div", _floats(5, 29), RNG.uniform(0.5, 2, 29).astype(F32)),
    "max-nans": lambda: _binary("Max", _with_nans(_floats(4, 31)), _with_nans(_floats(4, 31))[::-1].copy()),
    "min-nans-per-channel": lambda: _binary("Min", _with_nans(_floats(1, 3, 41)), _floats(3, 1)),
    "prelu-per-channel": lambda: _binary("PRelu", _floats(1, 4, 5, 7), _floats(4, 1, 1)),
    "add-f64": lambda: _binary("Add", _floats(2, 19, dtype=F64), _floats(19, dtype=F64)),
    "add-short-rows": lambda: _binary("Add", _floats(9, 3), _floats(9, 1)),
    "relu-prime": lambda: _unary("Relu", _floats(1, 3, 7, 11)),
    "sigmoid": lambda: _unary("Sigmoid", _floats(2, 67)),
    "exp-f64": lambda: _unary("Exp", _floats(3, 23, dtype=F64)),
    "clip": lambda: _clip(_floats(83)),
    "abs-short": lambda: _unary("Abs", _floats(5)),
    "batchnorm-rows-of-43": lambda: _batch_norm(_floats(2, 3, 43)),
    "batchnorm-f64-spatial": lambda: _batch_norm(_floats(1, 4, 5, 7, dtype=F64)),
    "concat-channels": lambda: _concat(1, _floats(1, 3, 5, 7), _floats(1, 2, 5, 7)),
    "concat-last-axis": lambda: _concat(2, _floats(2, 3, 13), _floats(2, 3, 3)),
    "concat-f64": lambda: _concat(0, _floats(3, 11, dtype=F64), _floats(2, 11, dtype=F64)),
    "chain-in-place": lambda: _chain(_floats(1, 5, 9, 9)),
}


@pytest.mark.parametrize("key", list(CASES))
def test_matches_onnxruntime(key, tmp_path):
    model, feeds = CASES[key]()
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph = import_onnx(model, name="lanes")
    actual = run_bundle_host(graph, feeds, workdir=tmp_path)[graph.outputs[0]]
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
