"""Pre-quantized models as onnxruntime's quantizer writes them (``quantize_static``), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.importers.onnx.harness import check, make_model, seeded_inputs


def _float_cnn():
    """Conv (bias) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (transB, bias): a small classifier."""
    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * scale, name)
               for name, shape, scale in (("conv1.weight", (7, 3, 3, 3), 0.3), ("conv1.bias", (7,), 0.1),
                                          ("fc.weight", (5, 7), 0.4), ("fc.bias", (5,), 0.1))]
    nodes = [helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["c"], pads=[1, 1, 1, 1],
                              name="/conv1/Conv"),
             helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="/pool/GlobalAveragePool"),
             helper.make_node("Flatten", ["g"], ["f"], name="/Flatten"),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["output"], transB=1, name="/fc/Gemm")]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch_size", 3, 9, 11])]
    return make_model(nodes, inputs, ["output"], weights, 13)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_static_qdq(tmp_path, per_channel):
    """QDQ format: a bias's DequantizeLinear has scale [1] and zero point [] (per tensor, two spellings)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    model = _float_cnn()

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter([seeded_inputs(model, seed) for seed in range(4)])

        def get_next(self):
            return next(self.samples, None)

    onnx.save(model, str(tmp_path / "float.onnx"))
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    quantized = onnx.load(str(tmp_path / "qdq.onnx"))
    assert any(n.op_type == "DequantizeLinear" for n in quantized.graph.node)
    (tmp_path / "run").mkdir()
    check(quantized, tmp_path / "run", seeded_inputs(model, 9), atol=1e-5)
