"""Fixtures of the TFLite importer tests: ``tflite_model(builder)`` gives the path of a converted model,
built once and cached on disk for every worker and run (harness.py says where and how); ``imported(builder)``
that model imported once per module through the CLI."""

from __future__ import annotations

import pytest

from tests.importers.tflite.harness import cached_model, import_cli


@pytest.fixture(scope="session")
def tflite_model():
    return cached_model


@pytest.fixture(scope="module")
def imported(tflite_model, tmp_path_factory):
    """builder -> (the .tflite file, m.json, m.data, m.quantize), imported once through the CLI."""
    done = {}

    def get(builder):
        if builder not in done:
            path = tflite_model(builder)
            done[builder] = (path, *import_cli(path, tmp_path_factory.mktemp(builder.__name__)))
        return done[builder]
    return get
