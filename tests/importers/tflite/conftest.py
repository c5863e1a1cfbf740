"""Fixtures of the TFLite importer tests: ``tflite_model(builder)`` gives the path of a converted model,
built once and cached on disk for every worker and run (harness.py says where and how)."""

from __future__ import annotations

import pytest

from tests.importers.tflite.harness import cached_model


@pytest.fixture(scope="session")
def tflite_model():
    return cached_model
