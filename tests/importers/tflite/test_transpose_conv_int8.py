"""Full-integer TRANSPOSE_CONV (Keras Conv2DTranspose through the TFLite converter: SAME and VALID, strides 2 and
(1, 2), kernels smaller and larger than the stride, a bias, per-channel int8 weights, a RELU the converter left
as its own op on another grid) runs in integer (pegasus/quantized/rules/conv_transpose.py: no layer left in
float) and is bit-exact with TFLite's reference kernels; its bundle on Cortex-M7 (qemu) and the host is
bit-exact with ``pegasus inference --dtype quantized``."""

from __future__ import annotations

import pytest

from tests.importers.tflite.convert import seeded
from tests.support.tflite_models import assert_bundle_matches_inference, compare_with_reference, int8_ptq

pytestmark = pytest.mark.xdist_group("tflite")


def int8_transpose_conv() -> bytes:
    tf = seeded(31)
    layers = tf.keras.layers
    x = tf.keras.Input((5, 6, 3), batch_size=1)
    same = layers.Conv2DTranspose(4, 3, strides=2, padding="same", name="up_same")(x)
    valid = layers.Conv2DTranspose(5, 4, strides=2, padding="valid", use_bias=False, name="up_valid")(x)
    wide = layers.Conv2DTranspose(3, (1, 3), strides=(1, 2), padding="same", name="up_wide")(x)
    sparse = layers.Conv2DTranspose(2, 1, strides=2, padding="valid", name="up_sparse")(x)
    relu = layers.ReLU(name="up_relu")(layers.Conv2DTranspose(6, 2, strides=2, name="up_relu_in")(x))
    return int8_ptq(tf, tf.keras.Model(x, [same, valid, wide, sparse, relu]), [(5, 6, 3)], 31)


def test_bit_exact_with_reference_kernels(imported):
    worst, differing = compare_with_reference(imported(int8_transpose_conv))     # asserts every layer ran in integer
    assert worst == 0, f"{differing} samples differ, largest difference {worst} LSB"


@pytest.mark.parametrize("cpu", ["host", "cortex-m7"])
def test_bundle_bit_exact(imported, cpu, tmp_path):
    assert_bundle_matches_inference(imported(int8_transpose_conv), cpu, tmp_path, seed=5)
