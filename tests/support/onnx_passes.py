"""ONNX models for the import-pass tests and their check against onnxruntime after the passes ran."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter


def make_model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=[numpy_helper.from_array(v, k)
                                                                        for k, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def onnxruntime_outputs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check_against_onnxruntime(model, feeds, **import_args):
    graph = import_onnx(model, **import_args)
    ours = interpreter.run(graph, feeds)
    for output, theirs in zip(model.graph.output, onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(ours[output.name], theirs, rtol=1e-5, atol=1e-5)
    return graph
