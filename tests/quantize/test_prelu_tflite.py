"""A PReLU model TFLite quantized to full int8 (tf.keras PReLU after a Conv, its slope per channel; converted with a
representative dataset): imported by pegasus, its PRELU layers run as QPRelu under ``rounding: tflite`` and
``inference --dtype quantized`` is byte for byte what TFLite's reference kernels (BUILTIN_REF) output, on random
int8 inputs over the whole range. Before QPRelu the PRELU layers ran in float: 87 of the 2,880 outputs of these
40 samples differed (up to 2 LSB, in 30 samples)."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.commands.quantized_model import lower_model
from pegasus.importers.tflite.reader import read_tflite
from pegasus.ir import serialize
from pegasus.quantizers.quantize_file import load_table
from tests.importers.tflite.harness import cached_model, import_cli
from tests.support.prelu_models import int8_prelu
from tests.support.tflite_models import compare_with_reference

pytestmark = [pytest.mark.framework, pytest.mark.xdist_group("tflite")]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(the .tflite file, m.json, m.data, m.quantize) of ``int8_prelu``, imported through the CLI."""
    path = cached_model(int8_prelu)
    return (path, *import_cli(path, tmp_path_factory.mktemp("int8_prelu")))


def test_prelu_bit_exact_with_reference_kernels(imported):
    path, json_path, data_path, table_path = imported
    lowered = lower_model(serialize.load(json_path, data_path), str(table_path), show=False)
    ops = [node.op for node in lowered.graph.nodes]
    assert ops.count("QPRelu") == 2 and "PRelu" not in ops, ops
    worst, differing = compare_with_reference(imported, samples=40, seed=36)   # asserts no float layer too
    assert (worst, differing) == (0, 0)


def test_slope_keeps_the_files_grid(imported):
    """The table gives each PRELU's slope its own int8 grid from the file (per tensor), so the lowering quantizes
    the dequantized slope back onto exactly the file's integers."""
    path, json_path, data_path, table_path = imported
    graph = serialize.load(json_path, data_path)
    table = load_table(str(table_path))
    model = read_tflite(path)
    files = {t.name: t for t in model.tensors}
    slopes = [files[node.inputs[1]] for node in model.nodes if node.op_type == "PRELU"]
    prelus = [node for node in graph.nodes if node.op == "PRelu"]
    assert len(slopes) == len(prelus) == 2
    for node, slope in zip(prelus, slopes):
        entry = table.get(node.inputs[1])
        assert entry is not None and not entry.per_channel and entry.qtype == "i8"
        assert np.float32(entry.scale[0]) == slope.scale[0] and entry.zero_point[0] == int(slope.zero_point[0])
        levels = np.rint(graph.value_of(node.inputs[1]) / entry.scale[0]) + entry.zero_point[0]
        np.testing.assert_array_equal(levels.reshape(-1), slope.data.reshape(-1))
