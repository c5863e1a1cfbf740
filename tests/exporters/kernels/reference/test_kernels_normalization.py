"""Normalization emitters (BatchNormalization inference, InstanceNormalization, LayerNormalization with
its optional statistics outputs, LRN) in a host bundle against the reference interpreter, and
LayerNormalization/InstanceNormalization/LRN against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(5)


def _floats(*shape, scale=1.0, offset=0.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


def _batch_norm_params(*shape) -> list[np.ndarray]:
    return [_floats(*shape), _floats(*shape), _floats(*shape), RNG.uniform(0.1, 2.0, shape).astype(np.float32)]


X4 = _floats(2, 3, 5, 7, scale=2.0, offset=1.0)

CASES = [
    Case("BN-4d", "BatchNormalization", [X4, *_batch_norm_params(3)]),
    Case("BN-4d-constant", "BatchNormalization", [X4, *_batch_norm_params(3)], {"epsilon": 1e-3},
         constant=(1, 2, 3, 4)),
    Case("BN-2d", "BatchNormalization", [_floats(4, 6), *_batch_norm_params(6)]),
    Case("BN-3d", "BatchNormalization", [_floats(2, 4, 9), *_batch_norm_params(4)]),
    Case("BN-params-c-h", "BatchNormalization", [X4, *_batch_norm_params(3, 5)]),
    Case("BN-f16", "BatchNormalization", [X4.astype(np.float16), *_batch_norm_params(3)], rtol=2e-3, atol=2e-3),
    Case("IN-3d", "InstanceNormalization", [_floats(2, 3, 11), _floats(3), _floats(3)]),
    Case("IN-4d", "InstanceNormalization", [X4, _floats(3), _floats(3)], {"epsilon": 1e-2}),
    Case("IN-5d", "InstanceNormalization", [_floats(1, 2, 3, 4, 5), _floats(2), _floats(2)]),
    Case("IN-large-offset", "InstanceNormalization", [_floats(1, 3, 48, 48, scale=3.0, offset=20.0), _floats(3),
                                                     _floats(3)]),
    Case("LN-last", "LayerNormalization", [X4, _floats(7), _floats(7)]),
    Case("LN-axis1", "LayerNormalization", [X4, _floats(3, 5, 7), _floats(3, 5, 7)], {"axis": 1}),
    Case("LN-axis0", "LayerNormalization", [X4, _floats(2, 3, 5, 7)], {"axis": 0, "epsilon": 1e-3}),
    Case("LN-axis2-broadcast", "LayerNormalization", [X4, _floats(1, 7), _floats(5, 1)], {"axis": 2}),
    Case("LN-no-bias", "LayerNormalization", [_floats(4, 768, offset=3.0), _floats(768)], {"axis": -1}),
    Case("LN-outer-broadcast", "LayerNormalization", [X4, _floats(3, 1, 7), _floats(7)], {"axis": 3}),
    Case("LN-y-only", "LayerNormalization", [X4, _floats(7), _floats(7)], outputs=(True, False, False)),
    Case("LN-y-and-inv-std", "LayerNormalization", [X4, _floats(7)], outputs=(True, False, True)),
    Case("LRN-size1", "LRN", [X4], {"size": 1}),
    Case("LRN-size2", "LRN", [X4], {"size": 2, "alpha": 0.1, "beta": 0.5, "bias": 2.0}),
    Case("LRN-size3", "LRN", [X4], {"size": 3, "alpha": 0.01, "beta": 0.75, "bias": 1.0}),
    Case("LRN-size5-wider-than-C", "LRN", [_floats(1, 4, 6, 6)], {"size": 5, "alpha": 0.2, "beta": 1.5}),
    Case("LRN-3d", "LRN", [_floats(2, 8, 13)], {"size": 4, "alpha": 1e-3}),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("normalization"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_training_mode_batch_norm_is_refused(tmp_path):
    case = Case("BN-training", "BatchNormalization", [X4, *_batch_norm_params(3)], {"training_mode": 1})
    with pytest.raises(PegasusError, match="training_mode=1 is not exported"):
        run_cases([case], tmp_path)


def test_matches_onnxruntime(tmp_path):
    """LayerNormalization (with Mean/InvStdDev), InstanceNormalization and LRN in one ONNX model."""
    x = _floats(2, 4, 6, 6, scale=2.0, offset=0.5)
    params = {"ln_s": _floats(6), "ln_b": _floats(6), "in_s": _floats(4), "in_b": _floats(4)}
    nodes = [helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["ln", "mean", "inv"], axis=-1),
             helper.make_node("InstanceNormalization", ["x", "in_s", "in_b"], ["inorm"], epsilon=1e-4),
             helper.make_node("LRN", ["x"], ["lrn"], size=3, alpha=0.05, beta=0.75, bias=1.5)]
    outputs = ["ln", "mean", "inv", "inorm", "lrn"]
    graph = helper.make_graph(nodes, "norms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              initializer=[numpy_helper.from_array(v, n) for n, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    for name, want in zip(outputs, theirs):
        np.testing.assert_allclose(ours[name].reshape(want.shape), want, rtol=1e-4, atol=1e-5, err_msg=name)
