"""TensorFlow → .tflite for the test model builders: ``tf.function``s and Keras models through
``tf.lite.TFLiteConverter``, with the converter options the tests vary (float16 weights, dynamic range,
sparsity). TensorFlow is imported inside the functions, so a run that finds every model cached never
loads it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def tensorflow():
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    return tf


def seeded(seed: int = 0):
    """TensorFlow with Keras' and NumPy's generators seeded, for random weights that are the same every build."""
    tf = tensorflow()
    tf.keras.utils.set_random_seed(seed)
    return tf


def spec(*shape: int, dtype: str = "float32"):
    tf = tensorflow()
    return tf.TensorSpec(shape, getattr(tf, dtype))


def _convert(converter, options: dict) -> bytes:
    tf = tensorflow()
    for key, value in options.items():
        if key == "float16":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        elif key == "dynamic_range":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        elif key == "sparsity":
            converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
        else:
            setattr(converter, key, value)
    return converter.convert()


def from_function(fn: Callable, specs: Sequence, **options) -> bytes:
    """Convert ``fn`` traced with ``specs``; options: float16/dynamic_range/sparsity=True or converter fields."""
    tf = tensorflow()
    traced = tf.function(fn, input_signature=list(specs))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([traced.get_concrete_function()], traced)
    return _convert(converter, options)


def from_keras(model, **options) -> bytes:
    tf = tensorflow()
    return _convert(tf.lite.TFLiteConverter.from_keras_model(model), options)


def randomize_batchnorm(model, rng: np.random.Generator) -> None:
    """Give every BatchNormalization layer random statistics, so the folding the converter does is seen."""
    tf = tensorflow()
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            gamma, beta, mean, var = (w.shape for w in layer.get_weights())
            layer.set_weights([rng.uniform(0.5, 1.5, gamma).astype(np.float32),
                               rng.uniform(-0.2, 0.2, beta).astype(np.float32),
                               rng.uniform(-0.2, 0.2, mean).astype(np.float32),
                               rng.uniform(0.5, 1.5, var).astype(np.float32)])
