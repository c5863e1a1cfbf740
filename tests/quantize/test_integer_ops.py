"""Every integer kernel of pegasus/ops/integer.py against an independent float64 computation written here.

Kernels whose fixed-point parameters are plain multipliers (QConv, QMatMul, QMul, Requantize) are called
directly with ``quantize_multiplier(r)``; their accumulators must equal the test's own (exact) sums and their
outputs must be within 1 LSB of ``round(acc * r) + zp``. Kernels whose constants the lowering prepares
(QAdd's common shift, QAveragePool's per-count multipliers, QSoftmax's exp table, LookupTable's table) are
exercised through ``lower_to_integer`` on a one-layer float graph, and compared with the float op on the
dequantized inputs, re-quantized.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.ops.fixedpoint import bits_needed, integer_range, quantize_multiplier, quantize_multipliers
from pegasus.ops.registry import get_op, make_attrs
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.runtime import interpreter

EIGHT_BIT = st.sampled_from(["uint8", "int8"])
QTYPE = {"uint8": "u8", "int8": "i8", "int16": "i16"}


def levels(dtype: str, shape) -> st.SearchStrategy[np.ndarray]:
    lo, hi = integer_range(dtype)
    return hnp.arrays(np.dtype(dtype), shape, elements=st.integers(lo, hi))


def zero_points(dtype: str) -> st.SearchStrategy[int]:
    return st.integers(*integer_range(dtype))


def run(op: str, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    return get_op(op).reference(make_attrs(op, **attrs), inputs)[0]


def exact_requant(acc: np.ndarray, multiplier, shift, zero_point: int, dtype: str) -> np.ndarray:
    """clamp(floor(acc * M / 2**S + 1/2) + zp) with Python integers, per element (M, S broadcast)."""
    lo, hi = integer_range(dtype)
    acc, multiplier, shift = np.broadcast_arrays(np.asarray(acc, dtype=object), np.asarray(multiplier, dtype=object),
                                                 np.asarray(shift, dtype=object))
    out = [min(max(math.floor(Fraction(int(a) * int(m), 2 ** int(s)) + Fraction(1, 2)) + zero_point, lo), hi)
           for a, m, s in zip(acc.ravel(), multiplier.ravel(), shift.ravel())]
    return np.array(out, dtype=np.int64).reshape(acc.shape)


def float_requant(acc: np.ndarray, real, zero_point: int, dtype: str) -> np.ndarray:
    lo, hi = integer_range(dtype)
    return np.clip(np.rint(np.asarray(acc, dtype=np.float64) * real) + zero_point, lo, hi).astype(np.int64)


def assert_within_one(got: np.ndarray, expected: np.ndarray) -> None:
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert diff.max(initial=0) <= 1, f"max difference {diff.max()} LSB"


# ---- QConv ------------------------------------------------------------------------------------------------

def conv_float64(x: np.ndarray, w: np.ndarray, strides, pads, dilations, group: int) -> np.ndarray:
    """Plain NCHW convolution, one kernel tap at a time (float64 holds these integer sums exactly)."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh = (h - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg]
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilations[0], j * dilations[1]
                rows = slice(r0, r0 + strides[0] * (oh - 1) + 1, strides[0])
                cols = slice(c0, c0 + strides[1] * (ow - 1) + 1, strides[1])
                patch = xs[:, :, rows, cols]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    return out


@st.composite
def conv_cases(draw):
    group = draw(st.integers(1, 2))
    cin, cout = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * dilations[0] + 1 - pads[0] - pads[2]), 7))
    w = draw(st.integers(max(1, (kw - 1) * dilations[1] + 1 - pads[1] - pads[3]), 7))
    x_dtype, w_dtype, out_dtype = draw(EIGHT_BIT), draw(EIGHT_BIT), draw(EIGHT_BIT)
    x = draw(levels(x_dtype, (draw(st.integers(1, 2)), cin * group, h, w)))
    weights = draw(levels(w_dtype, (cout * group, cin, kh, kw)))
    bias = draw(hnp.arrays(np.int32, (cout * group,), elements=st.integers(-(2**16), 2**16)))
    return dict(x=x, w=weights, bias=bias, group=group, strides=strides, dilations=dilations, pads=pads,
                x_zero_point=draw(zero_points(x_dtype)), w_zero_point=draw(zero_points(w_dtype)),
                out_dtype=out_dtype, out_zero_point=draw(zero_points(out_dtype)),
                per_channel=draw(st.booleans()), gain=draw(st.floats(0.05, 3.0)), data=draw(st.randoms()))


@settings(max_examples=150, deadline=None)
@given(conv_cases())
def test_qconv_matches_float64_convolution(case):
    x, w, bias = case["x"], case["w"], case["bias"]
    acc = conv_float64(x.astype(np.float64) - case["x_zero_point"], w.astype(np.float64) - case["w_zero_point"],
                       case["strides"], case["pads"], case["dilations"], case["group"])
    acc = np.rint(acc).astype(np.int64) + bias.reshape(1, -1, 1, 1)
    channels = w.shape[0]
    # a factor that maps the accumulator's spread onto the output type, per channel or per tensor
    spread = max(float(np.abs(acc).max()), 1.0)
    reals = [case["gain"] * 127 / spread * (0.5 + case["data"].random()) for _ in range(channels if case["per_channel"]
                                                                                        else 1)]
    acc_bits = bits_needed(255 * 255 * w[0].size + 2**16)
    multiplier, shift = quantize_multipliers(reals, acc_bits)
    got = run("QConv", [x, w, bias], kernel_shape=w.shape[2:], strides=case["strides"], pads=case["pads"],
              dilations=case["dilations"], group=case["group"], multiplier=multiplier, shift=shift,
              out_zero_point=case["out_zero_point"], out_dtype=case["out_dtype"], x_zero_point=case["x_zero_point"],
              w_zero_point=case["w_zero_point"])
    assert got.dtype == np.dtype(case["out_dtype"])
    view = (1, -1, 1, 1)
    m, s = np.reshape(multiplier, view), np.reshape(shift, view)
    np.testing.assert_array_equal(got, exact_requant(acc, m, s, case["out_zero_point"], case["out_dtype"]))
    assert_within_one(got, float_requant(acc, np.reshape(reals, view), case["out_zero_point"], case["out_dtype"]))


# ---- QMatMul ----------------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.data(), EIGHT_BIT, EIGHT_BIT, EIGHT_BIT, st.integers(1, 4), st.integers(1, 40), st.integers(1, 5),
       st.booleans(), st.booleans(), st.floats(0.05, 3.0))
def test_qmatmul_matches_float64_matmul(data, a_dtype, b_dtype, out_dtype, rows, depth, columns, batched,
                                        per_column, gain):
    a = data.draw(levels(a_dtype, ((2,) if batched else ()) + (rows, depth)))
    b = data.draw(levels(b_dtype, (depth, columns)))
    bias = data.draw(hnp.arrays(np.int32, (columns,), elements=st.integers(-(2**16), 2**16)))
    za, zb, zo = data.draw(zero_points(a_dtype)), data.draw(zero_points(b_dtype)), data.draw(zero_points(out_dtype))
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb) + bias
    spread = max(float(np.abs(acc).max()), 1.0)
    reals = np.array([gain * 127 / spread * (0.5 + i / columns) for i in range(columns if per_column else 1)])
    multiplier, shift = quantize_multipliers(reals, bits_needed(255 * 255 * depth + 2**16))
    got = run("QMatMul", [a, b, bias], multiplier=multiplier, shift=shift, out_zero_point=zo, out_dtype=out_dtype,
              a_zero_point=za, b_zero_point=zb)
    np.testing.assert_array_equal(got, exact_requant(acc, multiplier, shift, zo, out_dtype))
    assert_within_one(got, float_requant(acc, reals, zo, out_dtype))


# ---- QMul, Requantize -------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.data(), EIGHT_BIT, EIGHT_BIT, st.sampled_from(["uint8", "int8", "int16"]), st.floats(1e-5, 0.05))
def test_qmul_matches_float_product(data, a_dtype, b_dtype, out_dtype, real):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    a = data.draw(levels(a_dtype, shape))
    b = data.draw(levels(b_dtype, shape[-1:]))  # broadcast along the last axis
    za, zb, zo = data.draw(zero_points(a_dtype)), data.draw(zero_points(b_dtype)), data.draw(zero_points(out_dtype))
    m = quantize_multiplier(real, 18)
    got = run("QMul", [a, b], multiplier=(m.multiplier,), shift=(m.shift,), out_zero_point=zo, out_dtype=out_dtype,
              a_zero_point=za, b_zero_point=zb)
    product = (a.astype(np.int64) - za) * (b.astype(np.int64) - zb)
    np.testing.assert_array_equal(got, exact_requant(product, m.multiplier, m.shift, zo, out_dtype))
    assert_within_one(got, float_requant(product, real, zo, out_dtype))


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from(["uint8", "int8", "int16"]), EIGHT_BIT, st.floats(0.01, 100.0))
def test_requantize_changes_grid_within_one_step(data, in_dtype, out_dtype, real):
    x = data.draw(levels(in_dtype, (17,)))
    zi, zo = data.draw(zero_points(in_dtype)), data.draw(zero_points(out_dtype))
    lo, hi = integer_range(out_dtype)
    clamp_lo = data.draw(st.integers(lo, hi))
    m = quantize_multiplier(real, 18)
    got = run("Requantize", [x], multiplier=(m.multiplier,), shift=(m.shift,), out_zero_point=zo, out_dtype=out_dtype,
              in_zero_point=zi, lo=clamp_lo)
    expected = float_requant(x.astype(np.int64) - zi, real, zo, out_dtype)
    assert_within_one(got, np.maximum(expected, clamp_lo))
    assert got.min() >= clamp_lo


# ---- through the lowering: QAdd, QAveragePool, QSoftmax, LookupTable ------------------------------------------

def grid(dtype: str, scale: float, zero_point: int) -> TensorQuant:
    return TensorQuant(QTYPE[dtype], "asymmetric_quantized", "layer", [], [], [scale], [zero_point])


SCALES = st.floats(1e-3, 1.0)


@st.composite
def grids(draw, dtype: str | None = None, scales=SCALES):
    dtype = dtype or draw(EIGHT_BIT)
    return grid(dtype, draw(scales), draw(zero_points(dtype)))


def lowered_layer(op: str, inputs: dict[str, tuple[tuple[int, ...], TensorQuant]], output: TensorQuant,
                  attrs=None) -> tuple:
    """A one-layer float graph, its table and its integer lowering."""
    graph = Graph("layer")
    builder = GraphBuilder(graph, fold=False)
    for name, (shape, _) in inputs.items():
        builder.add_input(name, TensorType(tuple(shape), DType.FLOAT32))
    builder.emit(op, list(inputs), attrs, name="layer", outputs=["y"])
    graph.outputs = ["y"]
    table = QuantTable("asymmetric_affine", output.qtype, "normal", "",
                       {**{name: q for name, (_, q) in inputs.items()}, "y": output})
    return graph, lower_to_integer(graph, table)


def run_lowered(lowered, feeds_int: dict[str, tuple[np.ndarray, TensorQuant]]) -> np.ndarray:
    """Feed integer levels (as their exact float values) and read the layer's integer output."""
    assert not lowered.float_layers, lowered.float_layers
    feeds = {name: ((q.astype(np.float64) - grid.zero_point[0]) * np.float32(grid.scale[0])).astype(np.float32)
             for name, (q, grid) in feeds_int.items()}
    values = interpreter.run(lowered.graph, feeds, keep_all=True)
    for name, (q, _) in feeds_int.items():  # the graph's QuantizeLinear got the levels back exactly
        quantized = next(n.outputs[0] for n in lowered.graph.nodes if n.op == "QuantizeLinear" and n.inputs[0] == name)
        np.testing.assert_array_equal(values[quantized], q)
    return values[lowered.homes["y"][0]]


def real_values(q: np.ndarray, g: TensorQuant) -> np.ndarray:
    return (q.astype(np.float64) - g.zero_point[0]) * g.scale[0]


def on_grid(values: np.ndarray, g: TensorQuant) -> np.ndarray:
    lo, hi = integer_range(g.numpy_dtype)
    return np.clip(np.rint(values / g.scale[0]) + g.zero_point[0], lo, hi).astype(np.int64)


@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from(["Add", "Sub"]), grids(), grids(), grids(scales=st.floats(1e-3, 2.0)))
def test_qadd_matches_float_sum(data, op, ga, gb, gy):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    a, b = data.draw(levels(ga.numpy_dtype, shape)), data.draw(levels(gb.numpy_dtype, shape[-1:]))
    _, lowered = lowered_layer(op, {"a": (shape, ga), "b": (shape[-1:], gb)}, gy)
    assert [n.op for n in lowered.graph.nodes if n.name == "layer"] == ["QAdd"]
    got = run_lowered(lowered, {"a": (a, ga), "b": (b, gb)})
    sign = 1 if op == "Add" else -1
    expected = on_grid(real_values(a, ga) + sign * real_values(b, gb), gy)
    assert_within_one(got, expected)


def average_pool_case(dtype, gx, gy, x, kh, kw, pad, count_include_pad) -> tuple[np.ndarray, np.ndarray]:
    attrs = make_attrs("AveragePool", kernel_shape=(kh, kw), pads=(pad, pad, pad, pad),
                       count_include_pad=count_include_pad)
    _, lowered = lowered_layer("AveragePool", {"x": (x.shape, gx)}, gy, attrs)
    got = run_lowered(lowered, {"x": (x, gx)})
    reference = get_op("AveragePool").reference(attrs, [real_values(x, gx)])[0]  # float64 in, float64 mean
    return got, on_grid(reference, gy)


@settings(max_examples=100, deadline=None)
@given(st.data(), EIGHT_BIT, st.integers(1, 3), st.integers(1, 3), st.integers(0, 1), st.integers(0, 1),
       st.floats(0.1, 10.0))
def test_qaverage_pool_matches_float_mean(data, dtype, kh, kw, pad, count_include_pad, r):
    """QAveragePool requantises each window sum once, by r / count (r = s_x / s_y): within 1 LSB of the
    float mean on the output grid for coarser (r < 1) and finer (r > 1) output grids alike."""
    gx = data.draw(grids(dtype))
    gy = grid(dtype, gx.scale[0] / r, data.draw(zero_points(dtype)))
    shape = (1, 2, data.draw(st.integers(kh, 6)), data.draw(st.integers(kw, 6)))
    got, expected = average_pool_case(dtype, gx, gy, data.draw(levels(dtype, shape)), kh, kw, pad, count_include_pad)
    assert_within_one(got, expected)


@pytest.mark.parametrize("r", [0.5, 1.0, 4.0])
def test_qaverage_pool_single_rounding_on_a_finer_grid(r):
    """Means of 0.5 input steps on a grid r times finer: r / 2 output steps, not round(0.5) * r."""
    gx, gy = grid("uint8", 1.0, 0), grid("uint8", 1.0 / r, 0)
    got, expected = average_pool_case("uint8", gx, gy, np.array([[[[0], [1]]]], np.uint8), 2, 1, 0, 0)
    assert_within_one(got, expected)
    assert abs(int(got.item()) - r / 2) <= 0.5


def softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@settings(max_examples=100, deadline=None)
@given(st.data(), EIGHT_BIT, st.floats(0.005, 0.5), st.integers(2, 12))
def test_qsoftmax_matches_float_softmax(data, dtype, x_scale, width):
    gx = grid(dtype, x_scale, data.draw(zero_points(dtype)))
    gy = grid(dtype, 1 / 256 if dtype == "int8" else 1 / 255, -128 if dtype == "int8" else 0)
    x = data.draw(levels(dtype, (3, width)))
    _, lowered = lowered_layer("Softmax", {"x": ((3, width), gx)}, gy, make_attrs("Softmax", axis=1))
    got = run_lowered(lowered, {"x": (x, gx)})
    assert_within_one(got, on_grid(softmax64(real_values(x, gx), 1), gy))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Softsign", "HardSigmoid"]), grids(),
       grids(scales=st.floats(1e-3, 0.1)))
def test_lookup_table_is_exact_on_every_level(op, gx, gy):
    lo, hi = integer_range(gx.numpy_dtype)
    x = np.arange(lo, hi + 1).astype(gx.numpy_dtype)
    _, lowered = lowered_layer(op, {"x": (x.shape, gx)}, gy)
    assert [n.op for n in lowered.graph.nodes if n.name == "layer"] == ["LookupTable"]
    got = run_lowered(lowered, {"x": (x, gx)})
    real = real_values(x, gx)
    functions = {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh, "Exp": np.exp, "Abs": np.abs,
                 "Neg": np.negative, "Softsign": lambda v: v / (1 + np.abs(v)),
                 "HardSigmoid": lambda v: np.clip(0.2 * v + 0.5, 0, 1)}
    with np.errstate(over="ignore"):
        expected = on_grid(functions[op](real), gy)
    # the table holds f at every level on the output grid: exact, except where f(x) / s_y lies within
    # float32 rounding of a .5 tie (the table is computed from float32 values)
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = functions[op](real) / gy.scale[0]
    near_tie = np.abs(ratio - np.floor(ratio) - 0.5) < 1e-4 * np.maximum(np.abs(ratio), 1)
    mismatch = got.astype(np.int64) != expected
    assert not np.any(mismatch & ~near_tie), (x[mismatch & ~near_tie], got[mismatch & ~near_tie])
    assert_within_one(got, expected)


# ---- int16 lookup tables: 513 knots, linear interpolation -------------------------------------------

def dfp16(fl: int) -> TensorQuant:
    return TensorQuant("i16", "dynamic_fixed_point", "layer", [], [], [2.0 ** -fl], [0], fl=fl)


@settings(max_examples=50, deadline=None)
@given(levels("int16", (300,)), st.sampled_from(["int16", "uint16", "int8", "uint8"]), st.data())
def test_int16_lookup_interpolates_between_knots(x, table_dtype, data):
    """LookupTable on int16 = round-half-up of numpy's linear interpolation through (-32768 + 128 k, table[k])."""
    table = data.draw(levels(table_dtype, (513,)))
    x[:2] = -32768, 32767
    got = get_op("LookupTable").reference(None, [x, table])[0]
    knots = np.arange(513) * 128 - 32768
    expected = np.floor(np.interp(x.astype(np.float64), knots, table.astype(np.float64)) + 0.5)
    assert got.dtype == table.dtype
    np.testing.assert_array_equal(got.astype(np.int64), expected.astype(np.int64))


INT16_FUNCTIONS = {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh,
                   "Softsign": lambda v: v / (1 + np.abs(v)), "Abs": np.abs,
                   "HardSwish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
                   "LeakyRelu": lambda v: np.where(v < 0, 0.01 * v, v)}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(INT16_FUNCTIONS)), st.integers(9, 14), st.integers(10, 15))
def test_int16_lookup_table_is_close_on_every_level(op, fl_x, fl_y):
    """Smooth functions of int16 tensors become interpolated tables within the documented limit of the exact grid."""
    from pegasus.quantized.rules.elementwise import INTERPOLATION_LIMIT

    gx, gy = dfp16(fl_x), dfp16(fl_y)
    x = np.arange(-32768, 32768).astype(np.int16)
    function = INT16_FUNCTIONS[op]
    expected = on_grid(function(real_values(x, gx)), gy)
    knots = np.arange(513) * 128 - 32768
    interpolated = np.floor(np.interp(x, knots, on_grid(function(real_values(knots, gx)), gy)) + 0.5)
    error = np.abs(interpolated - expected).max()
    _, lowered = lowered_layer(op, {"x": (x.shape, gx)}, gy)
    if lowered.float_layers:   # too curved on this range: float, and the tables would indeed have missed
        assert "interpolation misses" in lowered.float_layers[0][2]
        assert error > INTERPOLATION_LIMIT - 2
        return
    assert [n.op for n in lowered.graph.nodes if n.name == "layer"] == ["LookupTable"]
    got = run_lowered(lowered, {"x": (x, gx)})
    assert np.abs(got.astype(np.int64) - expected).max() <= INTERPOLATION_LIMIT + 1


@pytest.mark.parametrize("op", ["Floor", "Sign", "Reciprocal"])
def test_int16_step_functions_stay_float_and_say_why(op):
    _, lowered = lowered_layer(op, {"x": ((8,), dfp16(10))}, dfp16(10))
    assert [(layer, kind) for layer, kind, _ in lowered.float_layers] == [("layer", op)]
    assert "interpolation misses" in lowered.float_layers[0][2]
    _, smooth = lowered_layer("Sigmoid", {"x": ((8,), dfp16(10))}, dfp16(10))
    assert not smooth.float_layers and "LookupTable" in [n.op for n in smooth.graph.nodes]
