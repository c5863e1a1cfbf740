"""The models of models.py, each saved as TorchScript (traced and scripted) and as a torch.export program,
import through ``pegasus import pytorch`` and match torch's own outputs; layers are named after module paths."""

from __future__ import annotations

import numpy as np
import pytest

from tests.importers.pytorch.harness import FORMATS, decomposed_program, import_and_run, reference
from tests.importers.pytorch.models import ISSUE_MODELS, MODELS

pytestmark = pytest.mark.xdist_group("pytorch")


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name", list(MODELS))
def test_matches_torch(torch_model, tmp_path, name, fmt):
    folder = torch_model(name)
    inputs, expected = reference(folder)
    graph, outputs = import_and_run(folder / FORMATS[fmt], tmp_path / name, inputs)
    assert len(outputs) == len(expected)
    for index, (got, want) in enumerate(zip(outputs, expected)):
        assert got.shape == want.shape, f"output {index}"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} {fmt} output {index}")



@pytest.mark.parametrize("name", ISSUE_MODELS + ["activation_zoo", "shape_zoo"])
def test_core_aten_program_matches_torch(torch_model, tmp_path, name):
    """A program saved after run_decompositions(): convolution, addmm, _native_batch_norm_legit_no_training,
    max_pool2d_with_indices, a bidirectional LSTM unrolled into matmuls and flips, selu as a scaled elu..."""
    inputs, expected = reference(torch_model(name))
    _, outputs = import_and_run(decomposed_program(name), tmp_path / name, inputs)
    for index, (got, want) in enumerate(zip(outputs, expected)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} output {index}")


#: layers named after module paths, whatever the format: torch.nn modules by their path, ops in a user
#: module's forward by the path and the op, ops at the top by the op
NAMES = {"resnet18": {"conv1": "Conv", "layer1.0.conv2": "Conv", "layer1.0/add": "Add", "layer1.0.relu_1": "Relu",
                      "layer2.0.downsample.0": "Conv", "avgpool": "GlobalAveragePool", "flatten": "Reshape",
                      "fc": "Gemm"},
         "mobilenet_v2": {"features.0.0": "Conv", "features.0.2": "Clip", "features.1.conv.1": "Conv",
                          "features.3/add": "Add", "classifier.1": "Gemm"},
         "lstm": {"rnn": "LSTM", "rnn/l1": "LSTM", "head": "Add"}}


@pytest.mark.parametrize("name", list(NAMES))
def test_layers_are_named_after_module_paths(torch_model, tmp_path, name):
    folder = torch_model(name)
    inputs, _ = reference(folder)
    for fmt in FORMATS:
        graph, _ = import_and_run(folder / FORMATS[fmt], tmp_path / fmt, inputs)
        ops = {node.name: node.op for node in graph.nodes}
        assert {n: ops.get(n) for n in NAMES[name]} == NAMES[name], fmt
