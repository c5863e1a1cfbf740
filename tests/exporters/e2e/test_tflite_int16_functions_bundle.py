"""int16 LOGISTIC, TANH (QSigmoid16) and LEAKY_RELU (QLeakyRelu) bundles byte-equal to TFLite's reference
kernels (BUILTIN_REF) on all 65,536 int16 inputs: on the host, and on a Cortex-M7 under QEMU."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from tests.support import toolchains
from tests.support.tflite_models import int16x8_sigmoid_tanh, invoke, reference_interpreter

pytestmark = pytest.mark.xdist_group("tflite")


def _every_input(lowered_models):
    path, graph = lowered_models(int16x8_sigmoid_tanh)
    assert {"QSigmoid16", "QLeakyRelu"} <= {node.op for node in graph.nodes}
    every = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16).reshape(1, 65536)
    return graph, {graph.inputs[0]: every}, invoke(reference_interpreter(path), [every])


def test_int16_functions_bundle_equals_tflite_on_host(lowered_models, tmp_path):
    from tests.support.host_runner import load_bundle

    graph, feeds, tflite = _every_input(lowered_models)
    bundle = load_bundle(graph, feeds, tmp_path)
    mutable, plan = bundle.buffers[1], bundle.result.plan
    loc = plan.locations[bundle.result.graph.inputs[0]]
    mutable[loc.offset:loc.offset + loc.size] = np.frombuffer(feeds[graph.inputs[0]].tobytes(), dtype=np.uint8)
    assert bundle() == 0
    got = bundle.outputs()
    for name in graph.outputs:
        np.testing.assert_array_equal(got[name], tflite[name], err_msg=name)


def test_int16_functions_bundle_equals_tflite_on_cortex_m7(lowered_models, tmp_path):
    graph, feeds, tflite = _every_input(lowered_models)
    export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", "cortex-m7", feeds, spec)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], tflite[name], err_msg=name)
