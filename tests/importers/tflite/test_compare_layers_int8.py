"""``pegasus run --compare-layers`` on a pre-quantized int8 TFLite model on Cortex-M CPUs with the DSP extension,
whose bundles re-lay the weights for their kernels (16-bit pairs, halfword rows, dense layers as 1x1
convolutions): the reference interpreter runs the same lowered graph with the registry's weight layouts, so
every layer is compared (before, the interpreter read the re-laid weights and the command failed)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.importers.tflite.harness import import_cli
from tests.support.tflite_models import full_range_feeds, int8_cnn, reference_interpreter

pytestmark = pytest.mark.xdist_group("tflite")


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7"])
def test_every_layer_compared_and_matching(tflite_model, cpu, tmp_path):
    path = tflite_model(int8_cnn)
    model, data, table = import_cli(path, tmp_path)
    x = tmp_path / "x.npy"
    np.save(x, full_range_feeds(reference_interpreter(path), np.random.default_rng(2))[0])
    result = run_cli("run", "--model", model, "--model-data", data, "--dtype", "quantized", "--model-quantize",
                     table, "--target", "arm", "--mcpu", cpu, "--input", x, "--compare-layers")
    assert result.code == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("  ok  ") or line.startswith("  DIFF")]
    assert len(rows) >= 6 and all(row.startswith("  ok  ") for row in rows), result.stdout
    assert "every layer matches" in result.stdout
