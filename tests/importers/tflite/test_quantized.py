"""Pre-quantized TFLite models (full-integer int8 from the TFLite converter, hand-made QUANTIZE requantisations,
uint8 and int16x8): ``pegasus import tflite`` keeps their own quantization (NAME.quantize, rounding: tflite) and
``inference --dtype quantized`` is byte for byte what TFLite's reference kernels (BUILTIN_REF, which TFLite Micro
and CMSIS-NN match; never the default XNNPACK kernels) output, on random integer inputs over the whole range.

Models are built here with tf.keras and converted once (cached on disk by harness.cached_model): one per family
of ops, and the architectures people ship to microcontrollers (DS-CNN, MobileNetV1 0.25 at 96x96, ResNet-8,
the FC autoencoder) with random weights and BatchNorm statistics.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.commands.quantized_model import lower_model
from pegasus.importers.tflite.reader import read_tflite
from pegasus.ir import serialize
from pegasus.quantizers.quantize_file import load_table
from pegasus.runtime.interpreter import run
from tests.conftest import run_cli
from tests.importers.tflite.convert import from_keras, seeded
from tests.importers.tflite.flatbuffer import ModelBuilder, options
from tests.support.tflite_models import (
    SAMPLES,
    assert_bundle_matches_inference,
    compare_with_reference,
    full_range_feeds,
    int8_autoencoder,
    int8_cnn,
    int8_ds_cnn,
    int8_mobilenet_v1,
    int8_ops,
    int8_ptq,
    int8_resnet8,
    int16x8_model,
    int16x8_sigmoid_tanh,
    invoke,
    reference_interpreter,
    uint8_model,
)

pytestmark = pytest.mark.xdist_group("tflite")


def int8_float_io() -> bytes:
    """Float input and output: QUANTIZE (float -> int8, rounding half away from zero) and DEQUANTIZE at the
    edges."""
    tf = seeded(13)
    layers = tf.keras.layers
    x = tf.keras.Input((8, 8, 2), batch_size=1)
    y = layers.Conv2D(4, 3, activation="relu")(x)
    y = layers.Dense(3)(layers.Flatten()(y))
    return int8_ptq(tf, tf.keras.Model(x, y), [(8, 8, 2)], 3, float_io=True)


def int8_dilated_conv1d() -> bytes:
    """Dilated Conv1D (SPACE_TO_BATCH_ND with padding -> CONV_2D -> BATCH_TO_SPACE_ND with crops) on int8."""
    tf = seeded(14)
    layers = tf.keras.layers
    x = tf.keras.Input((49, 6), batch_size=1)
    y = layers.Conv1D(7, 3, dilation_rate=2, activation="relu")(x)
    return int8_ptq(tf, tf.keras.Model(x, layers.Conv1D(4, 2, dilation_rate=4, padding="causal")(y)), [(49, 6)], 4)


def int8_attention() -> bytes:
    """BATCH_MATMUL of two activations (Q.K^T with adj_y, scores.V): requantised twice, as CONV_2D is."""
    tf = seeded(15)
    layers = tf.keras.layers
    x = tf.keras.Input((7, 12), batch_size=1)
    q, k, v = layers.Dense(12)(x), layers.Dense(12)(x), layers.Dense(12)(x)
    scores = layers.Softmax()(layers.Lambda(lambda t: tf.matmul(t[0], t[1], transpose_b=True))([q, k]))
    return int8_ptq(tf, tf.keras.Model(x, layers.Lambda(lambda t: tf.matmul(t[0], t[1]))([scores, v])), [(7, 12)], 5)


def int8_squared_difference() -> bytes:
    """SQUARED_DIFFERENCE (a LayerNormalization's variance), which has no integer kernel here."""
    tf = seeded(16)
    layers = tf.keras.layers
    x = tf.keras.Input((6, 10), batch_size=1)
    mean = layers.Lambda(lambda t: tf.reduce_mean(t, -1, keepdims=True))(x)
    variance = layers.Lambda(lambda t: tf.math.squared_difference(t[0], t[1]))([x, mean])
    return int8_ptq(tf, tf.keras.Model(x, layers.Dense(4)(variance)), [(6, 10)], 6)


def int8_requantize() -> bytes:
    """A QUANTIZE int8 -> int8 onto another grid (TFLite's Requantize), then MAX_POOL_2D and RESHAPE."""
    m = ModelBuilder()
    x = m.tensor("x", (1, 4, 4, 3), "int8", scale=0.05, zero_point=-3)
    q = m.tensor("requantized", (1, 4, 4, 3), "int8", scale=0.0371, zero_point=7)
    pooled = m.tensor("pooled", (1, 2, 2, 3), "int8", scale=0.0371, zero_point=7)
    shape = m.const("shape", np.array([1, 12], np.int32))
    y = m.tensor("y", (1, 12), "int8", scale=0.0371, zero_point=7)
    m.op("QUANTIZE", [x], [q])
    m.op("MAX_POOL_2D", [q], [pooled], options("Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                                                   filterHeight=2))
    m.op("RESHAPE", [pooled, shape], [y], options("ReshapeOptions", newShape=[1, 12]))
    return m.build([x], [y])


def int8_activations() -> bytes:
    """Stand-alone RELU, RELU6, RELU_N1_TO_1 and RELU_0_TO_1 onto other grids than their input's (a
    requantisation then a clamp at zero_point + round(bound / scale)), and MAX_POOL_2D / AVERAGE_POOL_2D with
    fused RELU6 / RELU."""
    m = ModelBuilder()
    x = m.tensor("x", (1, 4, 6, 3), "int8", scale=0.05, zero_point=-3)
    outputs = []
    for op, scale, zero in (("RELU", 0.031, -128), ("RELU6", 0.0247, -128), ("RELU_N1_TO_1", 0.0081, 1),
                            ("RELU_0_TO_1", 0.0043, -128)):
        outputs.append(m.tensor(op.lower(), (1, 4, 6, 3), "int8", scale=scale, zero_point=zero))
        m.op(op, [x], [outputs[-1]])
    for op, activation in (("MAX_POOL_2D", 3), ("AVERAGE_POOL_2D", 1)):
        outputs.append(m.tensor(op.lower(), (1, 2, 3, 3), "int8", scale=0.05, zero_point=-3))
        m.op(op, [x], [outputs[-1]], options("Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                                             filterHeight=2, fusedActivationFunction=activation))
    return m.build([x], outputs)


def int16x8_functions() -> bytes:
    """LOGISTIC, TANH and LEAKY_RELU on int16: TFLite computes them with its own 16-bit approximations."""
    tf = seeded(20)
    layers = tf.keras.layers
    x = tf.keras.Input((6, 5, 4), batch_size=1)
    y = layers.Conv2D(4, 1)(x)
    model = tf.keras.Model(x, [layers.Activation("sigmoid")(y), layers.Activation("tanh")(y),
                               layers.LeakyReLU(negative_slope=0.2)(y)])
    rng = np.random.default_rng(20)

    def samples():
        for _ in range(24):
            yield [rng.uniform(-3, 3, (1, 6, 5, 4)).astype(np.float32)]

    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return from_keras(model, dynamic_range=True, representative_dataset=samples,
                      target_spec=tf.lite.TargetSpec(supported_ops=ops), inference_input_type=tf.int16,
                      inference_output_type=tf.int16)


def int16x8_power_of_two() -> bytes:
    """LOGISTIC (input 2**-12) and TANH (2**-12, 2**-11): the power-of-two scales whose Prepare multiplies the
    input by 3 << shift instead of rescaling it (the same products as the rescale would give); LEAKY_RELU onto
    a coarser grid."""
    m = ModelBuilder()
    x12 = m.tensor("x12", (1, 65536), "int16", scale=2.0 ** -12, zero_point=0)
    x11 = m.tensor("x11", (1, 65536), "int16", scale=2.0 ** -11, zero_point=0)
    outputs = []
    for op, x in (("LOGISTIC", x12), ("TANH", x12), ("TANH", x11)):
        outputs.append(m.tensor(f"{op.lower()}_{len(outputs)}", (1, 65536), "int16", scale=2.0 ** -15, zero_point=0))
        m.op(op, [x], [outputs[-1]])
    outputs.append(m.tensor("leaky", (1, 65536), "int16", scale=2.0 ** -10 * 1.3, zero_point=0))
    m.op("LEAKY_RELU", [x11], [outputs[-1]], options("LeakyReluOptions", alpha=0.1))
    return m.build([x12, x11], outputs)


def int8_lenet() -> bytes:
    """LeNet as TFLite's converter quantizes it (full int8, int8 I/O): two CONV_2D + RELU + MAX_POOL_2D, a pooled
    pair on Cortex-M with the DSP extension (exporters/glow/pooled_pair.py), then FULLY_CONNECTED twice."""
    tf = seeded(21)
    layers = tf.keras.layers
    x = tf.keras.Input((28, 28, 1), batch_size=1)
    y = layers.MaxPooling2D(2)(layers.Conv2D(20, 5, activation="relu")(x))
    y = layers.MaxPooling2D(2)(layers.Conv2D(50, 5, activation="relu")(y))
    y = layers.Dense(500, activation="relu")(layers.Flatten()(y))
    return int8_ptq(tf, tf.keras.Model(x, layers.Dense(10)(y)), [(28, 28, 1)], 21)


OP_MODELS = (int8_cnn, int8_ops, int8_float_io, int8_requantize, int8_activations, uint8_model, int16x8_model,
             int8_dilated_conv1d, int8_attention)
MCU_MODELS = (int8_ds_cnn, int8_mobilenet_v1, int8_resnet8, int8_autoencoder, int8_lenet)


# ---- tests --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("builder", OP_MODELS + MCU_MODELS, ids=lambda b: b.__name__)
def test_bit_exact_with_reference_kernels(imported, builder):
    worst, differing = compare_with_reference(imported(builder))
    print(f"{builder.__name__}: {SAMPLES} random inputs, {differing} differ, largest difference {worst} LSB")
    assert worst == 0


def test_int16_functions_bit_exact(imported):
    """int16 LOGISTIC and TANH run TFLite's kernel (QSigmoid16: the rescale into its 256-knot sigmoid table),
    LEAKY_RELU its two requantisations (QLeakyRelu): byte-equal on 20 random full-range inputs."""
    model = imported(int16x8_functions)
    graph = serialize.load(model[1], model[2])
    lowered = lower_model(graph, str(model[3]), show=False)
    assert {"QSigmoid16", "QLeakyRelu"} <= {node.op for node in lowered.graph.nodes}
    worst, differing = compare_with_reference(model)
    print(f"int16x8_functions: {SAMPLES} random inputs, {differing} differ, largest difference {worst} LSB")
    assert worst == 0


@pytest.mark.parametrize("builder", [int16x8_sigmoid_tanh, int16x8_power_of_two], ids=lambda b: b.__name__)
def test_int16_functions_every_input(imported, builder):
    """All 65,536 int16 inputs through one-op LOGISTIC, TANH and LEAKY_RELU models (a rescaled and a
    power-of-two input scale): byte-equal to BUILTIN_REF."""
    model = imported(builder)
    graph = serialize.load(model[1], model[2])
    lowered = lower_model(graph, str(model[3]), show=False)
    assert lowered.float_layers == []
    interp = reference_interpreter(model[0])
    every = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16).reshape(1, 65536)
    expected = invoke(interp, [every] * len(graph.inputs))
    got = run(lowered.graph, dict.fromkeys(graph.inputs, every))
    for name in graph.outputs:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_squared_difference_runs_in_float(imported):
    """The difference SQUARED_DIFFERENCE's Sub invents has no grid in the file: it stays float32 in the table,
    the Sub and the Mul reading it run in float between converters (within a step of TFLite), the rest in
    integer."""
    model = imported(int8_squared_difference)
    lowered = lower_model(serialize.load(model[1], model[2]), str(model[3]), show=False)
    assert [op for _, op, _ in lowered.float_layers] == ["Mul"], lowered.float_layers   # the Sub: float in the table
    worst, _ = compare_with_reference(model, samples=5, integer=False)
    assert worst <= 1


def test_table_holds_the_models_parameters(imported):
    """m.quantize names the scheme, says rounding: tflite, matches the imported graph, and holds each tensor's
    scale (the file's float32, exactly) and zero point; weights per output channel."""
    path, json_path, data_path, table_path = imported(int8_cnn)
    graph = serialize.load(json_path, data_path)
    table = load_table(table_path, graph, serialize.graph_digest(graph))
    assert (table.quantizer, table.qtype, table.rounding) == ("perchannel_symmetric_affine", "i8", "tflite")
    assert "rounding: tflite" in table_path.read_text()
    model = read_tflite(path)
    activations = [t for t in model.tensors if t.data is None and t.quantized]
    for tensor in activations:
        name = tensor.name if tensor.name in graph.tensors and graph.type_of(tensor.name).dtype.is_float \
            else f"{tensor.name}/real"
        entry = table.tensors[name]
        assert entry.scale == [float(tensor.scale[0])] and entry.zero_point == [int(tensor.zero_point[0])], name
        assert entry.method == "layer" and entry.qtype == "i8"
    conv = next(node for node in graph.nodes if node.op == "Conv")
    filter_tensor = next(t for t in model.tensors if t.name == next(
        n for n in model.nodes if n.op_type == "CONV_2D").inputs[1])
    weights = table.tensors[conv.inputs[1]]
    assert weights.method == "channel" and weights.axis == 0
    assert weights.scale == [float(s) for s in filter_tensor.scale] and set(weights.zero_point) == {0}
    assert all(t.type.dtype.is_float is False or n in table.tensors or graph.value_of(n) is not None
               for n, t in graph.tensors.items())


@pytest.mark.parametrize("builder, scheme", [(uint8_model, ("asymmetric_affine", "u8", "asymmetric_quantized")),
                                             (int16x8_model, ("perchannel_symmetric_affine", "i16",
                                                              "symmetric_quantized"))],
                         ids=["uint8", "int16x8"])
def test_table_names_the_scheme(imported, builder, scheme):
    """uint8 models: asymmetric_affine u8 (uint8 weights per tensor with their zero point); int16x8 models:
    symmetric int16 activations, int8 weights per channel."""
    path, json_path, data_path, table_path = imported(builder)
    graph = serialize.load(json_path, data_path)
    table = load_table(table_path, graph, serialize.graph_digest(graph))
    assert (table.quantizer, table.qtype, table.rounding) == (*scheme[:2], "tflite")
    conv = next(node for node in graph.nodes if node.op == "Conv")
    assert table.tensors[conv.outputs[0]].dtype == scheme[2]
    weights = table.tensors[conv.inputs[1]]
    assert (weights.qtype, weights.method) == (("u8", "layer") if builder is uint8_model else ("i8", "channel"))


def test_cli_inference_takes_and_returns_the_models_integers(imported, tmp_path):
    """pegasus inference --input x.npy takes the int8 array the TFLite interpreter takes and writes its int8
    outputs, without --quantized-io or any other flag."""
    path, json_path, data_path, table_path = imported(int8_ops)
    interp = reference_interpreter(path)
    feeds = full_range_feeds(interp, np.random.default_rng(5))
    graph = serialize.load(json_path, data_path)
    order = {d["name"]: value for d, value in zip(interp.get_input_details(), feeds)}
    files = []
    for name in graph.inputs:
        file = tmp_path / f"{name.replace(':', '_')}.npy"
        np.save(file, order[name])
        files.append(str(file))
    result = run_cli("inference", "--model", json_path, "--model-data", data_path, "--dtype", "quantized",
                     "--model-quantize", table_path, "--input", "#".join(files), "--postprocess", "dump_result",
                     "--output-dir", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert "runs in float" not in result.stdout
    dumped = np.load(tmp_path / "out" / "outputs.npz")
    expected = invoke(interp, feeds)
    for name in graph.outputs:
        assert dumped[name][0].dtype == np.int8
        np.testing.assert_array_equal(dumped[name][0], expected[name], err_msg=name)


def test_float_import_of_the_same_model(imported):
    """The graph itself is float over the real values: its float reference stays within a few steps of the
    integer kernels (the same model, without the rounding of each layer)."""
    path, json_path, data_path, _ = imported(int8_cnn)
    graph = serialize.load(json_path, data_path)
    interp = reference_interpreter(path)
    feeds = full_range_feeds(interp, np.random.default_rng(6))
    expected = invoke(interp, feeds)
    got = run(graph, dict(zip(graph.inputs, feeds)))
    for name in graph.outputs:
        assert got[name].dtype == np.int8
        assert np.abs(got[name].astype(np.int64) - expected[name]).max() <= 8


def input_meta(tmp_path, json_path, interp, rng) -> str:
    """An input meta file over 8 random samples of the model's (single) integer input."""
    lines = []
    for i in range(8):
        sample = tmp_path / f"s{i}.npy"
        np.save(sample, full_range_feeds(interp, rng)[0])
        lines.append(sample.name)
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    meta = tmp_path / "m_inputmeta.yml"
    result = run_cli("generate", "inputmeta", "--model", json_path, "--source-file", tmp_path / "dataset.txt",
                     "--input-meta-output", meta)
    assert result.code == 0, result.stderr
    return meta


def test_quantize_without_rebuild_keeps_the_table(imported, tmp_path):
    """pegasus quantize over the imported table with its own scheme reuses every entry and keeps rounding:
    tflite, so the integer inference stays byte-equal to TFLite's."""
    path, json_path, data_path, table_path = imported(int8_ds_cnn)
    meta = input_meta(tmp_path, json_path, reference_interpreter(path), np.random.default_rng(8))
    reused = tmp_path / "m.quantize"
    reused.write_text(table_path.read_text())
    result = run_cli("quantize", "--model", json_path, "--model-data", data_path, "--with-input-meta", meta,
                     "--model-quantize", reused, "--quantizer", "perchannel_symmetric_affine", "--qtype", "int8")
    assert result.code == 0, result.stderr
    graph = serialize.load(json_path, data_path)
    assert load_table(reused, graph, serialize.graph_digest(graph)).rounding == "tflite"
    worst, _ = compare_with_reference((path, json_path, data_path, reused), samples=5)
    assert worst == 0


def test_quantize_rebuild_recalibrates_from_float(imported, tmp_path):
    """pegasus quantize --rebuild over the imported model re-calibrates it from its float graph: a table of the
    scheme asked for, with pegasus's own rounding, whose integer inference stays close to TFLite's."""
    path, json_path, data_path, table_path = imported(int8_cnn)
    interp = reference_interpreter(path)
    rng = np.random.default_rng(7)
    meta = input_meta(tmp_path, json_path, interp, rng)
    rebuilt = tmp_path / "rebuilt.quantize"
    rebuilt.write_text(table_path.read_text())
    result = run_cli("quantize", "--model", json_path, "--model-data", data_path, "--with-input-meta", meta,
                     "--model-quantize", rebuilt, "--rebuild", "--quantizer", "asymmetric_affine", "--qtype", "int8",
                     "--batch-size", "8", "--iterations", "1")
    assert result.code == 0, result.stderr
    graph = serialize.load(json_path, data_path)
    table = load_table(rebuilt, graph, serialize.graph_digest(graph))
    original = load_table(table_path, graph, serialize.graph_digest(graph))
    assert (table.quantizer, table.rounding) == ("asymmetric_affine", "half_up")
    weight = next(node for node in graph.nodes if node.op == "Conv").inputs[1]
    assert table.tensors[weight].method == "layer" and original.tensors[weight].method == "channel"
    lowered = lower_model(graph, str(rebuilt), show=False)
    feeds = full_range_feeds(interp, rng)
    got = run(lowered.graph, dict(zip(graph.inputs, feeds)))
    expected = invoke(interp, feeds)
    for name in graph.outputs:   # softmax probabilities on 1/256 steps
        assert np.abs(got[name].astype(np.int64) - expected[name]).max() <= 16


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
def test_int8_lenet_pooled_pair(imported, cpu, tmp_path):
    """TFLite's int8 LeNet (channels last, TFLite's rounding, int8 I/O): its two convolutions and poolings run as
    one pooled pair on Cortex-M7/M4, byte-equal to inference, which equals TFLite's reference kernels
    (test_bit_exact_with_reference_kernels)."""
    from pegasus.exporters.glow.pooled_pair import PooledPair

    result = assert_bundle_matches_inference(imported(int8_lenet), cpu, tmp_path, seed=7)
    pairs = [layer for layer in result.plan.layers if isinstance(layer, PooledPair)]
    assert [[node.op for node in pair.nodes] for pair in pairs] == [["QConv", "MaxPool", "QConv", "MaxPool"]]
