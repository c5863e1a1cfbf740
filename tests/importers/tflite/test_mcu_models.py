"""The float architectures people ship to microcontrollers (DS-CNN keyword spotting, MobileNetV1 0.25 at
96x96, ResNet-8 for CIFAR-10, the MLPerf Tiny autoencoder; random weights, BatchNorms folded by the
converter) import and match the TFLite interpreter at the output and at every tensor both hold; their host
bundles match it too."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.importers.tflite.loader import import_tflite
from pegasus.importers.tflite.reader import read_tflite
from pegasus.runtime.interpreter import run
from tests.importers.tflite.harness import assert_matches, interpreter, random_feeds, run_interpreter
from tests.importers.tflite.models import MCU_MODELS
from tests.support.host_runner import run_bundle_host

pytestmark = pytest.mark.xdist_group("tflite")


@pytest.mark.parametrize("builder", MCU_MODELS, ids=lambda b: b.__name__)
def test_matches_interpreter_at_every_tensor(tflite_model, builder):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path = tflite_model(builder)
    graph = import_tflite(path)
    index = {t.name: t.index for t in read_tflite(path).tensors}
    # without the XNNPACK delegate, so that every intermediate tensor is kept in TFLite's memory
    interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = random_feeds(interp, rng)
        outputs = run_interpreter(interp, feeds)
        ours = run(graph, dict(zip(graph.inputs, feeds)), keep_all=True)
        assert_matches(outputs, [ours[n] for n in graph.outputs], graph.outputs, 1e-4, 1e-5)
        shared = [n for n in ours if n in index and not graph.tensors[n].is_constant and n not in graph.inputs]
        assert len(shared) >= len(read_tflite(path).nodes) // 2   # most TFLite op outputs keep their names
        assert_matches([interp.get_tensor(index[n]) for n in shared], [ours[n] for n in shared], shared, 1e-4, 1e-5)


def test_bundles_match_interpreter(tflite_model, tmp_path):
    for builder in MCU_MODELS:
        path = tflite_model(builder)
        graph = import_tflite(path)
        interp = interpreter(path)
        feeds = random_feeds(interp, np.random.default_rng(1))
        folder = tmp_path / builder.__name__
        folder.mkdir()
        got = run_bundle_host(graph, dict(zip(graph.inputs, feeds)), workdir=folder)
        assert_matches(run_interpreter(interp, feeds), [got[n] for n in graph.outputs], graph.outputs, 1e-4, 1e-4)
