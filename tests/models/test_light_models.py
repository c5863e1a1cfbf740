"""The nine light models shipped in the onnx wheel: import, run the float reference, and reproduce
their recorded ``*_output_0.pb`` at onnx's own tolerances (inputs made as onnx's runner makes them)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.case.model import collect_testcases
from onnx.backend.test.runner import Runner

from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
CASES = [case for case in collect_testcases() if case.kind == "real"]


@pytest.mark.parametrize("case", CASES, ids=[case.model_name for case in CASES])
def test_light_model_reproduces_recorded_output(case):
    path = os.path.join(LIGHT_DIR, f"light_{case.model_name}.onnx")
    model = onnx.load(path)
    graph = import_onnx(model, name=case.model_name)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {vi.name: Runner.generate_dummy_data(vi, seed=0, name=case.model_name, random=False)
             for vi in model.graph.input if vi.name not in initializers}
    results = interpreter.run(graph, feeds)
    for index, output in enumerate(model.graph.output):
        expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT_DIR,
                                                                        f"light_{case.model_name}_output_{index}.pb")))
        np.testing.assert_allclose(results[output.name], expected, rtol=case.rtol, atol=case.atol)
