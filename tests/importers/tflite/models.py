"""Builders of the TFLite models the tests import: each returns the bytes of a .tflite file.

Most are TensorFlow code (``tf.function``s or Keras models) through the TFLite converter, so the files are
what users get. A few ops the converter never emits from TF code are written as flatbuffers
(flatbuffer.py): RELU_0_TO_1, SOFTMAX with beta != 1, L2_POOL_2D, UNIDIRECTIONAL_SEQUENCE_LSTM (TF 2.21's
Keras 3 LSTM converts to a WHILE loop), QUANTIZE/DEQUANTIZE at a float model's edges, and a custom op.
Weights are random, from seeded generators. Builders are cached by harness.cached_model.
"""

from __future__ import annotations

import numpy as np

from tests.importers.tflite.convert import from_function, from_keras, randomize_batchnorm, seeded, spec
from tests.importers.tflite.flatbuffer import ModelBuilder, options


# ---- one family of ops per model ----------------------------------------------------------------
def unary_ops() -> bytes:
    tf = seeded()

    def fn(x):
        magnitude = tf.abs(x)
        return [tf.nn.relu(x), tf.nn.relu6(x), tf.minimum(tf.maximum(x, -1.0), 1.0), tf.sigmoid(x), tf.tanh(x),
                x * tf.nn.relu6(x + 3.0) / 6.0, tf.nn.elu(x), tf.nn.leaky_relu(x, 0.3), tf.nn.gelu(x),
                tf.nn.gelu(x + 1.0, approximate=True), tf.exp(x), tf.math.log(magnitude + 0.5), tf.sqrt(magnitude),
                tf.math.rsqrt(magnitude + 0.5), -x, tf.cast(x * 4.0, tf.int32),
                tf.cast(tf.cast(x * 4.0, tf.int32), tf.float32) * 0.25]

    return from_function(fn, [spec(2, 3, 4, 5)])


def prelu() -> bytes:
    """relu(x) - alpha * relu(-x), the form the converter fuses into PRELU (Keras 3's PReLU layer is not)."""
    tf = seeded()
    rng = np.random.default_rng(7)
    per_channel = rng.uniform(0.1, 0.5, (1, 1, 4)).astype(np.float32)
    per_element = rng.uniform(-0.5, 0.5, (6, 5, 4)).astype(np.float32)

    def fn(x, y):   # two inputs: a shared relu(x) would keep the converter from fusing either
        return [tf.nn.relu(x) + (-per_channel) * tf.nn.relu(-x), tf.nn.relu(y) + (-per_element) * tf.nn.relu(-y)]

    return from_function(fn, [spec(1, 6, 5, 4), spec(1, 6, 5, 4)])


def binary_ops() -> bytes:
    tf = seeded()

    def fn(x, y, z):
        return [x + y, x - z, x * y, x / (y * y + 1.0), tf.maximum(x, y), tf.minimum(x, z),
                tf.math.squared_difference(x, y), tf.nn.relu(y + z), tf.nn.relu6(y * z),
                tf.minimum(tf.maximum(x - y, -1.0), 1.0), tf.nn.relu(x / (z * z + 1.0))]

    return from_function(fn, [spec(2, 3, 4, 5), spec(2, 3, 4, 5), spec(5)])


def reduce_ops() -> bytes:
    tf = seeded()

    def fn(x):
        return [tf.reduce_mean(x, [1, 2]), tf.reduce_sum(x, 1, keepdims=True), tf.reduce_max(x, -1),
                tf.reduce_min(x, [0, 2]), tf.reduce_prod(x, 3), tf.argmax(x, -1),
                tf.argmin(x, 1, output_type=tf.int32)]

    return from_function(fn, [spec(2, 3, 4, 5)])


def movement_ops() -> bytes:
    tf = seeded()

    def fn(x, indices):
        paddings = [[0, 0], [1, 2], [2, 1], [0, 0]]
        return [tf.pad(x, paddings), tf.pad(x, paddings, constant_values=1.5),
                tf.pad(x, paddings, mode="REFLECT"), tf.pad(x, paddings, mode="SYMMETRIC"),
                tf.pad(x, [[0, 0], [4, 0], [0, 6], [0, 0]], mode="SYMMETRIC"),
                *tf.split(x, 2, axis=3), *tf.split(x, [1, -1, 2], axis=2),
                tf.gather(x, [2, 0, 1], axis=1), tf.gather(x, indices, axis=3), tf.tile(x, (1, 2, 1, 3)),
                tf.broadcast_to(x[:, :1], (2, 4, 6, 8)), tf.nn.depth_to_space(x, 2), tf.nn.space_to_depth(x, 2),
                tf.stack([x, x * 2.0], 1), *tf.unstack(x, axis=1), tf.transpose(x, (0, 3, 1, 2)),
                tf.expand_dims(x, 2), tf.squeeze(x[:, :1], 1), x[:, ::2, 1:-1:2, ::-3], x[..., 1],
                tf.slice(x, [0, 1, 2, 0], [1, 2, -1, 3]), tf.concat([x, -x], axis=-1),
                tf.reshape(x, (1, -1, 16))]

    return from_function(fn, [spec(1, 4, 6, 8), spec(5, dtype="int32")])


def resize_ops() -> bytes:
    tf = seeded()
    v1 = tf.compat.v1.image

    def fn(x):
        outs = []
        for size in ((7, 5), (2, 3), (6, 8), (10, 9), (1, 1), (9, 12), (5, 7)):
            for align, half in ((False, False), (True, False), (False, True)):
                outs.append(v1.resize_bilinear(x, size, align_corners=align, half_pixel_centers=half))
                outs.append(v1.resize_nearest_neighbor(x, size, align_corners=align, half_pixel_centers=half))
        return outs

    return from_function(fn, [spec(1, 3, 4, 2)])


def resize_ratios() -> bytes:
    """Nearest and bilinear resizes at ratios where y * in / out is a whole number or a tie (14 -> 2, 6 -> 2,
    2 -> 41, 8 -> 47 ...): float32 rounding decides which source pixel TFLite takes there."""
    tf = seeded()
    v1 = tf.compat.v1.image
    sizes = {0: ((2, 41), (4, 47), (8, 55), (23, 2), (45, 3), (3, 9), (7, 1), (6, 6)),
             1: ((47, 2), (2, 45), (3, 23), (16, 12), (4, 3), (24, 18), (1, 5))}

    def fn(*images):
        outs = []
        for index, image in enumerate(images):
            for size in sizes[index]:
                for align, half in ((False, False), (True, False), (False, True)):
                    outs.append(v1.resize_nearest_neighbor(image, size, align_corners=align, half_pixel_centers=half))
                    outs.append(v1.resize_bilinear(image, size, align_corners=align, half_pixel_centers=half))
        return outs

    return from_function(fn, [spec(1, 14, 2, 3), spec(1, 8, 6, 2)])


def normalization_ops() -> bytes:
    tf = seeded()

    def fn(x):
        return [tf.nn.softmax(x), tf.nn.log_softmax(x), tf.math.l2_normalize(x, axis=-1)]

    return from_function(fn, [spec(2, 3, 10)])


def conv_ops() -> bytes:
    tf = seeded()
    keras, layers = tf.keras, tf.keras.layers
    x = keras.Input((12, 10, 4), batch_size=1)
    a = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    b = layers.Conv2D(5, (3, 2), padding="valid", dilation_rate=2, activation="relu6")(x)
    c = layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", strides=2)(x)
    d = layers.DepthwiseConv2D((2, 3), padding="valid", activation="tanh")(x)
    e = layers.Conv2DTranspose(5, 3, strides=2, padding="same")(a)
    f = layers.Conv2DTranspose(3, 3, strides=2, padding="valid", activation="relu")(a)
    g = layers.Conv2DTranspose(3, 4, strides=2, padding="same", use_bias=False)(a)
    h = layers.Conv2D(6, 3, padding="same", groups=2)(x)
    pools = [layers.MaxPooling2D(3, 2, padding="same")(x), layers.AveragePooling2D(3, 2, padding="same")(x),
             layers.AveragePooling2D(2, 2, padding="valid")(x)]
    dense = layers.Dense(7, activation="relu")(layers.Flatten()(x))
    dense_3d = layers.Dense(6)(x)
    return from_keras(keras.Model(x, [a, b, c, d, e, f, g, h, *pools, dense, dense_3d]))


# ---- ops written as flatbuffers --------------------------------------------------------------------
def dilated_conv1d() -> bytes:
    """Keras Conv1D with dilation_rate > 1 (a TCN / keyword-spotting layer): the converter leaves it as
    SPACE_TO_BATCH_ND (padding 1 step when the length is odd) -> CONV_2D -> BATCH_TO_SPACE_ND (cropping it),
    and SeparableConv1D's depthwise part likewise."""
    tf = seeded(3)
    layers = tf.keras.layers
    x = tf.keras.Input((49, 6))
    y = layers.Conv1D(7, 3, dilation_rate=2, activation="relu")(x)
    y = layers.SeparableConv1D(5, 3, dilation_rate=3, padding="same")(y)
    return from_keras(tf.keras.Model(x, layers.Conv1D(4, 2, dilation_rate=4, padding="causal")(y)))


def attention_ops() -> bytes:
    """BATCH_MATMUL (attention's Q.K^T with adj_y, scores.V, and adj_x) and FILL (a batch-sized constant, as
    tf_keras' LayerNormalization makes its ones), with a dynamic batch."""
    tf = seeded(4)

    def fn(q, k):
        scores = tf.matmul(q, k, transpose_b=True)
        context = tf.matmul(tf.nn.softmax(scores), k)
        gram = tf.matmul(q, context, transpose_a=True)
        ones = tf.fill(tf.shape(q)[:1], 2.0)
        return [scores, context * ones[:, None, None], gram]

    return from_function(fn, [spec(None, 6, 8), spec(None, 5, 8)])


def math_ops() -> bytes:
    """What box decoders, masks and positional encodings use: FLOOR, CEIL, ROUND, SIGN, SIN, COS, SQUARE, POW,
    FLOOR_DIV, FLOOR_MOD, ADD_N, the comparisons, LOGICAL_AND/NOT, SELECT and SELECT_V2 (on the inputs
    themselves, so no rounding difference upstream moves a value across a step)."""
    tf = seeded()

    def fn(x, y):
        steps = [tf.floor(x * 2.0), tf.math.ceil(x), tf.round(x * 3.0), tf.sign(x), tf.sin(x) * tf.cos(y),
                 tf.square(x), tf.pow(tf.abs(x) + 0.5, 1.7), tf.math.floordiv(x * 4.0, 1.5),
                 tf.math.floormod(x * 3.0, -1.25), tf.math.floordiv(tf.cast(x * 9.0, tf.int32), 4),
                 tf.math.floormod(tf.cast(x * 9.0, tf.int32), -4), tf.add_n([x, y, x * y])]
        masks = [tf.where(x > 0.1, x, y), tf.where(tf.logical_and(x < 0.5, tf.not_equal(y, 0.0)), x, y * 2.0),
                 tf.where(y[:, :1] >= x[:1], x, -y), tf.cast(tf.logical_not(tf.less_equal(x, y)), tf.float32),
                 tf.cast(tf.equal(tf.round(x), tf.round(y)), tf.float32)]
        return steps + masks

    return from_function(fn, [spec(3, 4, 5), spec(3, 4, 5)])


def handmade_ops() -> bytes:
    """RELU_0_TO_1, SOFTMAX with beta, L2_POOL_2D (with its fused RELU), and EXPAND_DIMS / SQUEEZE (which
    the converter turns into RESHAPE when shapes are static): ops the converter does not emit."""
    m = ModelBuilder()
    x = m.tensor("x", (1, 6, 6, 3))
    outs = [m.tensor(name, shape) for name, shape in (("relu_0_to_1", (1, 6, 6, 3)), ("softmax_beta", (1, 6, 6, 3)),
                                                      ("l2_pool", (1, 3, 3, 3)), ("l2_pool_same", (1, 2, 2, 3)),
                                                      ("expanded", (1, 6, 1, 6, 3)), ("squeezed", (6, 6, 3)),
                                                      ("squeezed_all", (6, 6, 3)))]
    m.op("RELU_0_TO_1", [x], [outs[0]])
    m.op("SOFTMAX", [x], [outs[1]], options("SoftmaxOptions", beta=0.4))
    m.op("L2_POOL_2D", [x], [outs[2]], options("Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                                                filterHeight=2, fusedActivationFunction=0))
    m.op("L2_POOL_2D", [x], [outs[3]], options("Pool2DOptions", padding=0, strideW=3, strideH=3, filterWidth=4,
                                                filterHeight=4, fusedActivationFunction=1))
    m.op("EXPAND_DIMS", [x, m.const("axis", np.array([-3], np.int32))], [outs[4]])
    m.op("SQUEEZE", [x], [outs[5]], options("SqueezeOptions", squeezeDims=[0]))
    m.op("SQUEEZE", [x], [outs[6]], options("SqueezeOptions"))
    return m.build([x], outs)


def fused_activations() -> bytes:
    """The fused activations the converter leaves out of Keras models: pools, TRANSPOSE_CONV, DEPTHWISE_CONV_2D
    and ADD/MUL with RELU6 / RELU_N1_TO_1 / RELU. (CONCATENATION has the option, but TFLite's kernel refuses
    any value but NONE.)"""
    relu, relu_n1_to_1, relu6 = 1, 2, 3
    rng = np.random.default_rng(8)
    m = ModelBuilder()
    x = m.tensor("x", (1, 6, 6, 3))
    outs = {name: m.tensor(name, shape) for name, shape in (
        ("avg_pool_relu6", (1, 3, 3, 3)), ("max_pool_relu_n1_to_1", (1, 3, 3, 3)),
        ("transpose_conv_relu", (1, 12, 12, 4)), ("depthwise_relu6", (1, 6, 6, 6)), ("add_relu6", (1, 6, 6, 3)),
        ("mul_relu_n1_to_1", (1, 6, 6, 3)))}
    window = {"padding": 0, "strideW": 2, "strideH": 2, "filterWidth": 3, "filterHeight": 3}
    m.op("AVERAGE_POOL_2D", [x], [outs["avg_pool_relu6"]], options("Pool2DOptions", fusedActivationFunction=relu6,
                                                                   **window))
    m.op("MAX_POOL_2D", [x], [outs["max_pool_relu_n1_to_1"]], options("Pool2DOptions", **window,
                                                                       fusedActivationFunction=relu_n1_to_1))
    shape = m.const("output_shape", np.array([1, 12, 12, 4], np.int32))
    weights = m.const("transpose_conv_filter", rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32))
    bias = m.const("transpose_conv_bias", rng.uniform(-1, 1, 4).astype(np.float32))
    m.op("TRANSPOSE_CONV", [shape, weights, x, bias], [outs["transpose_conv_relu"]],
         options("TransposeConvOptions", padding=0, strideW=2, strideH=2, fusedActivationFunction=relu))
    depthwise = m.const("depthwise_filter", rng.uniform(-1, 1, (1, 3, 3, 6)).astype(np.float32))
    depthwise_bias = m.const("depthwise_bias", rng.uniform(-1, 1, 6).astype(np.float32))
    m.op("DEPTHWISE_CONV_2D", [x, depthwise, depthwise_bias], [outs["depthwise_relu6"]],
         options("DepthwiseConv2DOptions", padding=0, strideW=1, strideH=1, depthMultiplier=2,
                 dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=relu6))
    m.op("ADD", [x, x], [outs["add_relu6"]], options("AddOptions", fusedActivationFunction=relu6))
    m.op("MUL", [x, x], [outs["mul_relu_n1_to_1"]], options("MulOptions", fusedActivationFunction=relu_n1_to_1))
    return m.build([x], list(outs.values()))


def _lstm(m: ModelBuilder, rng: np.random.Generator, name: str, x: int, shape: tuple[int, int, int], hidden: int,
          time_major: bool, peephole: bool, activation: int) -> int:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM with random weights; returns its output tensor."""
    size = shape[2]
    batch = shape[1] if time_major else shape[0]

    def const(what, *dims):
        return m.const(f"{name}/{what}", rng.uniform(-0.6, 0.6, dims).astype(np.float32))

    inputs = [x] + [const(f"w_{g}", hidden, size) for g in "ifco"] + [const(f"r_{g}", hidden, hidden) for g in "ifco"]
    inputs += [const(f"p_{g}", hidden) for g in "ifo"] if peephole else [-1, -1, -1]
    inputs += [const(f"b_{g}", hidden) for g in "ifco"] + [-1, -1]
    inputs += [m.tensor(f"{name}/h", (batch, hidden), variable=True), m.tensor(f"{name}/c", (batch, hidden),
                                                                                variable=True)]
    inputs += [-1] * 4
    out = m.tensor(name, shape[:2] + (hidden,))
    m.op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [out],
         options("UnidirectionalSequenceLSTMOptions", fusedActivationFunction=activation, timeMajor=time_major))
    return out


def lstm() -> bytes:
    """Batch-major (tanh), time-major with peepholes (tanh), and batch-major with peepholes and ReLU cells."""
    rng = np.random.default_rng(0)
    m = ModelBuilder()
    x = m.tensor("x", (2, 5, 3))
    xt = m.tensor("x_time_major", (5, 2, 3))
    outs = [_lstm(m, rng, "lstm", x, (2, 5, 3), 4, False, False, 4),
            _lstm(m, rng, "lstm_time_major_peephole", xt, (5, 2, 3), 6, True, True, 4),
            _lstm(m, rng, "lstm_relu_peephole", x, (2, 5, 3), 3, False, True, 1)]
    return m.build([x, xt], outs)


def quantize_edges() -> bytes:
    """A float model with an int8 input and an int8 output: DEQUANTIZE -> FULLY_CONNECTED -> QUANTIZE, and a
    QUANTIZE -> DEQUANTIZE round trip of a float input."""
    rng = np.random.default_rng(1)
    m = ModelBuilder()
    xq = m.tensor("x_int8", (2, 8), "int8", scale=0.05, zero_point=-3)
    x = m.tensor("x", (2, 8))
    real = m.tensor("x_real", (2, 8))
    w = m.const("weights", rng.uniform(-1, 1, (6, 8)).astype(np.float32))
    bias = m.const("bias", rng.uniform(-1, 1, 6).astype(np.float32))
    y = m.tensor("y", (2, 6))
    yq = m.tensor("y_uint8", (2, 6), "uint8", scale=0.02, zero_point=128)
    q = m.tensor("x_quantized", (2, 8), "int8", scale=0.03, zero_point=5)
    back = m.tensor("x_round_trip", (2, 8))
    m.op("DEQUANTIZE", [xq], [real])
    m.op("FULLY_CONNECTED", [real, w, bias], [y], options("FullyConnectedOptions"))
    m.op("QUANTIZE", [y], [yq])
    m.op("QUANTIZE", [x], [q])
    m.op("DEQUANTIZE", [q], [back])
    return m.build([xq, x], [yq, back])


def custom_op() -> bytes:
    """RELU -> a custom op (mediapipe's name) -> RELU."""
    m = ModelBuilder()
    x, a, b, y = (m.tensor(name, (1, 4, 4, 2)) for name in ("x", "a", "b", "y"))
    m.op("RELU", [x], [a])
    m.op("Convolution2DTransposeBias", [a], [b])
    m.op("RELU", [b], [y])
    return m.build([x], [y])


# ---- weight storage: float16, dynamic range, sparse --------------------------------------------------
def _small_cnn(tf):
    keras, layers = tf.keras, tf.keras.layers
    x = keras.Input((16, 16, 8), batch_size=1)
    y = layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    y = layers.DepthwiseConv2D(3, padding="same", activation="relu6")(y)
    y = layers.Conv2D(24, 3, strides=2)(y)
    y = layers.Dense(40, activation="relu")(layers.Flatten()(y))
    return keras.Model(x, layers.Dense(10)(y))


def float16_weights() -> bytes:
    return from_keras(_small_cnn(seeded()), float16=True)


def dynamic_range() -> bytes:
    return from_keras(_small_cnn(seeded()), dynamic_range=True)


def sparse_weights() -> bytes:
    """Dense layers whose weights are 80% zeros, scattered (CSR) and in 1x4 blocks; converted with
    EXPERIMENTAL_SPARSITY, the converter stores them sparse behind DENSIFY ops."""
    tf = seeded()
    keras, layers = tf.keras, tf.keras.layers
    rng = np.random.default_rng(2)
    x = keras.Input((48,), batch_size=2)
    scattered, blocked = layers.Dense(64, activation="relu"), layers.Dense(32)
    model = keras.Model(x, blocked(scattered(x)))
    w = rng.normal(size=(48, 64)).astype(np.float32) * (rng.uniform(size=(48, 64)) < 0.2)
    scattered.set_weights([w, rng.normal(size=64).astype(np.float32)])
    mask = np.repeat(rng.uniform(size=(32, 16)) < 0.2, 4, axis=1)   # TFLite's (out, in) weights in 1x4 blocks
    blocked.set_weights([(rng.normal(size=(32, 64)) * mask).T.astype(np.float32), np.zeros(32, np.float32)])
    return from_keras(model, sparsity=True)


# ---- the architectures people ship to microcontrollers (float, random weights) --------------------------
def ds_cnn() -> bytes:
    """DS-CNN keyword spotter (Arm ML-Zoo 'small'): 49x10 MFCC input, a conv and 4 depthwise-separable blocks
    (each BatchNorm + ReLU, the BatchNorms folded by the converter), average pool, FC, softmax."""
    tf = seeded()
    keras, layers = tf.keras, tf.keras.layers
    x = keras.Input((49, 10, 1), batch_size=1)
    y = layers.Conv2D(64, (10, 4), strides=2, padding="same", use_bias=False)(x)
    y = layers.ReLU()(layers.BatchNormalization()(y))
    for _ in range(4):
        y = layers.DepthwiseConv2D(3, padding="same", use_bias=False)(y)
        y = layers.ReLU()(layers.BatchNormalization()(y))
        y = layers.Conv2D(64, 1, use_bias=False)(y)
        y = layers.ReLU()(layers.BatchNormalization()(y))
    y = layers.AveragePooling2D((25, 5))(y)
    y = layers.Dense(12)(layers.Flatten()(y))
    model = keras.Model(x, layers.Softmax()(y))
    randomize_batchnorm(model, np.random.default_rng(3))
    return from_keras(model)


def mobilenet_v1() -> bytes:
    """MobileNetV1 alpha 0.25 at 96x96x3 (Keras applications, random weights, 2 classes: visual wake words)."""
    tf = seeded()
    model = tf.keras.applications.MobileNet(input_shape=(96, 96, 3), alpha=0.25, weights=None, classes=2)
    randomize_batchnorm(model, np.random.default_rng(4))
    inputs = tf.keras.Input((96, 96, 3), batch_size=1)
    return from_keras(tf.keras.Model(inputs, model(inputs)))


def resnet8() -> bytes:
    """ResNet-8 for 32x32x3 CIFAR-10 (MLPerf Tiny image classification): 3 residual stacks of 16/32/64."""
    tf = seeded()
    keras, layers = tf.keras, tf.keras.layers
    x = keras.Input((32, 32, 3), batch_size=1)
    y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same")(x)))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        z = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(filters, 3, stride, padding="same")(y)))
        z = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(z))
        shortcut = y if stride == 1 else layers.Conv2D(filters, 1, stride)(y)
        y = layers.ReLU()(layers.Add()([shortcut, z]))
    y = layers.AveragePooling2D(8)(y)
    model = keras.Model(x, layers.Softmax()(layers.Dense(10)(layers.Flatten()(y))))
    randomize_batchnorm(model, np.random.default_rng(5))
    return from_keras(model)


def autoencoder() -> bytes:
    """The MLPerf Tiny anomaly-detection autoencoder: 640 -> 4 x (128, BatchNorm, ReLU) -> 8 -> 4 x 128 -> 640."""
    tf = seeded()
    keras, layers = tf.keras, tf.keras.layers
    x = keras.Input((640,), batch_size=1)
    y = x
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        y = layers.ReLU()(layers.BatchNormalization()(layers.Dense(units)(y)))
    model = keras.Model(x, layers.Dense(640)(y))
    randomize_batchnorm(model, np.random.default_rng(6))
    return from_keras(model)


MCU_MODELS = (ds_cnn, mobilenet_v1, resnet8, autoencoder)


# ---- models the float import refuses ----------------------------------------------------------------------
def full_int8() -> bytes:
    """A full-integer model (int8 activations, from a representative dataset): the pre-quantized path's."""
    tf = seeded()
    keras, layers = tf.keras, tf.keras.layers
    x = keras.Input((8, 8, 3), batch_size=1)
    model = keras.Model(x, layers.Conv2D(4, 3, activation="relu")(x))
    rng = np.random.default_rng(9)

    def samples():
        for _ in range(8):
            yield [rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)]

    return from_keras(model, dynamic_range=True, representative_dataset=samples)


def keras_lstm_while() -> bytes:
    """Keras 3's LSTM: TF 2.21's converter makes it a WHILE loop over two more subgraphs (control flow)."""
    tf = seeded()
    x = tf.keras.Input((5, 3), batch_size=1)
    return from_keras(tf.keras.Model(x, tf.keras.layers.LSTM(4)(x)))
