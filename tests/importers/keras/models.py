"""Builders of the Keras models the tests import: each takes the Keras module (``keras`` = Keras 3 or
``tf_keras`` = Keras 2) and returns a built model with random weights (biases and batch-norm statistics
included, so nothing is an identity by accident). harness.cached_model saves each once per library and
format and keeps ``model.predict``'s outputs."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np


def _keras3(K) -> bool:
    return K.__name__ == "keras"


def _randomize(model, scale: float = 0.4) -> None:
    """Every weight random (seeded by its path): variances and counts positive, the rest normal * scale."""
    for variable in model.weights:
        path = str(getattr(variable, "path", None) or variable.name)
        rng = np.random.default_rng(zlib.crc32(path.encode()))
        shape = tuple(variable.shape)
        if "variance" in path:
            value = rng.uniform(0.5, 1.5, shape)
        elif "count" in path:
            continue
        elif "gamma" in path:
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.standard_normal(shape) * scale
        variable.assign(value.astype(np.float32))


# ---- element-wise and dense -------------------------------------------------------------------------
def activations(K):
    """Dense with every activation= of the library (also on a rank-3 input) and the activation layers."""
    x = K.Input((6,), name="x")
    seq = K.Input((3, 5), name="seq")
    names = ["relu", "sigmoid", "hard_sigmoid", "tanh", "softmax", "swish", "gelu", "elu", "selu", "softplus",
             "softsign", "exponential", "linear", "mish"]
    if _keras3(K):
        names += ["relu6", "silu", "hard_silu", "hard_swish", "leaky_relu", "log_softmax", "celu"]
    outs = [K.layers.Dense(4, activation=name, name=f"dense_{name}")(x) for name in names]
    outs += [K.layers.Activation(name, name=f"act_{name}")(x) for name in names]
    outs.append(K.layers.Dense(4, activation="tanh", use_bias=False, name="no_bias")(x))
    outs.append(K.layers.Flatten()(K.layers.Dense(4, activation="relu", name="dense_rank3")(seq)))
    outs += [K.layers.ReLU(name="relu_plain")(x), K.layers.ReLU(max_value=1.0, name="relu_max")(x),
             K.layers.ReLU(negative_slope=0.2, name="relu_leaky")(x),
             K.layers.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.5, name="relu_all")(x),
             K.layers.ReLU(threshold=0.25, name="relu_threshold")(x),
             K.layers.LeakyReLU(name="leaky_default")(x), K.layers.ELU(alpha=0.7, name="elu_layer")(x),
             K.layers.Softmax(name="softmax_layer")(x),
             K.layers.Flatten()(K.layers.Softmax(axis=1, name="softmax_axis1")(seq)),
             K.layers.Flatten()(K.layers.PReLU(shared_axes=[1], name="prelu_shared")(seq)),
             K.layers.PReLU(name="prelu")(x)]
    if not _keras3(K):
        outs.append(K.layers.ThresholdedReLU(theta=0.3, name="thresholded")(x))
    model = K.Model([x, seq], K.layers.Concatenate(name="all")(outs))
    _randomize(model)
    return model


# ---- convolutions ----------------------------------------------------------------------------------
def convolutions(K):
    """Every convolution family with activation=, padding modes, strides, dilation, groups, multiplier, and
    BatchNormalization after most of them (folded at import)."""
    img = K.Input((9, 10, 4), name="img")
    sig = K.Input((12, 3), name="sig")
    vol = K.Input((5, 6, 7, 2), name="vol")
    L = K.layers
    a = L.Conv2D(6, 3, padding="same", name="conv_same")(img)
    a = L.Activation("relu", name="relu")(L.BatchNormalization(name="bn_conv")(a))
    b = L.Conv2D(4, (3, 2), strides=2, dilation_rate=1, groups=2, name="conv_grouped")(img)
    b = L.BatchNormalization(scale=False, name="bn_noscale")(b)
    c = L.Conv2D(5, 3, dilation_rate=2, padding="same", activation="sigmoid", name="conv_dilated")(img)
    d = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", strides=2, name="dw")(img)
    d = L.Activation("tanh", name="tanh")(L.BatchNormalization(center=False, name="bn_dw")(d))
    e = L.SeparableConv2D(5, 3, depth_multiplier=2, padding="same", activation="elu", name="sep")(img)
    f = L.Conv2DTranspose(3, 3, strides=2, padding="same", name="deconv_same")(img)
    f = L.BatchNormalization(name="bn_deconv")(f)
    g = L.Conv2DTranspose(3, (3, 2), strides=(2, 3), padding="valid", activation="relu", name="deconv_valid")(img)
    h = L.Conv2DTranspose(2, 3, strides=2, padding="same", output_padding=1, name="deconv_outpad")(img)
    i = L.Conv2DTranspose(2, 3, strides=2, padding="valid", output_padding=1, name="deconv_valid_outpad")(img)
    s1 = L.Conv1D(4, 3, padding="causal", dilation_rate=2, activation="relu", name="conv1d_causal")(sig)
    s2 = L.Conv1D(4, 3, strides=2, padding="same", name="conv1d_same")(sig)
    s3 = L.SeparableConv1D(4, 3, padding="same", name="sep1d")(sig)
    s4 = L.Conv1DTranspose(3, 3, strides=2, name="deconv1d")(sig)
    s5 = L.DepthwiseConv1D(3, depth_multiplier=2, name="dw1d")(sig)
    v = L.Conv3D(3, 2, padding="same", activation="relu", name="conv3d")(vol)
    cf = L.DepthwiseConv2D(3, data_format="channels_first", name="dw_first")(img)
    cf = L.BatchNormalization(axis=1, name="bn_first")(cf)
    outs = [a, b, c, d, e, f, g, h, i, s1, s2, s3, s4, s5, v, cf]
    if not _keras3(K):
        outs.append(L.Conv2DTranspose(2, 3, strides=2, data_format="channels_first", name="deconv_first")(img))
    model = K.Model([img, sig, vol], outs)
    _randomize(model)
    return model


def channels_first(K):
    """Layers with data_format="channels_first" (TensorFlow runs them on the CPU only through XLA)."""
    L = K.layers
    img = K.Input((3, 9, 8), name="img")
    sig = K.Input((4, 10), name="sig")
    first = {"data_format": "channels_first"}
    # (Keras 3.15 under XLA computes a strided "same" channels-first Conv2D with a bias unlike its channels-last
    # twin, so the strided one here is "valid")
    outs = [L.Conv2D(4, 3, strides=2, activation="relu", name="conv", **first)(img),
            L.Conv2D(3, 3, padding="same", activation="tanh", name="conv_same", **first)(img),
            L.BatchNormalization(axis=1, name="bn")(L.Conv2D(4, 3, name="conv_bn", **first)(img)),
            L.SeparableConv2D(5, 3, name="sep", **first)(img),
            L.Conv2DTranspose(2, 3, strides=2, padding="same", name="deconv", **first)(img),
            L.Conv1D(3, 3, padding="same", name="conv1d", **first)(sig),
            L.AveragePooling2D(2, padding="same", name="avg", **first)(img),
            L.MaxPooling2D(3, 2, name="max", **first)(img), L.GlobalMaxPooling2D(name="gmp", **first)(img),
            L.GlobalAveragePooling2D(keepdims=True, name="gap", **first)(img),
            L.ZeroPadding2D(((1, 0), (2, 1)), name="pad", **first)(img),
            L.Cropping2D((1, 2), name="crop", **first)(img), L.UpSampling2D(2, name="up", **first)(img),
            L.UpSampling2D(2, interpolation="bilinear", name="up_bilinear", **first)(img),
            L.Resizing(5, 7, name="resize", **first)(img), L.Flatten(name="flat", **first)(img)]
    model = K.Model([img, sig], outs)
    _randomize(model)
    model.compile(jit_compile=True)
    return model


channels_first.libraries = ("keras",)


def pooling(K):
    img = K.Input((9, 8, 3), name="img")
    sig = K.Input((11, 4), name="sig")
    L = K.layers
    outs = [L.MaxPooling2D(name="max2d")(img), L.MaxPooling2D(3, strides=2, padding="same", name="max2d_same")(img),
            L.AveragePooling2D((2, 3), name="avg2d")(img),
            L.AveragePooling2D(3, strides=2, padding="same", name="avg2d_same")(img),
            L.MaxPooling1D(2, name="max1d")(sig), L.AveragePooling1D(3, strides=2, padding="same", name="avg1d")(sig),
            L.GlobalAveragePooling2D(name="gap")(img), L.GlobalMaxPooling2D(name="gmp")(img),
            L.GlobalAveragePooling2D(keepdims=True, name="gap_keep")(img),
            L.GlobalAveragePooling1D(name="gap1d")(sig), L.GlobalMaxPooling1D(keepdims=True, name="gmp1d")(sig),
            L.GlobalAveragePooling1D(data_format="channels_first", name="gap1d_first")(sig)]
    if _keras3(K):
        outs.append(L.MaxPooling2D(data_format="channels_first", name="max_first")(img))
    return K.Model([img, sig], outs)


def normalizations(K):
    x = K.Input((6,), name="x")
    seq = K.Input((4, 5), name="seq")
    img = K.Input((6, 7, 3), name="img")
    L = K.layers
    norm = L.Normalization(axis=-1, name="normalize")
    norm.adapt(np.random.default_rng(3).normal(2.0, 3.0, (50, 6, 7, 3)).astype(np.float32))
    outs = [L.BatchNormalization(name="bn_dense")(L.Dense(5, name="dense")(x)),
            L.BatchNormalization(axis=1, name="bn_axis1")(seq),
            L.BatchNormalization(axis=2 if _keras3(K) else [1, 2], name="bn_axes")(seq),
            L.LayerNormalization(name="ln")(seq), L.LayerNormalization(axis=[1, 2], name="ln_12")(seq),
            L.LayerNormalization(center=False, scale=False, epsilon=0.01, name="ln_plain")(x),
            L.Rescaling(1 / 127.5, offset=-1, name="rescale")(img), norm(img),
            L.Normalization(mean=[1.0, 2.0, 3.0], variance=[4.0, 0.25, 1.0], name="normalize_fixed")(img),
            L.Resizing(9, 5, name="resize_bilinear")(img),
            L.Resizing(4, 11, interpolation="nearest", name="resize_nearest")(img)]
    model = K.Model([x, seq, img], outs)
    _randomize_skipping(model, "normaliz")
    return model


def _randomize_skipping(model, skip: str) -> None:
    """_randomize for every layer whose name lacks ``skip`` (an adapted Normalization keeps its statistics)."""
    for layer in model.layers:
        if skip not in layer.name and layer.weights:
            _randomize(layer)


# ---- shapes and merges -----------------------------------------------------------------------------
def reshaping(K):
    img = K.Input((4, 6, 3), name="img")
    sig = K.Input((5, 3), name="sig")
    vec = K.Input((6,), name="vec")
    L = K.layers
    outs = [L.Flatten(name="flat")(img), L.Reshape((8, 9), name="reshape")(img),
            L.Reshape((-1, 3), name="reshape_auto")(img),
            L.Permute((3, 1, 2), name="permute")(img), L.RepeatVector(3, name="repeat")(vec),
            L.ZeroPadding2D(((1, 2), (0, 3)), name="pad2d")(img), L.ZeroPadding2D(1, name="pad2d_int")(img),
            L.ZeroPadding1D((2, 1), name="pad1d")(sig), L.Cropping2D(((1, 0), (2, 1)), name="crop2d")(img),
            L.Cropping1D(1, name="crop1d")(sig), L.UpSampling2D((2, 3), name="up_nearest")(img),
            L.UpSampling2D(2, interpolation="bilinear", name="up_bilinear")(img),
            L.UpSampling1D(3, name="up1d")(sig), L.Flatten(data_format="channels_first", name="flat_first")(img)]
    a, b = L.Dense(6, name="da")(vec), L.Dense(6, name="db")(vec)
    c = L.Dense(6, name="dc")(vec)
    outs += [L.Add(name="add")([a, b]), L.Add(name="add3")([a, b, c]), L.Subtract(name="sub")([a, b]),
             L.Multiply(name="mul")([a, b, c]), L.Average(name="avg")([a, b]), L.Maximum(name="max")([a, b, c]),
             L.Minimum(name="min")([a, b]), L.Concatenate(axis=1, name="concat")([a, b, c]),
             L.Dot(axes=1, name="dot")([a, b]), L.Dot(axes=1, normalize=True, name="dot_normalized")([a, c])]
    s = L.Dense(4, name="ds")(sig)
    t = L.Dense(4, name="dt")(sig)
    outs += [L.Dot(axes=(2, 2), name="dot_seq")([s, t]), L.Dot(axes=(1, 1), name="dot_time")([s, t]),
             L.Dot(axes=(2, 1), name="dot_mixed")([s, L.Reshape((4, 5), name="reshape_t")(t)])]
    drop = L.Dropout(0.5, name="dropout")(vec)
    drop = L.GaussianNoise(0.3, name="noise")(drop)
    drop = L.GaussianDropout(0.3, name="gauss_drop")(drop)
    drop = L.ActivityRegularization(l1=0.1, name="activity")(drop)
    outs += [drop, L.SpatialDropout2D(0.5, name="spatial_drop")(img), L.SpatialDropout1D(0.3, name="sd1")(sig)]
    model = K.Model([img, sig, vec], outs)
    _randomize(model)
    return model


# ---- recurrent -------------------------------------------------------------------------------------
def recurrent(K):
    tokens = K.Input((7,), dtype="int32", name="tokens")
    seq = K.Input((6, 4), name="seq")
    L = K.layers
    e = L.Embedding(10, 5, name="embed")(tokens)
    outs = [L.LSTM(3, return_sequences=True, name="lstm_seq")(e), L.GRU(4, name="gru_last")(e),
            L.SimpleRNN(3, return_sequences=True, activation="relu", name="rnn_relu")(seq)]
    lstm_out, lstm_h, lstm_c = L.LSTM(3, return_state=True, go_backwards=True, name="lstm_state")(seq)
    gru_seq, gru_h = L.GRU(2, return_sequences=True, return_state=True, go_backwards=True, reset_after=False,
                           recurrent_activation="hard_sigmoid", name="gru_v1")(seq)
    outs += [lstm_out, lstm_h, lstm_c, gru_seq, gru_h,
             L.SimpleRNN(2, go_backwards=True, use_bias=False, name="rnn")(seq)]
    outs += [L.Bidirectional(L.LSTM(3, return_sequences=True), name="bi_concat")(seq),
             L.Bidirectional(L.GRU(2), merge_mode="sum", name="bi_sum")(seq),
             L.Bidirectional(L.SimpleRNN(2, return_sequences=True), merge_mode="ave", name="bi_ave")(seq),
             L.Bidirectional(L.LSTM(2), merge_mode="mul", name="bi_mul")(seq),
             *L.Bidirectional(L.GRU(2, return_sequences=True), merge_mode=None, name="bi_none")(seq)]
    bi_out, *bi_states = L.Bidirectional(L.LSTM(2, return_state=True), name="bi_state")(seq)
    outs += [bi_out, *bi_states]
    frames = K.Input((3, 5, 5, 2), name="frames")
    outs += [L.TimeDistributed(L.Dense(3, activation="relu"), name="td_dense")(seq),
             L.TimeDistributed(L.Conv2D(2, 3, activation="relu"), name="td_conv")(frames)]
    model = K.Model([tokens, seq, frames], outs)
    _randomize(model)
    return model


# ---- model structure -------------------------------------------------------------------------------
def nested_shared(K):
    """A functional model with branches, shared layers (a Dense and a Conv2D called twice, a nested model
    called twice), a nested Functional backbone and a nested Sequential head."""
    L = K.layers
    inner_in = K.Input((8, 8, 3), name="inner_in")
    t = L.Conv2D(4, 3, padding="same", name="conv")(inner_in)
    t = L.BatchNormalization(name="bn")(t)
    backbone = K.Model(inner_in, L.ReLU(6.0, name="relu6")(t), name="backbone")
    head = K.Sequential([K.Input((4,)), L.Dense(3, activation="relu", name="hidden"), L.Dense(2, name="logits")],
                        name="head")
    left, right = K.Input((8, 8, 3), name="left"), K.Input((8, 8, 3), name="right")
    shared_conv = L.Conv2D(4, 1, name="conv")   # the same name as the backbone's layer, on purpose
    backbone_left, backbone_right = backbone(left), backbone(right)   # outputs too: their node indices
    a, b = shared_conv(backbone_left), shared_conv(backbone_right)
    merged = L.Add(name="merge")([a, L.Multiply(name="gate")([b, a])])
    pooled = L.GlobalAveragePooling2D(name="pool")(merged)
    shared_dense = L.Dense(4, name="shared_dense")
    y1 = head(shared_dense(pooled))
    y2 = head(shared_dense(L.GlobalMaxPooling2D(name="maxpool")(b)))
    model = K.Model([left, right], [y1, y2, a, backbone_left, backbone_right])
    _randomize(model)
    return model


def sequential(K):
    """A top-level Sequential model (Keras 2: input shape on the first layer)."""
    L = K.layers
    first = [K.Input((10, 10, 2))] if _keras3(K) else []
    layers = [L.Conv2D(3, 3, input_shape=(10, 10, 2)) if not _keras3(K) else L.Conv2D(3, 3),
              L.BatchNormalization(), L.Activation("relu"), L.MaxPooling2D(), L.Flatten(), L.Dense(5),
              L.BatchNormalization(), L.Dense(2)]   # logits: a saturated softmax would hide errors
    model = K.Sequential(first + layers, name="seq_model")
    _randomize(model)
    return model


def mobilenet(K):
    """MobileNetV2 (alpha 0.35, 64x64, random weights) as the backbone of a functional model: DepthwiseConv2D,
    BatchNormalization, ReLU(6), ZeroPadding2D, Add, global pooling; a nested model as users build them."""
    backbone = K.applications.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35, include_top=False, weights=None)
    image = K.Input((64, 64, 3), name="image")
    x = backbone(image)
    x = K.layers.GlobalAveragePooling2D(name="pool")(x)
    model = K.Model(image, K.layers.Dense(4, name="classes")(x))   # logits: a softmax could saturate
    _randomize(model, scale=0.2)
    return model


def keras_ops(K):
    """Keras 3 operations between layers: arithmetic with numbers on either side, keras.ops functions."""
    x, y = K.Input((5,), name="x"), K.Input((5,), name="y")
    a = K.layers.Dense(5, name="dense")(x)
    hard = K.layers.ReLU(6.0, name="relu6")(a + 3.0) * (1.0 / 6.0)
    outs = [hard, 2.0 - a, a / (y * y + 1.0), K.ops.maximum(a, 0.5), K.ops.relu(a) ** 2.0, K.ops.sigmoid(a) - y,
            K.ops.hard_silu(a), -K.ops.abs(y)]
    model = K.Model([x, y], outs)
    _randomize(model)
    return model


keras_ops.libraries = ("keras",)


def tf_ops(K):
    """TensorFlow functions on Keras 2 tensors (TFOpLambda layers): numbers on either side, two tensors."""
    import tensorflow as tf

    x, y = K.Input((5,), name="x"), K.Input((5,), name="y")
    a = K.layers.Dense(5, name="dense")(x)
    hard = K.layers.ReLU(6.0, name="relu6")(a + 3.0) * (1.0 / 6.0)
    outs = [hard, 1.0 - tf.math.sigmoid(a), tf.nn.relu(a * y - x) / 2.0, tf.maximum(a, y), tf.nn.relu6(a) ** 2.0,
            -tf.abs(y), tf.nn.silu(a)]
    model = K.Model([x, y], outs)
    _randomize(model)
    return model


tf_ops.libraries = ("tf_keras",)

def keras_tensor_ops(K):
    """Keras 3 tensor operations between layers: an SE block squeezing with ops.mean(keepdims), reductions,
    reshape/transpose/expand_dims/squeeze/concatenate/softmax/matmul and slicing (indices, steps, None, ...)."""
    ops, L = K.ops, K.layers
    x = K.Input((6, 5, 7), name="x")
    y = L.Conv2D(7, 1, name="conv")(x)
    se = L.Dense(7, activation="sigmoid", name="excite")(ops.mean(y, axis=[1, 2], keepdims=True))
    y = y * se
    outs = [ops.sum(y, axis=-1), ops.max(y, axis=(1,)), ops.min(y), ops.reshape(y, (-1, 30, 7)),
            ops.transpose(y, (0, 3, 1, 2)), ops.concatenate([y, y * 2.0], axis=-1),
            ops.expand_dims(ops.sum(y, axis=-1), 1), ops.squeeze(ops.max(y, axis=[1, 2], keepdims=True), axis=(1, 2)),
            ops.softmax(y, axis=1), y[:, 1:5, :, ::2], y[:, 0], y[..., 3], y[:, None, ::-1, 1:],
            ops.matmul(y, ops.transpose(y, (0, 1, 3, 2)))]
    model = K.Model(x, outs)
    _randomize(model)
    return model


keras_tensor_ops.libraries = ("keras",)


def tf_tensor_ops(K):
    """The same with TensorFlow functions on Keras 2 tensors (TFOpLambda, SlicingOpLambda), arguments given by
    position and by keyword."""
    import tensorflow as tf

    L = K.layers
    x = K.Input((6, 5, 7), name="x")
    y = L.Conv2D(7, 1, name="conv")(x)
    se = L.Dense(7, activation="sigmoid", name="excite")(tf.reduce_mean(y, axis=[1, 2], keepdims=True))
    y = y * se
    outs = [tf.reduce_mean(y, [1, 2]), tf.reduce_sum(y, -1), tf.reduce_max(y, axis=1), tf.reduce_min(y),
            tf.reshape(y, (-1, 30, 7)), tf.transpose(y, (0, 3, 1, 2)), tf.concat([y, y * 2.0], axis=-1),
            tf.expand_dims(tf.reduce_sum(y, -1), 1), tf.squeeze(tf.reduce_max(y, [1, 2], keepdims=True), axis=(1, 2)),
            tf.nn.softmax(y, axis=1), y[:, 1:5, :, ::2], y[:, 0], y[..., 3], y[:, tf.newaxis, ::-1, 1:],
            tf.matmul(y, y, transpose_b=True)]
    model = K.Model(x, outs)
    _randomize(model)
    return model


tf_tensor_ops.libraries = ("tf_keras",)

def hard_swish_blocks(K):
    """MobileNetV3's blocks as keras.applications writes them: hard swish as ``x * ReLU(6)(x + 3) * (1/6)`` (Keras 3
    operations Add and Multiply between layers) before residual Add and Multiply *layers*, and BatchNormalization
    after them: the .keras weights file saves layers, not operations, so its ``add``, ``multiply`` groups are the
    layers'."""
    L = K.layers
    x = K.Input((9, 9, 6), name="image")

    def hard_swish(t):
        return L.Multiply()([t, L.ReLU(6.0)(t + 3.0) * (1.0 / 6.0)])

    y = hard_swish(L.BatchNormalization(name="stem_bn")(L.Conv2D(6, 3, padding="same", name="stem")(x)))
    y = L.Add(name="block_add")([x, L.BatchNormalization(name="project_bn")(L.Conv2D(6, 1, name="project")(y))])
    y = hard_swish(L.BatchNormalization(name="head_bn")(L.DepthwiseConv2D(3, name="head_dw")(y)))
    model = K.Model(x, L.Dense(3, name="logits")(L.GlobalAveragePooling2D(name="pool")(y)))
    _randomize(model)
    return model


hard_swish_blocks.libraries = ("keras",)

def applications_layers(K):
    """The layers keras.applications defines for its models: a ConvNeXt block (LayerScale, StochasticDepth) and
    an InceptionResNetV2 residual (CustomScaleLayer), 12 channels."""
    if _keras3(K):
        from keras.src.applications import convnext, inception_resnet_v2
    else:
        from tf_keras.src.applications import convnext, inception_resnet_v2
    L = K.layers
    x = K.Input((7, 7, 12), name="image")
    y = L.DepthwiseConv2D(7, padding="same", name="block_depthwise_conv")(x)
    y = L.LayerNormalization(epsilon=1e-6, name="block_layernorm")(y)
    y = L.Dense(24, activation="gelu", name="block_pointwise_conv_1")(y)
    y = L.Dense(12, name="block_pointwise_conv_2")(y)
    y = convnext.LayerScale(1e-6, 12, name="block_layer_scale")(y)
    y = L.Add(name="block_add")([x, convnext.StochasticDepth(0.1, name="block_stochastic_depth")(y)])
    z = inception_resnet_v2.CustomScaleLayer(0.17, name="block35_1")([y, L.Conv2D(12, 1, name="block35_1_conv")(y)])
    model = K.Model(x, L.GlobalAveragePooling2D(name="pool")(z))
    _randomize(model)
    return model

def vision_transformer(K):
    """A small ViT: patches by a strided Conv2D, a pre-norm encoder block (MultiHeadAttention self-attention
    with 3 heads of 5, called as Keras 2 records it with ``value=``), a cross-attention block with its own key
    and value_dim and no biases, the MLP, and a classification head."""
    L = K.layers
    image = K.Input((12, 12, 3), name="image")
    memory = K.Input((4, 10), name="memory")
    x = L.Reshape((9, 14), name="patches")(L.Conv2D(14, 4, strides=4, name="patch_embedding")(image))
    h = L.LayerNormalization(epsilon=1e-6, name="encoder_ln_1")(x)
    x = L.Add(name="encoder_add_1")([x, L.MultiHeadAttention(3, 5, name="encoder_attention")(h, h)])
    h = L.LayerNormalization(epsilon=1e-6, name="encoder_ln_2")(x)
    h = L.Dense(9, activation="gelu", name="encoder_mlp_1")(h)
    x = L.Add(name="encoder_add_2")([x, L.Dense(14, name="encoder_mlp_2")(h)])
    keys = L.Dense(10, name="keys")(memory)
    y = L.MultiHeadAttention(2, 6, value_dim=4, use_bias=False, name="cross")(x, memory, keys)
    model = K.Model([image, memory], L.Dense(5, name="head")(L.GlobalAveragePooling1D(name="pool")(y)))
    _randomize(model)
    return model

def keras3_activations(K):
    """Keras 3's newer activations, on Dense (activation=), Conv1D and as Activation layers, over [-2, 2) and
    scaled up so every piece of the piecewise ones is hit."""
    x = K.Input((6,), name="x")
    seq = K.Input((5, 3), name="seq")
    names = ["hard_tanh", "hard_shrink", "soft_shrink", "log_sigmoid", "tanh_shrink", "squareplus", "sparse_plus"]
    wide = K.layers.Rescaling(3.0, name="wide")(x)
    outs = [K.layers.Dense(4, activation=name, name=f"dense_{name}")(x) for name in names]
    outs += [K.layers.Activation(name, name=f"act_{name}")(wide) for name in names]
    outs += [K.layers.Flatten()(K.layers.Conv1D(3, 2, activation=name, name=f"conv_{name}")(seq)) for name in names]
    model = K.Model([x, seq], K.layers.Concatenate(name="all")(outs))
    _randomize(model)
    return model


keras3_activations.libraries = ("keras",)

def center_crop(K):
    """CenterCrop at a model's front (odd margins: 9x8 -> 5x4 and 10x7 -> 3x6) before a convolution."""
    x = K.Input((10, 8, 3), name="image")
    L = K.layers
    a = L.Conv2D(2, 1, name="conv_a")(L.CenterCrop(5, 4, name="crop_a")(x))
    b = L.Conv2D(2, 1, name="conv_b")(L.CenterCrop(3, 7, name="crop_b")(L.Cropping2D(((0, 0), (0, 1)))(x)))
    model = K.Model(x, [a, b])
    _randomize(model)
    return model

def time_distributed_model(K):
    """Video classifiers' per-frame CNNs wrapped in TimeDistributed: a functional one (Conv2D, BatchNormalization,
    ReLU, pooling) and a Sequential one (Dense), then an LSTM over the frames' features."""
    L = K.layers
    frame = K.Input((8, 7, 3), name="frame")
    f = L.ReLU(name="frame_relu")(L.BatchNormalization(name="frame_bn")(L.Conv2D(5, 3, name="frame_conv")(frame)))
    cnn = K.Model(frame, L.GlobalAveragePooling2D(name="frame_pool")(f), name="frame_cnn")
    head = K.Sequential([K.Input((5,))] if _keras3(K) else [], name="frame_head")
    head.add(L.Dense(4, activation="tanh", name="frame_dense", input_shape=(5,)) if not _keras3(K)
             else L.Dense(4, activation="tanh", name="frame_dense"))
    clip = K.Input((3, 8, 7, 3), name="clip")
    x = L.TimeDistributed(head, name="per_frame_head")(L.TimeDistributed(cnn, name="per_frame")(clip))
    model = K.Model(clip, L.LSTM(2, name="lstm")(x))
    _randomize(model)
    return model

BUILDERS = [activations, convolutions, channels_first, pooling, normalizations, reshaping, recurrent, nested_shared,
            sequential, mobilenet, keras_ops, tf_ops, keras_tensor_ops, tf_tensor_ops, hard_swish_blocks,
            applications_layers, vision_transformer, keras3_activations, center_crop, time_distributed_model]


# ---- models pegasus refuses ------------------------------------------------------------------------
#: written by the Lambda layers below whenever their function runs
SENTINEL = Path.home() / ".cache" / "pegasus-tests" / "keras" / "lambda-ran"


def with_lambda(K):
    """A Lambda whose function writes SENTINEL when it runs (Keras runs it while building, too)."""
    x = K.Input((4,), name="x")
    y = K.layers.Dense(3, name="dense")(x)
    y = K.layers.Lambda(lambda t, path=str(SENTINEL): (open(path, "w").close(), t * 2.0)[1], name="lam")(y)
    return K.Model(x, K.layers.Dense(2, name="after")(y))


def lambda_activation(K):
    """A Lambda of a Keras activation, which Keras 3 saves by name (Keras 2 saves bytecode)."""
    x = K.Input((5,), name="x")
    y = K.layers.Lambda(K.activations.relu, name="lam_relu")(K.layers.Dense(4, name="dense")(x))
    model = K.Model(x, y)
    _randomize(model)
    return model


def custom_layer(K):
    class Doubler(K.layers.Layer):
        def call(self, inputs):
            return inputs * 2.0

    x = K.Input((4,), name="x")
    return K.Model(x, Doubler(name="doubler")(K.layers.Dense(2, name="dense")(x)))


def unsupported(K):
    """Three layer classes and a Keras 3 operation pegasus does not convert, one of the layers only inside a
    TimeDistributed."""
    x = K.Input((6, 4), name="x")
    L = K.layers
    y = L.GroupNormalization(groups=2, name="groups")(x)
    y = L.Attention(name="attend")([y, x])
    y = K.ops.cumsum(L.TimeDistributed(L.UnitNormalization(), name="td")(y), axis=1)
    return K.Model(x, L.Dense(2, name="dense")(y))


def unsupported_tf(K):
    """Keras 2: an unsupported layer class and an unsupported TensorFlow function (a TFOpLambda)."""
    import tensorflow as tf

    x = K.Input((6, 4), name="x")
    y = K.layers.LayerNormalization(name="ln")(K.layers.UnitNormalization(name="unit")(x))
    return K.Model(x, K.layers.Dense(2, name="dense")(tf.math.cumsum(y, axis=1)))


def variable_length(K):
    """A sequence input of any length (the test runs it on 6 steps)."""
    x = K.Input((None, 4), name="steps")
    model = K.Model(x, K.layers.GRU(3, name="gru")(K.layers.Dense(4, activation="tanh", name="dense")(x)))
    _randomize(model)
    return model


def causal_attention(K):
    """A decoder's self-attention with a causal mask, which pegasus refuses naming the layer."""
    x = K.Input((5, 8), name="x")
    return K.Model(x, K.layers.MultiHeadAttention(2, 4, name="decoder_attention")(x, x, use_causal_mask=True))


def unet_decoder(K):
    """A segmentation decoder: UpSampling2D bilinear and nearest joined with skip connections (Concatenate),
    then convolutions; the bilinear upsampling's outputs land on .5 ties of the quantized grid."""
    L = K.layers
    x = K.Input((12, 10, 3), name="image")
    skip = L.Conv2D(6, 3, padding="same", activation="relu", name="enc_conv")(x)
    deep = L.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="bottleneck")(skip)
    up = L.UpSampling2D(2, interpolation="bilinear", name="up_bilinear")(deep)
    y = L.Conv2D(6, 3, padding="same", activation="relu", name="dec_conv")(L.Concatenate(name="cat")([up, skip]))
    near = L.UpSampling2D(2, name="up_nearest")(L.MaxPooling2D(2, name="pool")(y))
    model = K.Model(x, L.Conv2D(2, 1, name="mask")(L.Concatenate(name="cat_2")([near, y])))
    _randomize(model)
    return model
