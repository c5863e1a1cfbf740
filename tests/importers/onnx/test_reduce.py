"""Means over the spatial axes as torch exports them (``x.mean((2, 3), keepdim=True)`` in squeeze-and-excitation
blocks, ``x.mean((2, 3))`` before a classifier; tf2onnx's ReduceMean over H, W of NHWC), quantized: a global
average pool in integers, near onnxruntime, its host bundle equal to the integer reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.assign import build_table
from pegasus.quantizers.calibrate import calibrate
from pegasus.quantizers.schemes import Scheme
from pegasus.runtime import interpreter
from tests.importers.onnx.harness import make_model, onnxruntime_outputs
from tests.support.host_runner import run_bundle_host


@pytest.mark.parametrize("axes, keepdims, shape", [((2, 3), 1, (1, 6, 7, 5)), ((2, 3), 0, (1, 6, 7, 5)),
                                                   ((1, 2), 1, (1, 7, 5, 6)), ((-1,), 0, (1, 4, 9))])
@pytest.mark.parametrize("scheme", [("asymmetric_affine", "uint8"), ("perchannel_symmetric_affine", "int8")])
def test_spatial_mean_quantized(tmp_path, axes, keepdims, shape, scheme):
    axes_init = numpy_helper.from_array(np.array(axes, np.int64), "axes")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/se/Relu"),
             helper.make_node("ReduceMean", ["r", "axes"], ["y"], keepdims=keepdims, name="/se/ReduceMean")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], ["y"],
                       [axes_init], 18)
    graph = import_onnx(model)
    rng = np.random.default_rng(6)
    samples = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    ranges = calibrate(graph, samples, total=4, batch_size=4, signed=scheme[1] == "int8", progress=False).ranges
    table = build_table(graph, ranges, Scheme.of(*scheme), algorithm="normal", digest=serialize.graph_digest(graph))
    lowered = lower_to_integer(graph, table)
    assert not lowered.float_layers, lowered.float_layers
    expected = interpreter.run(lowered.graph, samples[0])
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    (reference,) = onnxruntime_outputs(tmp_path / "model.onnx", samples[0])
    steps = table.get("y").scale[0] + table.get("r").scale[0]
    np.testing.assert_allclose(expected["y"], reference, atol=steps)
    actual = run_bundle_host(lowered.graph, samples[0], workdir=tmp_path)
    np.testing.assert_array_equal(actual["y"], expected["y"])
