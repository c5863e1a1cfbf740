"""The models of models.py, each saved as TorchScript (traced and scripted) and as a torch.export program,
import through ``pegasus import pytorch`` and match torch's own outputs; layers are named after module paths."""

from __future__ import annotations

import numpy as np
import pytest

from tests.importers.pytorch.harness import FORMATS, import_and_run, reference
from tests.importers.pytorch.models import MODELS

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
