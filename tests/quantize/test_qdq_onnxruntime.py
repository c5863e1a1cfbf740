"""onnxruntime, running the QDQ export of the quantized demo LeNet, agrees with ``pegasus inference --dtype
quantized`` on 100 held-out digits to within 1 LSB on every integer tensor: the quantized input, each layer's
output and the quantized Softmax output (the tensor right before the final DequantizeLinear).

The 1 LSB allowed is the documented difference in requantisation: onnxruntime computes each layer in float
(or, fused, multiplies the int32 accumulator by a float32 ``s_x * s_w / s_y``) and rounds half to even, pegasus
multiplies by a 31-bit fixed-point multiplier and rounds half up, so the two may land on different sides of a
.5 boundary — the mismatches seen while writing this test were all within 6e-6 of one. ORT computes Softmax in
float (fused: QLinearSoftmax, a float exp table, then quantize), pegasus as an integer Q15 exp table and a Q16
division: those too agree within 1 LSB here, so the comparison covers the whole network, Softmax included.

onnxruntime is run twice, both independent of the host's vector width:

- as the reference, with graph optimisations off (``ORT_DISABLE_ALL``): every DequantizeLinear, float
  operator and QuantizeLinear is computed as the model writes it, and every integer tensor is a graph output;
- with its default optimisations, which fuse the Q/DQ patterns into its integer kernels (QLinearConv, QGemm),
  and ``session.x64quantprecision`` on: without it, x86 CPUs without AVX-512 VNNI multiply uint8 × int8
  pairs with PMADDUBSW, whose 16-bit pair sums saturate (255·127·2 > 32767), so the int8 LeNet's answer
  there depends on the CPU (58 output LSB off on an AVX2 host). The option makes onnxruntime use its exact
  uint8 × uint8 kernels on those CPUs; the fused graph's Softmax output must also be within 1 LSB of pegasus.
  (x86 onnxruntime fuses int8-activation Conv as DQ → float Conv → Q; the test requires that some layers did
  run as integer kernels.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from pegasus.cli import main
from pegasus.errors import PegasusError
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.qdq_onnx import build_qdq, to_qdq_onnx
from pegasus.quantizers.quantize_file import load_table
from pegasus.runtime import interpreter

DEMO = Path(__file__).resolve().parents[2] / "conversion_scripts" / "demo"
ONNX_MODEL = DEMO / "lenet_mnist.onnx"
SCHEMES = {"u8": ("asymmetric_affine", "uint8"), "pc_i8": ("perchannel_symmetric_affine", "int8"),
           "dfp_i8": ("dynamic_fixed_point", "int8")}
EXTRA_SCHEMES = {"dfp_i16": ("dynamic_fixed_point", "int16")}
INTEGER_ORT_KERNELS = {"QLinearConv", "QGemm", "QLinearMatMul", "MatMulInteger", "ConvInteger"}
DIGITS = 100


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    sys.path.insert(0, str(DEMO))
    from heldout import heldout_digits

    return heldout_digits()[0][:DIGITS]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("qdq")
    assert main(["import", "onnx", "--model", str(ONNX_MODEL), "--output-model", str(folder / "lenet.json"),
                 "--output-data", str(folder / "lenet.data")]) == 0
    return folder


def quantized(folder: Path, scheme: str):
    quantizer, qtype = {**SCHEMES, **EXTRA_SCHEMES}[scheme]
    path = folder / f"lenet_{scheme}.quantize"
    if not path.exists():
        assert main(["quantize", "--model", str(folder / "lenet.json"), "--model-data", str(folder / "lenet.data"),
                     "--with-input-meta", str(DEMO / "lenet_mnist_inputmeta.yml"), "--quantizer", quantizer,
                     "--qtype", qtype, "--batch-size", "10", "--iterations", "10", "--rebuild", "--model-quantize",
                     str(path)]) == 0
    graph = serialize.load(folder / "lenet.json", folder / "lenet.data")
    return graph, load_table(path, graph, serialize.graph_digest(graph))


def pegasus_integer_names(lowered, graph) -> dict[str, str]:
    """Float tensor → the integer tensor holding it in the lowered graph (inputs: their QuantizeLinear)."""
    names = {name: home for name, (home, q) in lowered.homes.items() if q is not None}
    for node in lowered.graph.nodes:
        if node.op == "QuantizeLinear" and node.inputs[0] in graph.inputs:
            names[node.inputs[0]] = node.outputs[0]
    return names


def with_outputs(model: onnx.ModelProto, qdq) -> onnx.ModelProto:
    """The QDQ model also returning every integer (QuantizeLinear output) tensor."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for name, integer in qdq.quantized.items():
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(qdq.grids[name].numpy_dtype))
        model.graph.output.append(onnx.helper.make_tensor_value_info(integer, elem, None))
    return model


def session(model: onnx.ModelProto, optimized: Path | None = None) -> ort.InferenceSession:
    """With ``optimized`` (where the fused graph is written): onnxruntime's integer kernels with exact products on
    every x86 CPU. Without: no graph optimisation, each Q/DQ pair computed as written."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if optimized is None:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    else:
        options.optimized_model_filepath = str(optimized)
        options.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare(graph, table, images, tmp_path) -> tuple[dict[str, int], set[str]]:
    """Max |ORT - pegasus| in LSB per integer tensor over ``images`` (ORT unoptimized), and the ops of ORT's
    optimized graph. Also checks the float output of both ORT sessions: within one output LSB of pegasus."""
    qdq = build_qdq(ONNX_MODEL, graph, table)
    lowered = lower_to_integer(graph, table)
    ours_names = pegasus_integer_names(lowered, graph)
    # every integer tensor of pegasus's graph has its Q/DQ twin (the fused pre-ReLU one exists only in ORT)
    assert set(ours_names) <= set(qdq.quantized), set(ours_names) - set(qdq.quantized)
    compared = [name for name in qdq.quantized if name in ours_names]
    kernels = session(qdq.model, tmp_path / "optimized.onnx")
    fused = {node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}
    instrumented = session(with_outputs(qdq.model, qdq))
    out_names = [o.name for o in instrumented.get_outputs()]
    worst = dict.fromkeys(compared, 0)
    output_grid = qdq.grids.get("softmax")
    for image in images:
        feed = {"data": image[None]}
        theirs = dict(zip(out_names, instrumented.run(None, feed)))
        ours = interpreter.run(lowered.graph, feed, keep_all=True)
        for name in compared:
            diff = np.abs(theirs[qdq.quantized[name]].astype(np.int64) - ours[ours_names[name]].astype(np.int64))
            worst[name] = max(worst[name], int(diff.max()))
        if output_grid is not None:
            for final in (theirs["softmax"], kernels.run(["softmax"], feed)[0]):
                assert np.abs(final - ours["softmax"]).max() <= float(output_grid.scale[0]) * (1 + 1e-6)
    return worst, fused


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_onnxruntime_matches_pegasus_integer_inference(imported, images, scheme, tmp_path):
    graph, table = quantized(imported, scheme)
    worst, fused = compare(graph, table, images, tmp_path)
    print(f"{scheme}: ORT kernels {sorted(fused & INTEGER_ORT_KERNELS)}; max |ORT - pegasus| in LSB: {worst}")
    assert {"data", "/conv1/Conv_output_0", "/relu/Relu_output_0", "/fc2/Gemm_output_0", "softmax"} <= set(worst)
    assert fused & INTEGER_ORT_KERNELS, f"onnxruntime ran no integer kernel: {sorted(fused)}"
    assert worst["data"] == 0  # both quantize the input with float32 x / scale, round half to even
    assert max(worst.values()) <= 1, worst


def test_int16_export_needs_and_gets_opset_21(imported, images, tmp_path):
    """16-bit Q/DQ exist from opset 21: the export upgrades the model. ORT has no int16 conv kernels and
    computes in float between the Q/DQ pairs; the integer tensors, softmax included (pegasus's two-level
    exp table), still agree within 1 LSB."""
    graph, table = quantized(imported, "dfp_i16")
    model = to_qdq_onnx(ONNX_MODEL, graph, table)
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 21
    worst, _ = compare(graph, table, images[:20], tmp_path)
    print(f"dfp_i16 (20 digits): max |ORT - pegasus| in LSB: {worst}")
    assert "softmax" in worst and worst["data"] == 0 and max(worst.values()) <= 1, worst


def test_weights_and_biases_are_integer_initializers(imported):
    graph, table = quantized(imported, "pc_i8")
    model = to_qdq_onnx(ONNX_MODEL, graph, table)
    inits = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    dequantize = {node.output[0]: node for node in model.graph.node if node.op_type == "DequantizeLinear"}
    original = {init.name: onnx.numpy_helper.to_array(init) for init in onnx.load(str(ONNX_MODEL)).graph.initializer}
    for x, weight, bias in [("data", "conv1.weight", "conv1.bias"), ("/pool1/MaxPool_output_0", "conv2.weight",
                                                                      "conv2.bias"),
                            ("/flatten/Flatten_output_0", "fc1.weight", "fc1.bias")]:
        node = dequantize[weight]
        q, scale, zero = (inits[i] for i in node.input)
        assert q.dtype == np.int8 and scale.shape == (q.shape[0],) and not zero.any()
        assert onnx.helper.get_attribute_value(node.attribute[0]) == 0  # per output channel, axis 0
        restored = q.astype(np.float64) * scale.reshape((-1,) + (1,) * (q.ndim - 1))
        assert np.abs(restored - original[weight]).max() <= scale.max() / 2 * (1 + 1e-6)
        assert np.abs(q).max() == 127
        bias_node = dequantize[bias]
        b, b_scale, b_zero = (inits[i] for i in bias_node.input)
        x_scale = float(table.get(x).scale[0])
        assert b.dtype == np.int32 and not b_zero.any()
        np.testing.assert_allclose(b_scale, np.float32(x_scale * scale), rtol=1e-6)
        assert np.abs(b * b_scale.astype(np.float64) - original[bias]).max() <= b_scale.max() / 2 * (1 + 1e-5)
    # the graph keeps its float interface
    assert [i.name for i in model.graph.input] == ["data"] and [o.name for o in model.graph.output] == ["softmax"]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_fused_relu_input_is_on_the_relu_grid(imported):
    """pegasus clamps Gemm's accumulator straight onto ReLU's grid: the pre-ReLU tensor gets that grid too,
    so onnxruntime rounds once, as pegasus does."""
    graph, table = quantized(imported, "u8")
    qdq = build_qdq(ONNX_MODEL, graph, table)
    relu = table.get("/relu/Relu_output_0")
    assert qdq.grids["/fc1/Gemm_output_0"] is relu or qdq.grids["/fc1/Gemm_output_0"].scale == relu.scale
    assert table.get("/fc1/Gemm_output_0").scale != relu.scale


def test_source_model_is_left_untouched_and_missing_file_is_reported(imported, tmp_path):
    graph, table = quantized(imported, "u8")
    source = onnx.load(str(ONNX_MODEL))
    before = source.SerializeToString()
    to_qdq_onnx(source, graph, table)
    assert source.SerializeToString() == before
    with pytest.raises(PegasusError, match="not found"):
        to_qdq_onnx(tmp_path / "missing.onnx", graph, table)
