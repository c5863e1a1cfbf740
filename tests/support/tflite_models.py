"""Small TFLite models built with TensorFlow and quantized to full integer (int8, uint8, int16x8, the MLPerf
Tiny architectures), TFLite's reference interpreter, feeds spanning each input's range, and comparing pegasus's
inference and bundles with TFLite's. Built once and cached (tests/importers/tflite/harness.py)."""

from __future__ import annotations

import numpy as np

from pegasus.commands.quantized_model import lower_model
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir import serialize
from pegasus.runtime.interpreter import run
from tests.importers.tflite.convert import from_keras, randomize_batchnorm, seeded
from tests.support import toolchains
from tests.support.model_bundles import output_spec

SAMPLES = 20


def int8_ptq(tf, model, shapes, seed: int, float_io: bool = False) -> bytes:
    """Full-integer post-training quantization of ``model`` from 24 uniform samples in [-2, 2)."""
    rng = np.random.default_rng(seed)

    def samples():
        for _ in range(24):
            yield [rng.uniform(-2, 2, (1, *shape)).astype(np.float32) for shape in shapes]

    io = {} if float_io else {"inference_input_type": tf.int8, "inference_output_type": tf.int8}
    return from_keras(model, dynamic_range=True, representative_dataset=samples,
                      target_spec=tf.lite.TargetSpec(supported_ops=[tf.lite.OpsSet.TFLITE_BUILTINS_INT8]), **io)


# ---- one family of ops per model ----------------------------------------------------------------------------
def int8_cnn() -> bytes:
    """CONV_2D + RELU6, DEPTHWISE_CONV_2D + RELU, MAX_POOL_2D, AVERAGE_POOL_2D (SAME: windows of 1 to 4 taps),
    PAD, RESHAPE, FULLY_CONNECTED, SOFTMAX."""
    tf = seeded(11)
    layers = tf.keras.layers
    x = tf.keras.Input((12, 10, 3), batch_size=1)
    y = layers.Conv2D(8, 3, padding="same", activation="relu6")(x)
    y = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu")(y)
    y = layers.MaxPooling2D(2)(y)
    y = layers.AveragePooling2D(3, strides=2, padding="same")(y)
    y = layers.ZeroPadding2D(((1, 0), (0, 1)))(y)
    y = layers.Dense(10)(layers.Flatten()(y))
    return int8_ptq(tf, tf.keras.Model(x, layers.Softmax()(y)), [(12, 10, 3)], 1)


def int8_ops() -> bytes:
    """ADD, SUB, MUL (broadcast), LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU, the converter's QUANTIZE requantising
    before CONCATENATION, MEAN, FULLY_CONNECTED + RELU, PAD."""
    tf = seeded(12)
    layers = tf.keras.layers
    a = tf.keras.Input((6, 5, 4), batch_size=1)
    b = tf.keras.Input((6, 5, 4), batch_size=1)
    total, difference = layers.Add()([a, b]), layers.Subtract()([a, b])
    product = layers.Multiply()([a, layers.Lambda(lambda t: t[:, :1])(b)])
    relu = layers.ReLU()(layers.Conv2D(4, 1)(a))
    relu6 = layers.ReLU(max_value=6.0)(layers.Conv2D(4, 1)(b))
    joined = layers.Concatenate()([layers.Activation("sigmoid")(total), layers.Activation("tanh")(product),
                                   layers.Activation("hard_swish")(total),
                                   layers.LeakyReLU(negative_slope=0.2)(difference), relu, relu6])
    dense = layers.Dense(5, activation="relu")(layers.GlobalAveragePooling2D()(joined))
    padded = layers.ZeroPadding2D(((1, 0), (0, 2)))(product)
    return int8_ptq(tf, tf.keras.Model([a, b], [dense, padded, joined]), [(6, 5, 4), (6, 5, 4)], 2)


def uint8_model() -> bytes:
    """An older uint8 model (TF1 graph with fake-quantization ranges, converted with inference_type uint8):
    asymmetric uint8 weights per tensor, CONV_2D + RELU6, ADD, MUL, LOGISTIC, TANH, CONCATENATION of inputs on
    other grids (rescaled), MAX_POOL_2D, MEAN, FULLY_CONNECTED, SOFTMAX."""
    from tests.importers.tflite.convert import tensorflow

    tf = tensorflow()
    v1 = tf.compat.v1
    rng = np.random.default_rng(18)

    def fq(t, lo, hi):
        return tf.quantization.fake_quant_with_min_max_args(t, lo, hi)

    graph = v1.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, (1, 8, 8, 3), name="x")
        xq = fq(x, -2.0, 2.0)
        w = fq(v1.constant(rng.normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32)), -1.0, 1.0)
        c = fq(tf.nn.relu6(tf.nn.conv2d(xq, w, 1, "SAME") + rng.normal(0, 0.1, 4).astype(np.float32)), 0.0, 6.0)
        w2 = fq(v1.constant(rng.normal(0, 0.3, (1, 1, 3, 4)).astype(np.float32)), -1.0, 1.0)
        d = fq(tf.nn.conv2d(xq, w2, 1, "SAME"), -3.0, 2.5)
        joined = fq(tf.concat([fq(c + d, -3.0, 7.0), fq(c * d, -8.0, 8.0), fq(tf.sigmoid(d), 0.0, 255.0 / 256),
                               fq(tf.tanh(d), -1.0, 127.0 / 128)], -1), -8.0, 8.0)
        mean = fq(tf.reduce_mean(tf.nn.max_pool2d(joined, 2, 2, "VALID"), [1, 2]), -4.0, 4.0)
        w3 = fq(v1.constant(rng.normal(0, 0.4, (16, 5)).astype(np.float32)), -1.2, 1.2)
        logits = fq(tf.matmul(mean, w3), -6.0, 6.0)
        probabilities = tf.identity(fq(tf.nn.softmax(logits), 0.0, 255.0 / 256), name="probabilities")
        with v1.Session(graph=graph) as session:
            converter = v1.lite.TFLiteConverter.from_session(session, [x], [probabilities, mean])
            converter.inference_type = tf.uint8
            converter.quantized_input_stats = {"x": (128.0, 64.0)}
            return converter.convert()


def int16x8_model() -> bytes:
    """int16 activations, int8 weights, int64 biases (EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8):
    CONV_2D + RELU, DEPTHWISE_CONV_2D, ADD, SUB, MUL, RELU, RELU6, the converter's int16 QUANTIZE before
    CONCATENATION, MEAN, MAX_POOL_2D, AVERAGE_POOL_2D, FULLY_CONNECTED, SOFTMAX."""
    tf = seeded(19)
    layers = tf.keras.layers
    x = tf.keras.Input((8, 8, 3), batch_size=1)
    y = layers.DepthwiseConv2D(3, padding="same")(layers.Conv2D(8, 3, padding="same", activation="relu")(x))
    z = layers.Conv2D(8, 1)(x)
    total, difference, product = layers.Add()([y, z]), layers.Subtract()([y, z]), layers.Multiply()([y, z])
    joined = layers.Concatenate()([total, product, layers.ReLU()(difference), layers.ReLU(max_value=6.0)(total)])
    mean = layers.GlobalAveragePooling2D()(joined)
    pooled = layers.AveragePooling2D(2)(layers.MaxPooling2D(2)(joined))
    logits = layers.Dense(6)(layers.Flatten()(pooled))
    model = tf.keras.Model(x, [layers.Softmax()(logits), mean])
    rng = np.random.default_rng(19)

    def samples():
        for _ in range(24):
            yield [rng.uniform(-2, 2, (1, 8, 8, 3)).astype(np.float32)]

    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return from_keras(model, dynamic_range=True, representative_dataset=samples,
                      target_spec=tf.lite.TargetSpec(supported_ops=ops), inference_input_type=tf.int16,
                      inference_output_type=tf.int16)


def int16x8_sigmoid_tanh() -> bytes:
    """LOGISTIC, TANH and LEAKY_RELU straight on an int16 input of 65,536 elements (one for every int16 value)."""
    tf = seeded(21)
    layers = tf.keras.layers
    x = tf.keras.Input((65536,), batch_size=1)
    model = tf.keras.Model(x, [layers.Activation("sigmoid")(x), layers.Activation("tanh")(x),
                               layers.LeakyReLU(negative_slope=0.3)(x)])
    rng = np.random.default_rng(21)

    def samples():
        for _ in range(4):
            yield [rng.uniform(-6, 6, (1, 65536)).astype(np.float32)]

    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return from_keras(model, dynamic_range=True, representative_dataset=samples,
                      target_spec=tf.lite.TargetSpec(supported_ops=ops), inference_input_type=tf.int16,
                      inference_output_type=tf.int16)


# ---- the architectures people ship to microcontrollers, full int8 -------------------------------------------
def int8_ds_cnn() -> bytes:
    """DS-CNN keyword spotter: 49x10 MFCC input, a conv and 4 depthwise-separable blocks, average pool, FC,
    softmax."""
    tf = seeded(14)
    layers = tf.keras.layers
    x = tf.keras.Input((49, 10, 1), batch_size=1)
    y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(64, (10, 4), strides=2, padding="same")(x)))
    for _ in range(4):
        y = layers.ReLU()(layers.BatchNormalization()(layers.DepthwiseConv2D(3, padding="same")(y)))
        y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(64, 1)(y)))
    y = layers.Dense(12)(layers.Flatten()(layers.AveragePooling2D((25, 5))(y)))
    model = tf.keras.Model(x, layers.Softmax()(y))
    randomize_batchnorm(model, np.random.default_rng(14))
    return int8_ptq(tf, model, [(49, 10, 1)], 14)


def int8_mobilenet_v1() -> bytes:
    """MobileNetV1 alpha 0.25 at 96x96x3 (visual wake words: 2 classes)."""
    tf = seeded(15)
    net = tf.keras.applications.MobileNet(input_shape=(96, 96, 3), alpha=0.25, weights=None, classes=2)
    randomize_batchnorm(net, np.random.default_rng(15))
    x = tf.keras.Input((96, 96, 3), batch_size=1)
    return int8_ptq(tf, tf.keras.Model(x, net(x)), [(96, 96, 3)], 15)


def int8_resnet8() -> bytes:
    """ResNet-8 for 32x32x3 CIFAR-10: 3 residual stacks (ADD + RELU) of 16/32/64 filters."""
    tf = seeded(16)
    layers = tf.keras.layers
    x = tf.keras.Input((32, 32, 3), batch_size=1)
    y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same")(x)))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        z = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(filters, 3, stride, padding="same")(y)))
        z = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(z))
        shortcut = y if stride == 1 else layers.Conv2D(filters, 1, stride)(y)
        y = layers.ReLU()(layers.Add()([shortcut, z]))
    y = layers.Dense(10)(layers.Flatten()(layers.AveragePooling2D(8)(y)))
    model = tf.keras.Model(x, layers.Softmax()(y))
    randomize_batchnorm(model, np.random.default_rng(16))
    return int8_ptq(tf, model, [(32, 32, 3)], 16)


def int8_autoencoder() -> bytes:
    """The MLPerf Tiny anomaly-detection autoencoder: 640 -> 4 x 128 -> 8 -> 4 x 128 -> 640."""
    tf = seeded(17)
    layers = tf.keras.layers
    x = tf.keras.Input((640,), batch_size=1)
    y = x
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        y = layers.ReLU()(layers.BatchNormalization()(layers.Dense(units)(y)))
    model = tf.keras.Model(x, layers.Dense(640)(y))
    randomize_batchnorm(model, np.random.default_rng(17))
    return int8_ptq(tf, model, [(640,)], 17)


# ---- helpers ------------------------------------------------------------------------------------------------
def reference_interpreter(path):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    return interp


def full_range_feeds(interp, rng: np.random.Generator) -> list[np.ndarray]:
    """Integer inputs over their type's whole range; float inputs uniform in [-2.5, 2.5)."""
    feeds = []
    for detail in interp.get_input_details():
        shape, dtype = tuple(detail["shape"]), np.dtype(detail["dtype"])
        if dtype.kind == "f":
            feeds.append(rng.uniform(-2.5, 2.5, shape).astype(dtype))
        else:
            info = np.iinfo(dtype)
            feeds.append(rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype))
    return feeds


def invoke(interp, feeds):
    for detail, value in zip(interp.get_input_details(), feeds):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return {d["name"]: interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()}


def compare_with_reference(imported_model, samples: int = SAMPLES, seed: int = 0,
                           integer: bool = True) -> tuple[int, int]:
    """(largest difference in LSB over every output and sample, samples with a difference); with ``integer``
    every layer must have run in integer."""
    path, json_path, data_path, table_path = imported_model
    graph = serialize.load(json_path, data_path)
    lowered = lower_model(graph, str(table_path), show=False)
    assert not integer or lowered.float_layers == [], lowered.float_layers
    interp = reference_interpreter(path)
    rng = np.random.default_rng(seed)
    worst, differing = 0, 0
    for _ in range(samples):
        feeds = full_range_feeds(interp, rng)
        expected = invoke(interp, feeds)
        got = run(lowered.graph, dict(zip(graph.inputs, feeds)))
        difference = 0
        for name in graph.outputs:
            assert got[name].dtype == expected[name].dtype and got[name].shape == expected[name].shape, name
            if expected[name].dtype.kind == "f":   # a DEQUANTIZE at the edge: the same float bits
                np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
                continue
            difference = max(difference, int(np.abs(got[name].astype(np.int64) - expected[name]).max(initial=0)))
        worst, differing = max(worst, difference), differing + (difference > 0)
    return worst, differing


def assert_bundle_matches_inference(imported_model, cpu: str, folder, seed: int = 5):
    """The model's integer bundle on ``cpu`` ("host", or a Cortex-M under qemu) gives ``inference --dtype
    quantized``'s outputs byte for byte on full-range inputs; the export's BundleResult."""
    path, json_path, data_path, table_path = imported_model
    graph = serialize.load(json_path, data_path)
    lowered = lower_model(graph, str(table_path), show=False).graph
    feeds = dict(zip(graph.inputs, full_range_feeds(reference_interpreter(path), np.random.default_rng(seed))))
    want = run(lowered, feeds)
    result = export_bundle(lowered, folder, "net", resolve_target(*((None, None) if cpu == "host" else ("arm", cpu))))
    spec = output_spec(lowered)
    got = (toolchains.run_host(folder, "net", feeds, spec) if cpu == "host" else
           toolchains.run_cortex_m(folder, "net", cpu, feeds, spec))
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    return result
