"""TopK as classifiers and detectors export it (torch.topk: K as an initializer, values and int64 indices), against
onnxruntime, and its host bundle against the reference (ties, NaN, both orders, every axis)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter
from tests.importers.onnx.harness import check, make_model
from tests.support.host_runner import run_bundle_host


def _model(k: int, axis: int, largest: int, shape: tuple[int, ...], dtype=TensorProto.FLOAT):
    node = helper.make_node("TopK", ["scores", "K"], ["values", "indices"], axis=axis, largest=largest, sorted=1,
                            name="/TopK")
    inputs = [helper.make_tensor_value_info("scores", dtype, ["batch_size", *shape[1:]])]
    return make_model([node], inputs, ["values", "indices"], [numpy_helper.from_array(np.array([k], np.int64), "K")],
                      13)


def _scores(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Rounded to a few levels, so that equal values (ties broken by the lower index) are common."""
    return np.round(np.random.default_rng(seed).standard_normal(shape) * 2).astype(np.float32)


@pytest.mark.parametrize("k, axis, largest, shape", [(5, -1, 1, (1, 17)), (3, 1, 0, (1, 6, 4)), (2, -2, 1, (1, 5, 3)),
                                                     (4, 2, 1, (1, 3, 9, 2))])
def test_topk_against_onnxruntime_and_bundle(tmp_path, k, axis, largest, shape):
    model = _model(k, axis, largest, shape)
    scores = _scores(shape, k)
    check(model, tmp_path, {"scores": scores})
    graph = import_onnx(model)
    scores.reshape(-1)[[1, 4]] = np.nan   # NaN sorts after every number (the reference's order)
    expected = interpreter.run(graph, {"scores": scores})
    actual = run_bundle_host(graph, {"scores": scores}, workdir=tmp_path)
    for name, want in expected.items():
        np.testing.assert_array_equal(actual[name], want, err_msg=name)


@pytest.mark.parametrize("scheme", [("asymmetric_affine", "uint8"), ("perchannel_symmetric_affine", "int8")])
def test_quantized_topk_selects_levels(tmp_path, scheme):
    """Quantized, TopK runs on the input's levels (their order is the values' order): the values are the input's
    own levels, the indices onnxruntime's wherever the quantized scores do not tie; the bundle is the reference."""
    from pegasus.ir import serialize
    from pegasus.quantized.lower import lower_to_integer
    from pegasus.quantizers.assign import build_table
    from pegasus.quantizers.calibrate import calibrate
    from pegasus.quantizers.schemes import Scheme

    model = _model(5, -1, 1, (1, 40))
    graph = import_onnx(model)
    rng = np.random.default_rng(8)
    samples = [{"scores": (np.arange(40, dtype=np.float32)[rng.permutation(40)] / 10).reshape(1, 40)} for _ in range(3)]
    ranges = calibrate(graph, samples, total=3, batch_size=3, signed=scheme[1] == "int8", progress=False).ranges
    table = build_table(graph, ranges, Scheme.of(*scheme), algorithm="normal", digest=serialize.graph_digest(graph))
    lowered = lower_to_integer(graph, table)
    assert not lowered.float_layers, lowered.float_layers
    expected = interpreter.run(lowered.graph, samples[0])
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    from tests.importers.onnx.harness import onnxruntime_outputs

    values, indices = onnxruntime_outputs(tmp_path / "model.onnx", samples[0])
    np.testing.assert_array_equal(expected["indices"], indices)
    np.testing.assert_allclose(expected["values"], values, atol=table.get("scores").scale[0])
    actual = run_bundle_host(lowered.graph, samples[0], workdir=tmp_path)
    for name, want in expected.items():
        np.testing.assert_array_equal(actual[name], want, err_msg=name)
