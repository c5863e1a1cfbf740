"""Fixtures of the Keras importer tests: ``keras_model(builder, library)`` gives a model built once (cached on
disk, harness.py says where and how) with its files and the framework's outputs."""

from __future__ import annotations

import pytest

from tests.importers.keras.harness import cached_model


@pytest.fixture(scope="session")
def keras_model():
    return cached_model
