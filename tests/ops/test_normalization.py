"""BatchNormalization, InstanceNormalization, LayerNormalization and LRN: shape rules agree with the
kernels, results agree with onnxruntime (BatchNormalization's training mode with the ONNX formula)."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType
from pegasus.ops import get_op
from pegasus.ops.registry import ShapeError, make_attrs
from tests.support.ops_against_ort import against_ort, assert_all_same, rand
from tests.support.ops_reference import check_infer, onnx_model


def _bn_params(channels: int, *extra: int) -> dict[str, np.ndarray]:
    shape = (channels, *extra)
    return {"scale": rand(*shape), "bias": rand(*shape), "mean": rand(*shape),
            "var": np.abs(rand(*shape)) + 0.1}


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (1, 3, 2, 3, 4)])
@pytest.mark.parametrize("opset", [7, 9, 15])
def test_batchnorm_inference_against_onnxruntime(shape, opset):
    x = rand(*shape)
    assert_all_same(against_ort("BatchNormalization", {"x": x}, {"epsilon": 1e-3}, opset=opset,
                                constants=_bn_params(shape[1])))
    check_infer("BatchNormalization", {"epsilon": 1e-3}, [x, *_bn_params(shape[1]).values()])


def test_batchnorm_keeps_parameters_as_graph_inputs():
    model = onnx_model("BatchNormalization", {"x": rand(1, 3, 4, 4), **_bn_params(3)}, opset=15,
                       constants=_bn_params(3))
    graph = import_onnx(model, optimize=False)
    (node,) = [n for n in graph.nodes if n.op == "BatchNormalization"]
    assert len(node.inputs) == 5 and all(graph.tensors[name].is_constant for name in node.inputs[1:])


def test_batchnorm_training_mode_follows_the_onnx_formula():
    x, params = rand(2, 3, 4, 5), _bn_params(3)
    y, running_mean, running_var = check_infer("BatchNormalization", {"training_mode": 1, "momentum": 0.8},
                                               [x, *params.values()])
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    expected = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    expected = expected * params["scale"][:, None, None] + params["bias"][:, None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(running_mean, params["mean"] * 0.8 + mean * 0.2, rtol=1e-5)
    np.testing.assert_allclose(running_var, params["var"] * 0.8 + var * 0.2, rtol=1e-5)


def test_batchnorm_old_opset_training_outputs_are_refused():
    model = onnx_model("BatchNormalization", {"x": rand(1, 3, 4, 4), **_bn_params(3)}, opset=9,
                       constants=_bn_params(3), outputs=3)
    with pytest.raises(PegasusError, match="training-mode"):
        import_onnx(model)


def test_batchnorm_per_activation_parameters_of_opset7():
    x = rand(2, 3, 4)
    (y,) = check_infer("BatchNormalization", {}, [x, *_bn_params(3, 4).values()])
    assert y.shape == x.shape
    with pytest.raises(ShapeError, match="one per channel"):
        get_op("BatchNormalization").infer(make_attrs("BatchNormalization"),
                                           [TensorType(s, DType.FLOAT32) for s in [(2, 3, 4)] + [(4,)] * 4])


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
def test_instancenorm_against_onnxruntime(shape):
    x = rand(*shape) * 3 + 1
    constants = {"scale": rand(shape[1]), "bias": rand(shape[1])}
    assert_all_same(against_ort("InstanceNormalization", {"x": x}, {"epsilon": 1e-4}, constants=constants))
    check_infer("InstanceNormalization", {}, [x, *constants.values()])


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layernorm_with_statistics_against_onnxruntime(axis, with_bias):
    x = rand(2, 3, 4, 5) * 2 + 0.5
    normalized = x.shape[axis % 4:]
    constants = {"scale": rand(*normalized)}
    if with_bias:
        constants["bias"] = rand(*normalized[-1:])  # broadcasts over the normalized axes
    attrs = {"axis": axis, "epsilon": 1e-3}
    assert_all_same(against_ort("LayerNormalization", {"x": x}, attrs, opset=17, constants=constants, outputs=3))
    y, mean, inv_std = check_infer("LayerNormalization", attrs, [x, *constants.values()])
    assert mean.shape == inv_std.shape == x.shape[:axis % 4] + (1,) * (4 - axis % 4)


def test_layernorm_float16_statistics_in_float32():
    x = rand(2, 8, dtype=np.float16)
    y, mean, inv_std = check_infer("LayerNormalization", {}, [x, np.ones(8, np.float16)])
    assert y.dtype == np.float16 and mean.dtype == inv_std.dtype == np.float32


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_against_onnxruntime(size):
    x = rand(2, 6, 4, 3)
    attrs = {"size": size, "alpha": 0.02, "beta": 0.6, "bias": 1.5}
    assert_all_same(against_ort("LRN", {"x": x}, attrs, opset=13))
    check_infer("LRN", attrs, [x])


def test_lrn_even_size_follows_the_onnx_formula():  # onnxruntime only takes odd sizes
    x = rand(1, 5, 2, 2)
    (y,) = check_infer("LRN", {"size": 4, "alpha": 0.1}, [x])
    for c in range(5):  # channels c-1 .. c+2: floor((size-1)/2) before, ceil((size-1)/2) after
        square_sum = (x[:, max(0, c - 1):c + 3] ** 2).sum(axis=1)
        np.testing.assert_allclose(y[:, c], x[:, c] / (1 + 0.1 / 4 * square_sum) ** 0.75, rtol=1e-5)


def test_lrn_needs_a_size():
    with pytest.raises(ShapeError, match="size"):
        get_op("LRN").infer(make_attrs("LRN"), [TensorType((1, 3, 4, 4), DType.FLOAT32)])
