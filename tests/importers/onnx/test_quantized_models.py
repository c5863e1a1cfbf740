"""Pre-quantized models as onnxruntime's quantizer writes them (``quantize_static``), against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.importers.onnx.harness import check, cli_import, make_model, onnxruntime_outputs, run_cli_here, seeded_inputs


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


def _quantize_static(tmp_path, quant_format: str, per_channel: bool, weight_type: str):
    """The small classifier through onnxruntime's quantize_static (uint8 activations)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    model = _float_cnn()

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter([seeded_inputs(model, seed) for seed in range(4)])

        def get_next(self):
            return next(self.samples, None)

    onnx.save(model, str(tmp_path / "float.onnx"))
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "quantized.onnx"), Reader(),
                    quant_format=getattr(QuantFormat, quant_format), per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=getattr(QuantType, weight_type))
    (tmp_path / "run").mkdir()
    return onnx.load(str(tmp_path / "quantized.onnx")), seeded_inputs(model, 9)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_static_qdq(tmp_path, per_channel):
    """QDQ format: a bias's DequantizeLinear has scale [1] and zero point [] (per tensor, two spellings)."""
    quantized, feeds = _quantize_static(tmp_path, "QDQ", per_channel, "QInt8")
    assert any(n.op_type == "DequantizeLinear" for n in quantized.graph.node)
    check(quantized, tmp_path / "run", feeds, atol=1e-5)


@pytest.mark.parametrize("per_channel, weight_type", [(False, "QUInt8"), (True, "QInt8")])
def test_quantize_static_qoperator(tmp_path, per_channel, weight_type):
    """QOperator format: QLinearConv, com.microsoft's QLinearGlobalAveragePool and QGemm. onnxruntime computes
    them in integers, pegasus's float graph between DequantizeLinear and QuantizeLinear: one output step apart at
    most (a value on a rounding tie)."""
    quantized, feeds = _quantize_static(tmp_path, "QOperator", per_channel, weight_type)
    ops = {n.op_type for n in quantized.graph.node}
    assert {"QLinearConv", "QLinearGlobalAveragePool", "QGemm"} <= ops, ops
    last = next(n for n in quantized.graph.node if n.output[0] == quantized.graph.output[0].name)
    step = float(numpy_helper.to_array(next(i for i in quantized.graph.initializer if i.name == last.input[1])))
    check(quantized, tmp_path / "run", feeds, rtol=0, atol=step * 1.001)


def test_qoperator_model_quantizes_and_runs_in_integers(tmp_path):
    """pegasus quantize + inference --dtype quantized of a QOperator model: the uint8 tensors its Flatten moves
    between QLinearGlobalAveragePool and QGemm are the model's own integers (no table entry); they run as they
    are. The result stays near onnxruntime's."""
    quantized, feeds = _quantize_static(tmp_path, "QOperator", False, "QUInt8")
    path = tmp_path / "run" / "qop.onnx"
    onnx.save(quantized, str(path))
    code, _, stderr, json_path = cli_import(path)
    assert code == 0, stderr
    data_path = json_path.with_suffix(".data")
    lines = []
    for seed in range(3):
        np.save(tmp_path / f"cal{seed}.npy", seeded_inputs(quantized, seed)["input"])
        lines.append(f"cal{seed}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    np.save(tmp_path / "x.npy", feeds["input"])
    meta, table = tmp_path / "meta.yml", tmp_path / "qop.quantize"
    for args in (["generate", "inputmeta", "--model", json_path, "--source-file", tmp_path / "dataset.txt",
                  "--input-meta-output", meta],
                 ["quantize", "--model", json_path, "--model-data", data_path, "--with-input-meta", meta,
                  "--model-quantize", table, "--iterations", "3"],
                 ["inference", "--model", json_path, "--model-data", data_path, "--dtype", "quantized",
                  "--model-quantize", table, "--input", tmp_path / "x.npy", "--postprocess", "dump_result",
                  "--output-dir", tmp_path / "out"]):
        code, _, stderr = run_cli_here(*args)
        assert code == 0, stderr
    (expected,) = onnxruntime_outputs(path, feeds)
    got = np.load(tmp_path / "out" / "outputs.npz")["output"].reshape(expected.shape)
    assert np.abs(got - expected).max() <= 0.1 * np.abs(expected).max()


def test_quantize_dynamic_model_is_refused_in_one_line_with_a_hint(tmp_path):
    """onnxruntime's quantize_dynamic (activations quantized at run time) has no pegasus form: one line naming the
    file and every op, and what to do instead."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(_float_cnn(), str(tmp_path / "float.onnx"))
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"), weight_type=QuantType.QUInt8)
    code, stdout, stderr, json_path = cli_import(tmp_path / "dynamic.onnx")
    assert code == 2 and stdout == "" and not json_path.exists()
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for fragment in ("dynamic.onnx", "DynamicQuantizeLinear", "ConvInteger", "quantize_dynamic",
                     "import the float model, then pegasus quantize"):
        assert fragment in lines[0], (fragment, lines[0])
