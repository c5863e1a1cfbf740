"""Small valid TFLite models for the corpus: a conv net converted with tf.lite.TFLiteConverter as float, with
dynamic-range (int8 weights) and with full int8 quantization (a pre-quantized model), a reshaping dense model
with float16 weights, and two small real trained models shipped in installed wheels when present (tflite_micro's
sine model, mediapipe's hand_recrop)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from fuzz.targets import CORPUS

REAL = {"sine_float.tflite": "tflite_micro/python/tflite_micro/sine_float.tflite",
        "hand_recrop.tflite": "mediapipe/modules/holistic_landmark/hand_recrop.tflite"}


def _convnet(tf):
    rng = np.random.default_rng(0)
    inputs = tf.keras.Input((8, 8, 3), batch_size=1)
    x = tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="valid")(x)
    x = tf.keras.layers.MaxPooling2D(2)(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(32, activation="relu")(x)
    x = tf.keras.layers.Dense(5)(x)
    outputs = tf.keras.layers.Softmax()(x)
    model = tf.keras.Model(inputs, outputs)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.3 for w in model.get_weights()])
    return model


def _shapes(tf):
    inputs = tf.keras.Input((6, 4), batch_size=1)
    x = tf.keras.layers.Reshape((4, 6))(inputs)
    x = tf.keras.layers.Permute((2, 1))(x)
    a = tf.keras.layers.Concatenate(axis=-1)([x, x])
    b = tf.keras.layers.GlobalAveragePooling1D()(a)
    outputs = tf.keras.layers.Dense(3, activation="tanh")(b)
    return tf.keras.Model(inputs, outputs)


def _convert(tf, model, mode: str) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if mode == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif mode == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif mode == "int8":
        shape = [1, *model.input_shape[1:]]
        rng = np.random.default_rng(1)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([rng.standard_normal(shape).astype(np.float32)] for _ in range(8))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter.convert()


def main() -> None:
    import tensorflow as tf

    folder = CORPUS / "tflite"
    folder.mkdir(parents=True, exist_ok=True)
    convnet, shapes = _convnet(tf), _shapes(tf)
    for name, model, mode in (("convnet_float", convnet, "float"), ("convnet_dynamic", convnet, "dynamic"),
                              ("convnet_int8", convnet, "int8"), ("shapes_float16", shapes, "float16"),
                              ("shapes_int8", shapes, "int8")):
        (folder / f"{name}.tflite").write_bytes(_convert(tf, model, mode))
    site = Path(tf.__file__).resolve().parent.parent
    for name, relative in REAL.items():
        if (site / relative).is_file():
            shutil.copyfile(site / relative, folder / name)


if __name__ == "__main__":
    main()
