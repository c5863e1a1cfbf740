"""Random arrays and the comparison of an op's reference result with onnxruntime's, for the conv, linear,
normalization, pooling and shape ops tests."""

from __future__ import annotations

import numpy as np

from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime.interpreter import run
from tests.support.ops_reference import assert_same, onnx_model
from tests.support.requirements import need_module

ort = need_module("onnxruntime")


RNG = np.random.default_rng(1)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def against_ort(op_type: str, inputs: dict, attrs: dict | None = None, *, opset: int = 22,
                constants: dict | None = None, outputs: int = 1) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(pegasus outputs, onnxruntime outputs) of one ONNX node; ``constants`` become initializers."""
    constants = constants or {}
    model = onnx_model(op_type, {**inputs, **constants}, attrs, opset=opset, constants=constants, outputs=outputs)
    feeds = {n: v for n, v in inputs.items() if v is not None}
    results = run(import_onnx(model), feeds)
    ours = [results[f"y{i}"] for i in range(outputs)]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, theirs


def assert_all_same(pair: tuple[list[np.ndarray], list[np.ndarray]], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    for ours, theirs in zip(*pair):
        assert_same(ours, theirs, rtol=rtol, atol=atol)
