"""PReLU models for the integer PRelu tests (QPRelu): a Keras model TFLite quantizes to full int8 (PRELU with an
int8 slope of its own grid), and a float ONNX model pegasus quantizes itself, with the calibration samples."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph
from tests.importers.tflite.convert import seeded
from tests.support.tflite_models import int8_ptq


def int8_prelu() -> bytes:
    """CONV_2D then PRELU with one slope per channel (shared over height and width, slopes in [-0.5, 1)), a strided
    CONV_2D then PRELU with a slope per element (no shared axis: no broadcast), full int8."""
    tf = seeded(36)
    layers = tf.keras.layers
    uniform = tf.keras.initializers.RandomUniform
    x = tf.keras.Input((10, 8, 3), batch_size=1)
    y = layers.Conv2D(8, 3, padding="same")(x)
    y = layers.PReLU(alpha_initializer=uniform(-0.5, 1.0), shared_axes=[1, 2])(y)
    y = layers.Conv2D(6, 3, strides=2)(y)
    y = layers.PReLU(alpha_initializer=uniform(0.0, 0.3))(y)
    return int8_ptq(tf, tf.keras.Model(x, y), [(10, 8, 3)], 36)


#: slopes of the ONNX model's PReLU layers: per channel from 0.01 to 0.9 and one negative, then one for all
SLOPES = (np.array([0.01, 0.1, 0.25, 0.5, 0.9, -0.2], np.float32).reshape(6, 1, 1), np.array([0.2], np.float32))


def float_prelu_graph() -> Graph:
    """Conv (3 -> 6) -> PRelu (a slope per channel) -> Conv (6 -> 4) -> PRelu (one slope), NCHW float32."""
    rng = np.random.default_rng(36)
    w1 = rng.normal(0, 0.4, (6, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 6, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("PRelu", ["c1", "slope1"], ["p1"], name="prelu1"),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2"),
             helper.make_node("PRelu", ["c2", "slope2"], ["y"], name="prelu2")]
    weights = [numpy_helper.from_array(value, name) for name, value in
               (("w1", w1), ("w2", w2), ("slope1", SLOPES[0]), ("slope2", SLOPES[1]))]
    body = helper.make_graph(nodes, "prelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], weights)
    return import_onnx(helper.make_model(body, opset_imports=[helper.make_opsetid("", 13)]))


def prelu_samples(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)} for _ in range(count)]
