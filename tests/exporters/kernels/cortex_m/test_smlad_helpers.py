"""The SMLAD helper functions a bundle's integer layers share (integer_smlad._helper): one per block, groups of
four taps, positions and weight layout — and, for rows of bytes, per depth. Two channels-first convolutions of
byte weights with as many groups but other depths (a 3x3 convolution over 3 channels: 27 taps; a 1x1 over 24:
24 taps; 6 groups each) once shared one helper, the second reading its weight rows 27 bytes apart: 403 of 1,568
outputs wrong on Cortex-M7 in a default export of this ONNX-layout model. Checked bit for bit against the
reference interpreter on Cortex-M7 and M4, with float and integer I/O."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.quantized.lower import expose_integer_io, lower_to_integer
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.integer_cases import output_spec
from tests.support.quantized_bundles import quantize

RNG = np.random.default_rng(1)


def _model() -> onnx.ModelProto:
    """x (1, 3, 16, 16) -> Conv 3x3 -> 24 -> Relu -> Conv 1x1 -> 8 -> Relu."""
    tensors = {"w1": RNG.normal(0, 0.3, (24, 3, 3, 3)), "b1": np.full(24, 0.1), "w2": RNG.normal(0, 0.3, (8, 24, 1, 1)),
               "b2": np.full(8, 0.1)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]), helper.make_node("Relu", ["c2"], ["y"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in tensors.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def lowered():
    graph = import_onnx(_model(), name="two")
    samples = [{"x": RNG.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    return lower_to_integer(graph, quantize(graph, samples, "perchannel_symmetric_affine", "int8")), samples[0]


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
@pytest.mark.parametrize("integer_io", [False, True], ids=["float-io", "int-io"])
def test_layers_of_equal_groups_other_depths(lowered, cpu, integer_io, tmp_path):
    result, sample = lowered
    graph = expose_integer_io(result) if integer_io else result.graph
    every = interpreter.run(result.graph, sample, keep_all=True)
    feeds = {name: every[name] for name in graph.inputs}
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    got = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, output_spec(graph))
    for name, want in interpreter.run(graph, feeds).items():
        assert got[name].tobytes() == want.tobytes(), f"{name}: {np.count_nonzero(got[name] != want)} values differ"
