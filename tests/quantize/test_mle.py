"""--MLE range refinement: on Laplace data with a few far outliers the range shrinks and the quantization
MSE (computed here with plain numpy) drops; uniform data keeps its range; tied tensors keep one grid;
weights and per-channel entries are left alone; and the demo LeNet keeps its accuracy."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from pegasus.quantized.lower import lower_to_integer
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.quantizers.mle import refine_ranges
from pegasus.quantizers.schemes import Scheme
from pegasus.runtime import interpreter
from tests.quantize.demo_lenet import heldout_digits, import_lenet, load, quantize

U8 = Scheme.of("asymmetric_affine", "uint8")


def mse_u8(values: np.ndarray, q: TensorQuant) -> float:
    """Quantize → dequantize on a u8 grid written out by hand: q = clip(round(x / s) + z, 0, 255)."""
    s, z = q.scale[0], q.zero_point[0]
    back = (np.clip(np.round(values / s) + z, 0, 255) - z) * s
    return float(np.mean((values - back) ** 2))


def table_of(**entries: TensorQuant) -> QuantTable:
    return QuantTable("asymmetric_affine", "u8", "normal", "digest", dict(entries))


def laplace_with_outliers(seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).laplace(0.0, 1.0, 60000)
    values[:4] = [30.0, -30.0, 28.0, -27.0]  # 4 in 60,000 far outside the bulk (|x| < ~12)
    return values.astype(np.float32)


def test_outliers_are_clipped_and_mse_drops():
    values = laplace_with_outliers()
    minmax = U8.activation(float(values.min()), float(values.max()))
    table = table_of(x=copy.deepcopy(minmax))
    assert refine_ranges(table, {"x": values}, U8) == 1
    refined = table.tensors["x"]
    assert (refined.qtype, refined.dtype) == ("u8", "asymmetric_quantized")
    assert refined.max_value[0] - refined.min_value[0] < minmax.max_value[0] - minmax.min_value[0]
    x = values.astype(np.float64)
    assert mse_u8(x, refined) < 0.95 * mse_u8(x, minmax)


def test_uniform_data_keeps_its_range():
    values = np.random.default_rng(1).uniform(-1.0, 3.0, 60000).astype(np.float32)
    minmax = U8.activation(float(values.min()), float(values.max()))
    table = table_of(x=copy.deepcopy(minmax))
    refine_ranges(table, {"x": values}, U8)
    refined = table.tensors["x"]
    width = minmax.max_value[0] - minmax.min_value[0]
    assert refined.min_value[0] == pytest.approx(minmax.min_value[0], abs=0.02 * width)
    assert refined.max_value[0] == pytest.approx(minmax.max_value[0], abs=0.02 * width)


def test_dynamic_fixed_point_gains_a_fractional_bit():
    scheme = Scheme.of("dynamic_fixed_point", "int8")
    values = np.random.default_rng(2).laplace(0.0, 0.25, 60000).astype(np.float32)  # |x| < ~3
    values[:2] = [4.5, -4.4]  # max 4.5 needs 3 integer bits (fl 4); clipped below 4, fl 5 halves the step
    minmax = scheme.activation(float(values.min()), float(values.max()))
    table = table_of(x=copy.deepcopy(minmax))
    assert refine_ranges(table, {"x": values}, scheme) == 1
    refined = table.tensors["x"]
    assert refined.dtype == "dynamic_fixed_point" and refined.fl == minmax.fl + 1 == 5
    assert refined.scale == [2.0 ** -refined.fl] and refined.zero_point == [0]


def test_tied_tensors_keep_one_grid_and_weights_are_untouched():
    conv = laplace_with_outliers()
    pool = np.abs(conv[::2]) + 0.5  # what a max over windows sees: a selection of the same values
    entry = U8.activation(float(conv.min()), float(conv.max()))
    weight = U8.activation(-0.5, 0.5)
    channel = TensorQuant("i8", "symmetric_quantized", "channel", [-1.0, -2.0], [1.0, 2.0], [1 / 127, 2 / 127],
                          [0, 0], axis=0)
    table = table_of(conv=entry, pool=copy.deepcopy(entry), weight=weight, channel=copy.deepcopy(channel))
    assert refine_ranges(table, {"conv": conv, "pool": pool, "channel": conv[:10]}, U8) == 2
    assert table.tensors["conv"] == table.tensors["pool"]
    assert table.tensors["conv"] is not table.tensors["pool"]
    assert table.tensors["conv"] != entry
    assert table.tensors["weight"] is weight and table.tensors["channel"] == channel


def test_lenet_with_mle_keeps_accuracy(tmp_path):
    folder = import_lenet(tmp_path)
    assert quantize(folder, "--MLE", "--batch-size", "5", "--iterations", "4", table="mle.quantize") == 0
    graph, table = load(folder, "mle.quantize")
    images, labels = heldout_digits()
    images, labels = images[::10], labels[::10]  # 100 digits, 10 of each class

    def top1(g) -> float:
        hits = [int(np.argmax(interpreter.run(g, {"data": image[None]})["softmax"])) == label
                for image, label in zip(images, labels)]
        return 100.0 * float(np.mean(hits))

    assert top1(lower_to_integer(graph, table).graph) >= top1(graph) - 2.0
