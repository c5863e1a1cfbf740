"""The ops tests' checks against onnxruntime: a one-node ONNX model, running it on both the reference
interpreter and onnxruntime, comparing outputs, and checking shape inference."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.tensor import TensorType
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime.interpreter import run
from tests.support.requirements import need_module

ort = need_module("onnxruntime")


def onnx_model(op_type: str, inputs: dict[str, np.ndarray | None], attrs: dict | None = None, *,
               opset: int = 13, constants: dict[str, np.ndarray] | None = None,
               outputs: int = 1) -> onnx.ModelProto:
    """A one-node model; ``inputs`` are graph inputs (None = omitted), ``constants`` are initializers."""
    constants = constants or {}
    names = [name if value is not None or name in constants else "" for name, value in inputs.items()]
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                    for n, v in inputs.items() if v is not None and n not in constants]
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = helper.make_graph([node], "t", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outs],
                              initializer=[numpy_helper.from_array(v, n) for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def onnx_vs_ort(op_type: str, inputs: dict[str, np.ndarray | None], attrs: dict | None = None, *,
                opset: int = 13, constants: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pegasus result, onnxruntime result) of one ONNX node; ``constants`` become initializers."""
    constants = constants or {}
    model = onnx_model(op_type, {**inputs, **constants}, attrs, opset=opset, constants=constants)
    feeds = {n: v for n, v in inputs.items() if v is not None}
    ours = run(import_onnx(model), feeds)["y0"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)[0]
    return ours, theirs


def assert_same(ours: np.ndarray, theirs: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.dtype.kind == "f":
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(ours, theirs)


def check_infer(op: str, attrs: dict, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """``infer`` gives exactly the shapes and dtypes ``reference`` produces."""
    opdef = get_op(op)
    a = make_attrs(opdef, **attrs)
    types = opdef.infer(a, [None if x is None else TensorType.of(x) for x in inputs])
    with np.errstate(all="ignore"):
        results = opdef.reference(a, inputs)
    assert [TensorType.of(np.asarray(r)) for r in results] == types, op
    return results
