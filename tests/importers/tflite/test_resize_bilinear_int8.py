"""Integer RESIZE_BILINEAR (pegasus/ops/integer_resize.py, the tflite rule in quantized/rules/tflite.py): int8 and
int16x8 models resizing up, down and by uneven ratios with TF's three coordinate conventions (asymmetric,
align_corners, half-pixel centres: UpSampling2D, Resizing, tf.image.resize and tf.compat.v1's resize_bilinear)
run in integer (no layer left in float) and are bit-exact with TFLite's reference kernels; their bundles on
Cortex-M7 (qemu) and the host are bit-exact with ``pegasus inference --dtype quantized``."""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.commands.quantized_model import lower_model
from pegasus.ir import serialize
from tests.importers.tflite.convert import from_keras, seeded
from tests.support.tflite_models import assert_bundle_matches_inference, compare_with_reference, int8_ptq

pytestmark = pytest.mark.xdist_group("tflite")
SHAPE = (5, 7, 3)


def _resizes(tf):
    layers = tf.keras.layers
    x = tf.keras.Input(SHAPE, batch_size=1)
    y = layers.Conv2D(4, 1)(x)
    outputs = [
        layers.UpSampling2D(2, interpolation="bilinear")(y),                       # half-pixel centres, x2
        layers.Resizing(9, 4, interpolation="bilinear")(y),                         # up 9/5 and down 4/7
        layers.Lambda(lambda t: tf.compat.v1.image.resize_bilinear(t, (11, 13), align_corners=True))(y),
        layers.Lambda(lambda t: tf.compat.v1.image.resize_bilinear(t, (8, 3)))(y),  # asymmetric
        layers.Lambda(lambda t: tf.image.resize(t, (3, 2)))(y),                     # down, half-pixel centres
    ]
    return x, outputs


def int8_resize_bilinear() -> bytes:
    tf = seeded(41)
    x, outputs = _resizes(tf)
    return int8_ptq(tf, tf.keras.Model(x, outputs), [SHAPE], 41)


def int16x8_resize_bilinear() -> bytes:
    tf = seeded(42)
    x, outputs = _resizes(tf)
    rng = np.random.default_rng(42)

    def samples():
        for _ in range(24):
            yield [rng.uniform(-2, 2, (1, *SHAPE)).astype(np.float32)]

    ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    return from_keras(tf.keras.Model(x, outputs), dynamic_range=True, representative_dataset=samples,
                      target_spec=tf.lite.TargetSpec(supported_ops=ops), inference_input_type=tf.int16,
                      inference_output_type=tf.int16)


@pytest.mark.parametrize("builder", [int8_resize_bilinear, int16x8_resize_bilinear], ids=lambda b: b.__name__)
def test_bit_exact_with_reference_kernels(imported, builder):
    model = imported(builder)
    lowered = lower_model(serialize.load(model[1], model[2]), str(model[3]), show=False)
    assert sum(node.op == "QResizeBilinear" for node in lowered.graph.nodes) == 5
    worst, differing = compare_with_reference(model)     # asserts every layer ran in integer
    assert worst == 0, f"{differing} samples differ, largest difference {worst} LSB"


@pytest.mark.parametrize("builder", [int8_resize_bilinear, int16x8_resize_bilinear], ids=lambda b: b.__name__)
@pytest.mark.parametrize("cpu", ["host", "cortex-m7"])
def test_bundle_bit_exact(imported, builder, cpu, tmp_path):
    assert_bundle_matches_inference(imported(builder), cpu, tmp_path, seed=6)
