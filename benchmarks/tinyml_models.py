"""The four MLPerf Tiny inference-benchmark models, built as the benchmark's training scripts define them
(github.com/mlcommons/tiny, training/*: keras_model.py / vww_model.py / resnet_v1_eembc.py / the AD
autoencoder) with random weights and random BatchNorm statistics, and converted by TensorFlow Lite to
full-integer int8 (int8 input and output, per-channel weights) from a random representative dataset —
speed and memory do not depend on the weights' values. Built once and cached by the builder's source and
the TensorFlow version (~/.cache/pegasus-bench/tinyml/).

    python benchmarks/tinyml_models.py      # builds (or finds) the four .tflite files and prints their paths
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("PEGASUS_BENCH_CACHE", Path.home() / ".cache" / "pegasus-bench")) / "tinyml"


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    return tf


def _bn_relu(layers, y, relu: bool = True):
    y = layers.BatchNormalization()(y)
    return layers.Activation("relu")(y) if relu else y


def kws_ds_cnn(tf):
    """Keyword spotting: DS-CNN (49x10x1 MFCC), a 10x4 stride-2 conv and four depthwise-separable blocks of 64."""
    layers = tf.keras.layers
    x = tf.keras.Input((49, 10, 1), batch_size=1)
    y = _bn_relu(layers, layers.Conv2D(64, (10, 4), strides=(2, 2), padding="same")(x))
    for _ in range(4):
        y = _bn_relu(layers, layers.DepthwiseConv2D((3, 3), padding="same")(y))
        y = _bn_relu(layers, layers.Conv2D(64, (1, 1), padding="same")(y))
    y = layers.AveragePooling2D(pool_size=(25, 5))(y)
    y = layers.Dense(12, activation="softmax")(layers.Flatten()(y))
    return tf.keras.Model(x, y)


def vww_mobilenet(tf):
    """Visual wake words: MobileNetV1 alpha 0.25 on 96x96x3, 2 classes."""
    layers = tf.keras.layers
    x = tf.keras.Input((96, 96, 3), batch_size=1)
    y = _bn_relu(layers, layers.Conv2D(8, 3, strides=2, padding="same")(x))
    for filters, stride in ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1), (128, 1),
                            (128, 1), (128, 1), (256, 2), (256, 1)):
        y = _bn_relu(layers, layers.DepthwiseConv2D(3, strides=stride, padding="same")(y))
        y = _bn_relu(layers, layers.Conv2D(filters, 1, padding="same")(y))
    y = layers.AveragePooling2D(pool_size=y.shape[1:3])(y)
    y = layers.Dense(2, activation="softmax")(layers.Flatten()(y))
    return tf.keras.Model(x, y)


def ic_resnet8(tf):
    """Image classification: ResNet-8 (32x32x3 CIFAR-10), three residual stacks of 16/32/64 filters."""
    layers = tf.keras.layers
    x = tf.keras.Input((32, 32, 3), batch_size=1)
    y = _bn_relu(layers, layers.Conv2D(16, 3, padding="same")(x))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        z = _bn_relu(layers, layers.Conv2D(filters, 3, strides=stride, padding="same")(y))
        z = _bn_relu(layers, layers.Conv2D(filters, 3, padding="same")(z), relu=False)
        shortcut = y if stride == 1 else layers.Conv2D(filters, 1, strides=stride, padding="same")(y)
        y = layers.Activation("relu")(layers.Add()([shortcut, z]))
    y = layers.AveragePooling2D(pool_size=y.shape[1:3])(y)
    y = layers.Dense(10, activation="softmax")(layers.Flatten()(y))
    return tf.keras.Model(x, y)


def ad_autoencoder(tf):
    """Anomaly detection: the fully connected autoencoder on 640 inputs (5 frames x 128 mel bins)."""
    layers = tf.keras.layers
    x = tf.keras.Input((640,), batch_size=1)
    y = x
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        y = _bn_relu(layers, layers.Dense(units)(y))
    return tf.keras.Model(x, layers.Dense(640)(y))


#: name -> the builder of the Keras model
MODELS: dict[str, Callable] = {"kws_ds_cnn": kws_ds_cnn, "vww_mobilenet": vww_mobilenet,
                               "ic_resnet8": ic_resnet8, "ad_autoencoder": ad_autoencoder}


def _randomize(tf, model, rng: np.random.Generator) -> None:
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            shapes = [w.shape for w in layer.get_weights()]
            layer.set_weights([rng.uniform(0.5, 1.5, shapes[0]), rng.uniform(-0.2, 0.2, shapes[1]),
                               rng.uniform(-0.2, 0.2, shapes[2]), rng.uniform(0.5, 1.5, shapes[3])])


def _convert(tf, model, rng: np.random.Generator) -> bytes:
    shape = tuple(model.inputs[0].shape)

    def samples():
        for _ in range(20):
            yield [rng.normal(size=shape).astype(np.float32)]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = samples
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return converter.convert()


def tflite_model(name: str, float_model: bool = False) -> Path:
    """The int8 .tflite of MODELS[name] (or its float .tflite), built on first use."""
    builder = MODELS[name]
    key = hashlib.sha256((inspect.getsource(builder) + inspect.getsource(_convert) + str(float_model)).encode())
    path = CACHE / f"{name}{'-float' if float_model else ''}-{key.hexdigest()[:12]}.tflite"
    if not path.exists():
        tf = _tf()
        model = builder(tf)
        _randomize(tf, model, np.random.default_rng(1))
        data = (tf.lite.TFLiteConverter.from_keras_model(model).convert() if float_model
                else _convert(tf, model, np.random.default_rng(2)))
        CACHE.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(data)
        temporary.rename(path)
    return path


if __name__ == "__main__":
    for model_name in MODELS:
        print(tflite_model(model_name), tflite_model(model_name, float_model=True))
