"""How weights are stored in a TFLite file does not change the imported float model: float16 weights
(DEQUANTIZE), dynamic-range int8 weights (dequantized, with one note), and sparse weights (DENSIFY and a
FULLY_CONNECTED reading a sparse tensor itself) all become float32 constants that compute what the TFLite
interpreter computes."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.importers.tflite.loader import import_tflite
from pegasus.importers.tflite.reader import read_tflite
from tests.conftest import run_cli
from tests.importers.tflite import models
from tests.importers.tflite.flatbuffer import with_float_weights
from tests.importers.tflite.harness import check_against_interpreter, interpreter, random_feeds, run_interpreter

pytestmark = pytest.mark.xdist_group("tflite")


def test_float16_weights(tflite_model):
    path = tflite_model(models.float16_weights)
    model = read_tflite(path)
    halves = {t.name for t in model.tensors if t.dtype == "float16" and t.data is not None}
    assert halves and {n.inputs[0] for n in model.nodes if n.op_type == "DEQUANTIZE"} == halves
    check_against_interpreter(path)
    graph = import_tflite(path)
    assert "Cast" not in {n.op for n in graph.nodes}   # the float16 -> float32 casts folded at import
    assert "float16" not in {c.data.dtype.name for c in graph.constants()}


def _float_reference(path, tmp_path):
    data, changed = with_float_weights(path.read_bytes())
    reference = tmp_path / f"{path.stem}_float_weights.tflite"
    reference.write_bytes(data)
    return reference, changed


def test_dynamic_range_weights_dequantized(tflite_model, tmp_path):
    """Compared with TFLite running the same file with its int8 weights turned into float32 by NumPy: TFLite's
    own hybrid kernels quantize the activations at run time, which the float import does not."""
    path = tflite_model(models.dynamic_range)
    reference, changed = _float_reference(path, tmp_path)
    int8 = [t for t in read_tflite(path).tensors if t.dtype == "int8" and t.data is not None]
    assert changed == len(int8) == 3
    notes: list[str] = []
    check_against_interpreter(path, reference=reference, notes=notes)
    assert notes == [f"dynamic-range model: {changed} int8 weight tensors dequantized to float"]


def test_dynamic_range_near_hybrid_kernels(tflite_model):
    """TFLite's hybrid kernels (activations quantized to int8 at run time) stay within 5% of the output range
    of the dequantized float model."""
    path = tflite_model(models.dynamic_range)
    graph = import_tflite(path)
    interp = interpreter(path)
    from pegasus.runtime.interpreter import run

    feeds = random_feeds(interp, np.random.default_rng(0))
    (hybrid,) = run_interpreter(interp, feeds)
    ours = run(graph, dict(zip(graph.inputs, feeds)))[graph.outputs[0]]
    assert np.abs(ours - hybrid).max() < 0.05 * np.abs(ours).max()


def test_dynamic_range_note_on_cli(tflite_model, tmp_path):
    result = run_cli("import", "tflite", "--model", tflite_model(models.dynamic_range),
                     "--output-model", tmp_path / "m.json", "--output-data", tmp_path / "m.data")
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["dynamic-range model: 3 int8 weight tensors dequantized to float"]


def test_sparse_weights(tflite_model):
    """A CSR weight behind DENSIFY and a 1x4-block one read directly by FULLY_CONNECTED; the densified
    constant equals what TFLite's DENSIFY computes."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path = tflite_model(models.sparse_weights)
    model = read_tflite(path)
    sparse = {t.name: t for t in model.tensors if t.sparse}
    assert sorted(t.sparsity.block_map for t in sparse.values()) == [(), (1,)]
    densify = [n for n in model.nodes if n.op_type == "DENSIFY"]
    direct = [n for n in model.nodes if n.op_type == "FULLY_CONNECTED" and n.inputs[1] in sparse]
    assert len(densify) == 1 and densify[0].inputs[0] in sparse and len(direct) == 1
    check_against_interpreter(path)

    graph = import_tflite(path)
    interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    run_interpreter(interp, random_feeds(interp, np.random.default_rng(0)))
    dense_name = densify[0].outputs[0]
    index = next(t.index for t in model.tensors if t.name == dense_name)
    reader = next(n for n in model.nodes if dense_name in n.inputs)
    gemm = next(n for n in graph.nodes if n.name == reader.name)
    weights = graph.tensors[gemm.inputs[1]].data
    np.testing.assert_array_equal(weights, interp.get_tensor(index))
    assert np.count_nonzero(weights) == sparse[densify[0].inputs[0]].data.size
