"""Fixtures of the exporter tests: ``lowered_models(builder)`` gives a TFLite model (tests/support/tflite_models.py
builders) imported through the CLI and lowered to its integer graph, once per module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def lowered_models(tmp_path_factory):
    """builder -> (.tflite path, the lowered integer graph), imported through the CLI once."""
    from pegasus.commands.quantized_model import lower_model
    from pegasus.ir import serialize
    from tests.importers.tflite.harness import cached_model, import_cli

    done = {}

    def get(builder):
        if builder not in done:
            path = cached_model(builder)
            json_path, data_path, table_path = import_cli(path, tmp_path_factory.mktemp(builder.__name__))
            graph = serialize.load(json_path, data_path)
            lowered = lower_model(graph, str(table_path), show=False)
            assert lowered.float_layers == [], lowered.float_layers
            done[builder] = (path, lowered.graph)
        return done[builder]
    return get
