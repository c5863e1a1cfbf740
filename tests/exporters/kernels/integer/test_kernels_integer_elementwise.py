"""The integer kernels of quantized graphs other than the matrix products (Requantize, QAdd, QMul,
LookupTable, QSoftmax, QAveragePool), BFloat16Round and DtypeConverter, compiled into host bundles and
compared with the NumPy reference interpreter bit for bit; and every value-moving op the integer
lowering passes 8/16-bit tensors through (MaxPool, Reshape, Transpose, Pad at the zero point's level,
nearest Resize, ReduceMax, Q/DQ per tensor and per axis, ...) on uint8/int8/int16 tensors. A few
single-op graphs run bare metal on Cortex-M7/M4/M33 under qemu, equal to the reference too.

Attributes are realistic: multipliers and shifts come from ``quantize_multiplier`` with the
accumulator widths the lowering rules use, and QAdd's from the rule's one-shift recipe.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.llvm.simd import Simd
from pegasus.exporters.glow.target import resolve_target
from pegasus.ops.fixedpoint import bits_needed, quantize_multiplier
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph, check_case, ids, run_cases
from tests.support.conv_tilings import run_tiled
from tests.support.integer_average import AVERAGE, RNG, ints

DTYPES = ("uint8", "int8", "int16")
I64 = np.int64


def bits(dtype: str) -> int:
    """value_bits of the lowering rules: bits of |x - zero_point| for the type."""
    info = np.iinfo(dtype)
    return bits_needed(int(info.max) - int(info.min))


def requant(real: float, acc_bits: int, out_dtype: str, out_zero_point: int = 0, lo=None, hi=None) -> dict:
    m = quantize_multiplier(real, acc_bits)
    return {"multiplier": (m.multiplier,), "shift": (m.shift,), "out_zero_point": out_zero_point,
            "out_dtype": out_dtype, "lo": lo, "hi": hi}


def qadd(ra: float, rb: float, za: int, zb: int, out_dtype: str, zy: int = 0, sub: bool = False, lo=None,
         hi=None) -> dict:
    """QAdd's attributes as pegasus/quantized/rules/elementwise.py computes them (one shared shift)."""
    shift = max(0, min(62, 30 - math.frexp(max(ra, rb))[1]))
    mb = round(rb * 2 ** shift)
    return {"a_zero_point": za, "b_zero_point": zb, "a_multiplier": round(ra * 2 ** shift),
            "b_multiplier": -mb if sub else mb, "shift": shift, "out_zero_point": zy, "out_dtype": out_dtype,
            "lo": lo, "hi": hi}


def exp_table(scale: float) -> np.ndarray:
    """QSoftmax's exp table as the Softmax rule builds it: exp(-d * s_x) in Q15."""
    return np.rint(np.exp(-np.arange(256) * scale) * 32768.0).astype(np.int32)


def softmax(x: np.ndarray, table: np.ndarray, axis: int, out_dtype: str, out_zero_point: int, id_: str,
            levels: int = 256) -> Case:
    """A QSoftmax whose output grid has ``levels`` steps over [0, 1] (the rule's 2**-16 / s_y)."""
    attrs = {**requant(2.0 ** -16 * levels, 18, out_dtype, out_zero_point), "axis": axis}
    return Case(id_, "QSoftmax", [x, table], attrs, constant=(1,))


# ---- the integer ops ---------------------------------------------------------------------------------

REQUANTIZE = [
    Case("Requantize-u8", "Requantize", [ints((3, 41), "uint8")],
         {**requant(0.37, 9, "uint8", 3), "in_zero_point": 128}),
    Case("Requantize-u8-relu", "Requantize", [ints((3, 41), "uint8")],
         {**requant(1.37, 9, "uint8", 17, lo=17), "in_zero_point": 120}),
    Case("Requantize-i8-clip", "Requantize", [ints((2, 3, 7), "int8")],
         {**requant(0.61, 9, "int8", -4, lo=-4, hi=50), "in_zero_point": 5}),
    Case("Requantize-i8-to-u8", "Requantize", [ints((50,), "int8")], {**requant(0.9, 9, "uint8", 131)}),
    Case("Requantize-u8-to-i8", "Requantize", [ints((50,), "uint8")],
         {**requant(0.52, 9, "int8", -128), "in_zero_point": 127}),
    Case("Requantize-i16", "Requantize", [ints((4, 33), "int16")], {**requant(1.7, 17, "int16")}),
    Case("Requantize-i16-to-i8", "Requantize", [ints((4, 33), "int16")],
         {**requant(0.004, 17, "int8", -5), "in_zero_point": 3}),
    Case("Requantize-i8-to-i16", "Requantize", [ints((4, 33), "int8")], {**requant(3.2, 9, "int16", 7)}),
    Case("Requantize-power-of-two", "Requantize", [ints((70,), "int8")], {**requant(0.25, 9, "int8")}),
    Case("Requantize-shift-0", "Requantize", [ints((70,), "int8")],
         {**requant(1.0, 9, "int8", 2, lo=-20, hi=20), "in_zero_point": 9}),
    Case("Requantize-ties", "Requantize", [np.arange(-9, 10, dtype=np.int16)], {**requant(0.5, 17, "int16")}),
    Case("Requantize-i32-accumulator", "Requantize", [ints((3, 20), "int32", -2 ** 24, 2 ** 24)],
         {**requant(0.0013, 26, "int8", 6), "in_zero_point": -77}),
]

QADD = [
    Case("QAdd-u8", "QAdd", [ints((3, 37), "uint8"), ints((3, 37), "uint8")],
         qadd(0.02 / 0.06, 0.05 / 0.06, 128, 120, "uint8", 130)),
    Case("QAdd-i8-channel-broadcast", "QAdd", [ints((2, 3, 4, 5), "int8"), ints((3, 1, 1), "int8")],
         qadd(0.7, 0.2, -3, 11, "int8", -1)),
    Case("QAdd-i8-both-broadcast", "QAdd", [ints((4, 1, 5), "int8"), ints((1, 3, 1), "int8")],
         qadd(0.45, 1.3, 0, 0, "int8")),
    Case("QAdd-i8-scalar", "QAdd", [ints((2, 9), "int8"), ints((1,), "int8")], qadd(1.0, 0.31, 4, -2, "int8", 3)),
    Case("QAdd-u8-sub-relu", "QAdd", [ints((5, 8), "uint8"), ints((5, 8), "uint8")],
         qadd(0.8, 0.66, 100, 140, "uint8", 90, sub=True, lo=90)),
    Case("QAdd-i16", "QAdd", [ints((3, 21), "int16"), ints((3, 21), "int16")], qadd(0.5, 0.25, 0, 0, "int16")),
    Case("QAdd-u8-plus-i8-to-i16", "QAdd", [ints((2, 6), "uint8"), ints((6,), "int8")],
         qadd(3.1, 17.5, 128, -1, "int16", 12, lo=-3000, hi=3000)),
]

QMUL = [
    Case("QMul-u8", "QMul", [ints((3, 37), "uint8"), ints((3, 37), "uint8")],
         {**requant(0.02 * 0.05 / 0.01, 18, "uint8", 2), "a_zero_point": 128, "b_zero_point": 120}),
    Case("QMul-i8-broadcast", "QMul", [ints((2, 3, 4), "int8"), ints((3, 1), "int8")],
         {**requant(0.013, 18, "int8", -7), "a_zero_point": -3, "b_zero_point": 5}),
    Case("QMul-i16-clamp", "QMul", [ints((4, 17), "int16"), ints((4, 17), "int16")],
         {**requant(2.0 ** -15 * 1.3, 34, "int16", 0, lo=-20000, hi=25000)}),
    Case("QMul-i8-times-u8", "QMul", [ints((6, 1, 3), "int8"), ints((1, 5, 3), "uint8")],
         {**requant(0.0071, 18, "uint8", 40), "a_zero_point": 1, "b_zero_point": 128}),
]

TANH_TABLE = np.rint(np.tanh((np.arange(256) - 128) * 0.03) * 127).astype(np.int8)
LOOKUP = [
    Case("LookupTable-i8", "LookupTable", [ints((3, 40), "int8"), TANH_TABLE], constant=(1,)),
    Case("LookupTable-u8", "LookupTable", [ints((3, 40), "uint8"), ints((256,), "uint8")], constant=(1,)),
    Case("LookupTable-u8-to-i16", "LookupTable", [ints((2, 2, 9), "uint8"), ints((256,), "int16")], constant=(1,)),
    Case("LookupTable-i8-to-i32", "LookupTable", [ints((17,), "int8"), ints((256,), "int32")], constant=(1,)),
    Case("LookupTable-i16", "LookupTable", [ints((5, 61), "int16"), ints((513,), "int16")], constant=(1,)),
    Case("LookupTable-i16-to-u8", "LookupTable", [ints((33,), "int16"), ints((513,), "uint8")], constant=(1,)),
    Case("LookupTable-i16-to-u16", "LookupTable", [ints((40,), "int16"), ints((513,), "uint16")], constant=(1,)),
]

WIDE_TABLE = np.concatenate([np.sort(ints((250,), "int32", 1, 2 ** 30))[::-1], np.zeros(6, np.int32)])
SOFTMAX = [
    softmax(ints((3, 10), "uint8"), exp_table(0.1), -1, "uint8", 0, "QSoftmax-u8"),
    softmax(ints((2, 5, 3), "int8"), exp_table(0.05), 1, "int8", -128, "QSoftmax-i8-axis1"),
    softmax(ints((4, 3, 2), "int8", -6, 6), exp_table(0.3), 0, "uint8", 0, "QSoftmax-axis0-close-values"),
    softmax(np.full((2, 7), 9, np.uint8), exp_table(0.1), -1, "uint8", 0, "QSoftmax-uniform-row"),
    softmax(np.array([[5, 5], [0, 255]], np.uint8), exp_table(0.02), -1, "uint8", 0, "QSoftmax-two-classes"),
    # the largest quotient, 65536: a row whose other exp values are 0 (on a 16-bit grid, where it shows)
    softmax(np.array([[255, 0, 0, 0], [3, 3, 0, 0]], np.uint8), exp_table(0.1), -1, "uint16", 0,
            "QSoftmax-one-hot-u16", levels=65535),
    # entries up to 2**30 (ending in zeros): the 64-bit long division instead of one 32-bit udiv
    softmax(np.concatenate([ints((3, 6), "int8"), [[127, -128, -128, -128, -128, -128]]]).astype(np.int8),
            WIDE_TABLE, -1, "uint16", 0, "QSoftmax-wide-table", levels=65535),
]


def _float_bits() -> np.ndarray:
    """Rounding ties (both parities), NaNs with payloads and signs, infinities, the largest float (rounds
    to inf), subnormals, -0 and all-ones bits (the rounding sum wraps), then random floats."""
    special = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F80C000, 0x7FC00001, 0xFFC00000, 0x7F800001,
                        0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x00018000, 0x80000000,
                        0xFFFFFFFF, 0x7FFFFFFF], np.uint32)
    return np.concatenate([special.view(np.float32), (RNG.standard_normal(60) * 100).astype(np.float32)])


FLOAT_BITS = _float_bits()
FLOAT_OPS = [
    Case("BFloat16Round", "BFloat16Round", [FLOAT_BITS]),
    Case("DtypeConverter", "DtypeConverter", [FLOAT_BITS],
         {"from_precision": "asymmetric_affine-u8", "to_precision": "float32"}),
]

INTEGER_CASES = REQUANTIZE + QADD + QMUL + LOOKUP + SOFTMAX + FLOAT_OPS


def check_exact(results: dict, case: Case) -> None:
    """Same dtype, shape and bytes (floats compared bit for bit: NaN payloads included)."""
    for got, want in results[case.id]:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}"), want.view(f"u{want.dtype.itemsize}"))


@pytest.fixture(scope="module")
def integer_results(tmp_path_factory):
    return run_cases(INTEGER_CASES, tmp_path_factory.mktemp("integer"))


@pytest.mark.xdist_group("integer_elementwise")
@pytest.mark.parametrize("case", INTEGER_CASES, ids=ids(INTEGER_CASES))
def test_integer_op_matches_reference(integer_results, case):
    check_exact(integer_results, case)


TILINGS = {"host": None, "scalar-fpu": Simd(4, 32)}   # vector tiles of window sums, and one position at a time


@pytest.fixture(scope="module", params=list(TILINGS), ids=list(TILINGS))
def average_results(request, tmp_path_factory):
    return run_tiled(AVERAGE, tmp_path_factory, "average", TILINGS[request.param])


@pytest.mark.xdist_group("integer_average")
@pytest.mark.parametrize("case", AVERAGE, ids=ids(AVERAGE))
def test_average_pool_matches_reference(average_results, case):
    check_exact(average_results, case)


# ---- value-moving ops on integer tensors ---------------------------------------------------------------


def _moving_cases(dtype: str) -> list[Case]:
    """One configuration of each op the lowering passes integer tensors through."""
    x = ints((2, 3, 4, 6), dtype)
    zero_point = {"uint8": 128, "int8": -3, "int16": 7}[dtype]
    scale = np.float32(0.37)
    per_axis = (RNG.uniform(0.05, 2, 3).astype(np.float32), ints((3,), dtype, zero_point - 2, zero_point + 2))
    floats = (RNG.standard_normal((2, 3, 4, 6)) * 40).astype(np.float32)
    cases = (
        ("MaxPool", "MaxPool", [x], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                     "ceil_mode": 1}, ()),
        ("GlobalMaxPool", "GlobalMaxPool", [x], {}, ()),
        ("Reshape", "Reshape", [x], {"shape": (6, 24)}, ()),
        ("Flatten", "Flatten", [x], {"axis": 2}, ()),
        ("Squeeze", "Squeeze", [ints((1, 3, 1, 5), dtype)], {"axes": (0, 2)}, ()),
        ("Unsqueeze", "Unsqueeze", [ints((3, 5), dtype)], {"axes": (0, 3)}, ()),
        ("Transpose", "Transpose", [x], {"perm": (0, 2, 3, 1)}, ()),
        ("Slice", "Slice", [x], {"starts": (3, -2), "ends": (-1000, 0), "axes": (2, 3), "steps": (-2, -1)}, ()),
        ("Gather", "Gather", [x, np.array([[3, -1], [0, 2]], I64)], {"axis": 3}, (1,)),
        ("Split", "Split", [x], {"split": (2, 4), "axis": 3}, ()),
        ("Tile", "Tile", [x[:, :, :2]], {"repeats": (1, 2, 1, 2)}, ()),
        ("Expand", "Expand", [x[:, :1]], {"shape": (2, 3, 4, 6)}, ()),
        ("DepthToSpace", "DepthToSpace", [ints((1, 8, 2, 3), dtype)], {"blocksize": 2, "mode": "CRD"}, ()),
        ("SpaceToDepth", "SpaceToDepth", [x], {"blocksize": 2}, ()),
        ("ReduceMax", "ReduceMax", [x], {"axes": (1, 3), "keepdims": 1}, ()),
        ("ReduceMin", "ReduceMin", [x], {"axes": (2,), "keepdims": 0}, ()),
        ("Concat", "Concat", [x, ints((2, 1, 4, 6), dtype)], {"axis": 1}, ()),
        ("Pad-zero-point", "Pad", [x], {"pads": (0, 0, 1, 2, 0, 0, 2, 1), "constant_value": float(zero_point)}, ()),
        ("Resize-nearest", "Resize", [x], {"scales": (1.0, 1.0, 1.5, 0.5), "mode": "nearest"}, ()),
        ("Resize-nearest-up", "Resize", [x], {"sizes": (2, 3, 8, 13), "mode": "nearest",
                                              "coordinate_transformation_mode": "asymmetric",
                                              "nearest_mode": "floor"}, ()),
        ("Quantize-tensor", "QuantizeLinear", [floats, scale, np.array(zero_point, dtype)], {}, (1, 2)),
        ("Quantize-axis", "QuantizeLinear", [floats, *per_axis], {"axis": 1}, (1, 2)),
        ("Dequantize-tensor", "DequantizeLinear", [x, scale, np.array(zero_point, dtype)], {}, (1, 2)),
        ("Dequantize-axis", "DequantizeLinear", [x, *per_axis], {"axis": 1}, (1, 2)),
    )
    return [Case(f"{case_id}-{dtype}", op, inputs, attrs, constant) for case_id, op, inputs, attrs, constant in cases]


MOVING = [case for dtype in DTYPES for case in _moving_cases(dtype)]


@pytest.fixture(scope="module")
def moving_results(tmp_path_factory):
    return run_cases(MOVING, tmp_path_factory.mktemp("moving"), per_bundle=36)


@pytest.mark.xdist_group("integer_moving")
@pytest.mark.parametrize("case", MOVING, ids=ids(MOVING))
def test_value_moving_op_on_integers(moving_results, case):
    check_case(moving_results, case)


# ---- Cortex-M ----------------------------------------------------------------------------------------

CORTEX_M = ["cortex-m7", "cortex-m4", "cortex-m33"]
BY_ID = {case.id: case for case in INTEGER_CASES + AVERAGE + MOVING}
BARE_METAL = [BY_ID[case_id] for case_id in (
    "Requantize-i16-to-i8", "QAdd-i8-channel-broadcast", "QAdd-u8-plus-i8-to-i16", "QMul-i16-clamp",
    "LookupTable-i8", "LookupTable-i16", "QSoftmax-i8-axis1", "QSoftmax-wide-table", "QAveragePool-i8-count-pads-ceil",
    "QAveragePool-i8-negative-sums", "QAveragePool-i16-dilated-1d", "QAveragePool-i8-pads-finer",
    "QAveragePool-i16-wide-window-pads", "BFloat16Round", "MaxPool-int8",
    "GlobalMaxPool-int16", "ReduceMin-uint8", "Pad-zero-point-int16", "Quantize-axis-int8",
    "Dequantize-tensor-uint8")]


@pytest.fixture(scope="module")
def bare_metal_graph():
    graph, feeds = build_graph(BARE_METAL)
    with np.errstate(all="ignore"):
        expected = interpreter.run(graph, feeds)
    return graph, feeds, expected


@pytest.mark.xdist_group("integer_cortex_m")
@pytest.mark.parametrize("cpu", CORTEX_M)
def test_integer_ops_on_cortex_m(cpu, bare_metal_graph, tmp_path):
    graph, feeds, expected = bare_metal_graph
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    for name, want in expected.items():
        got = outputs[name]
        np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}"), want.view(f"u{want.dtype.itemsize}"),
                                      err_msg=name)
