"""Fixtures of the PyTorch importer tests: ``torch_model(name)`` gives the folder of a saved model, built once
and cached on disk (harness.py says where and how)."""

from __future__ import annotations

import pytest

from tests.importers.pytorch.harness import saved_model


@pytest.fixture(scope="session")
def torch_model():
    return saved_model
