"""QConv and QMatMul cases for integer bundles: operand types and zero points, biases, requantisation,
geometries, extreme accumulators; the output specs the harness reads. Shared by the integer, fused and Cortex-M
kernel tests."""

from __future__ import annotations

import math

import numpy as np

from pegasus.ops.fixedpoint import bits_needed, integer_range, quantize_multipliers
from tests.support.bundle_cases import Case

RNG = np.random.default_rng(31)


def ints(shape, dtype: str, low: int | None = None, high: int | None = None) -> np.ndarray:
    """Random values over the type's range (or [low, high]); the first two are the range's ends."""
    tmin, tmax = integer_range(dtype)
    low, high = tmin if low is None else low, tmax if high is None else high
    values = RNG.integers(low, high, shape, endpoint=True).astype(dtype)
    if values.size >= 2:
        values.flat[:2] = low, high
    return values


def magnitude(dtype: str, zero_point: int) -> int:
    tmin, tmax = integer_range(dtype)
    return max(abs(tmin - zero_point), abs(tmax - zero_point))


def requant(depth: int, x: tuple[str, int], w: tuple[str, int], out_dtype: str, channels: int,
            bias: np.ndarray | None, per_channel: bool, out_zero_point: int = 0, lo=None, hi=None,
            gain: float = 1.0) -> dict:
    """Requantisation attributes spreading the outputs over ``out_dtype`` (times ``gain``)."""
    spread = [(integer_range(dtype)[1] - integer_range(dtype)[0]) / math.sqrt(12) for dtype, _ in (x, w)]
    out_span = integer_range(out_dtype)[1] - integer_range(out_dtype)[0]
    real = gain * out_span / 6 / (math.sqrt(depth) * spread[0] * spread[1])
    reals = real * RNG.uniform(0.5, 2.0, channels if per_channel else 1)
    total = depth * magnitude(*x) * magnitude(*w) + (0 if bias is None else int(np.abs(bias.astype(np.int64)).max()))
    multiplier, shift = quantize_multipliers(reals, bits_needed(total))
    return {"multiplier": multiplier, "shift": shift, "out_zero_point": out_zero_point, "out_dtype": out_dtype,
            "lo": lo, "hi": hi}


def bias_of(kind: str | None, channels: int) -> np.ndarray | None:
    if kind is None:
        return None
    if kind == "int32-extreme":
        return ints((channels,), "int32")
    dtype = "int32" if kind == "int32" else "int64"
    return RNG.integers(-(1 << 20), 1 << 20, channels).astype(dtype)


def conv(case_id: str, x_shape, w_shape, x=("int8", 0), w=("int8", 0), bias: str | None = "int32",
         per_channel=True, out_dtype="int8", out_zero_point=0, lo=None, hi=None, gain=1.0, **geometry) -> Case:
    group = geometry.get("group", 1)
    channels, depth = w_shape[0], int(np.prod(w_shape[1:]))
    b = bias_of(bias, channels)
    attrs = {**requant(depth, x, w, out_dtype, channels, b, per_channel, out_zero_point, lo, hi, gain),
             "x_zero_point": x[1], "w_zero_point": w[1], "kernel_shape": tuple(w_shape[2:]), "group": group,
             **{k: v for k, v in geometry.items() if k != "group"}}
    inputs = [ints(x_shape, x[0]), ints(w_shape, w[0])] + ([b] if b is not None else [])
    return Case(case_id, "QConv", inputs, attrs, constant=(1, 2))


def matmul(case_id: str, a_shape, b_shape, a=("int8", 0), bm=("int8", 0), bias: str | None = "int32",
           per_channel=True, constant_b=True, out_dtype="int8", out_zero_point=0, lo=None, hi=None,
           values=None) -> Case:
    columns = b_shape[-1] if len(b_shape) > 1 else 1
    b = bias_of(bias, columns)
    attrs = {**requant(a_shape[-1], a, bm, out_dtype, columns, b, per_channel, out_zero_point, lo, hi),
             "a_zero_point": a[1], "b_zero_point": bm[1]}
    a_values, b_values = values or (ints(a_shape, a[0]), ints(b_shape, bm[0]))
    inputs = [a_values, b_values] + ([b] if b is not None else [])
    return Case(case_id, "QMatMul", inputs, attrs, constant=((1,) if constant_b else ()) + (2,))


U8 = ("uint8", 128)


I8 = ("int8", 0)


OPERANDS = [  # (id, x, w): asymmetric uint8, symmetric int8, mixed, 16-bit
    ("u8-u8", ("uint8", 131), ("uint8", 119)),
    ("u8-zx0-u8-zw255", ("uint8", 0), ("uint8", 255)),
    ("i8-i8", ("int8", 0), ("int8", 0)),
    ("i8-zx-i8-zw", ("int8", -128), ("int8", 5)),
    ("u8-i8", ("uint8", 128), ("int8", 0)),
    ("i16-i8", ("int16", 0), ("int8", 0)),
    ("i16-zx-i8", ("int16", -300), ("int8", -2)),
    ("i8-i16", ("int8", 3), ("int16", 0)),
    ("i16-i16", ("int16", 0), ("int16", 0)),
    ("i16-zx-i16", ("int16", 5), ("int16", 0)),
    ("u8-i16-zw", ("uint8", 77), ("int16", 1000)),
]


CONV_OPERANDS = [conv(f"QConv-{name}", (1, 5, 9, 8), (6, 5, 3, 3), x, w, pads=(1, 0, 1, 2), strides=(2, 1))
                 for name, x, w in OPERANDS]


MATMUL_OPERANDS = [matmul(f"QMatMul-{name}", (3, 37), (37, 10), x, w) for name, x, w in OPERANDS]


REQUANT = [
    conv("QConv-per-tensor-u8-relu", (1, 3, 7, 7), (4, 3, 3, 3), U8, ("uint8", 121), per_channel=False,
         out_dtype="uint8", out_zero_point=9, lo=9, pads=(1, 1, 1, 1)),
    conv("QConv-clip-i8", (1, 4, 6, 6), (5, 4, 2, 2), I8, I8, lo=-20, hi=50, out_zero_point=-20),
    conv("QConv-no-bias", (1, 4, 6, 6), (5, 4, 2, 2), I8, I8, bias=None),
    conv("QConv-int64-bias", (1, 4, 6, 6), (5, 4, 2, 2), I8, I8, bias="int64"),
    conv("QConv-extreme-int32-bias-to-int32", (1, 2, 5, 5), (3, 2, 3, 3), I8, I8, bias="int32-extreme",
         out_dtype="int32", gain=1e-3),
    conv("QConv-to-int16-wide-multipliers", (1, 3, 6, 6), (4, 3, 3, 3), ("int16", 0), I8, out_dtype="int16",
         gain=200.0),                                  # shifts below 33 that cannot be raised: 64-bit form
    conv("QConv-to-int32", (1, 3, 6, 6), (4, 3, 3, 3), U8, ("uint8", 3), out_dtype="int32", out_zero_point=-7),
    conv("QConv-to-uint8-saturating", (1, 3, 6, 6), (4, 3, 3, 3), I8, I8, out_dtype="uint8", out_zero_point=200,
         gain=30.0),
    matmul("QMatMul-per-tensor-relu", (2, 24), (24, 9), U8, ("uint8", 100), per_channel=False, out_dtype="uint8",
           out_zero_point=4, lo=4),
    matmul("QMatMul-no-bias-clip", (4, 16), (16, 8), I8, I8, bias=None, lo=-5, hi=60),
    matmul("QMatMul-int64-bias-to-int16", (2, 20), (20, 6), ("int16", 0), ("int16", 0), bias="int64",
           out_dtype="int16"),
]


GEOMETRY = [
    conv("QConv-strides-dilations", (1, 3, 11, 10), (4, 3, 3, 2), U8, ("uint8", 140), pads=(2, 0, 1, 3),
         strides=(2, 3), dilations=(2, 2)),
    conv("QConv-1d", (2, 3, 17), (5, 3, 4), I8, I8, pads=(2, 1), strides=(3,), dilations=(2,)),
    conv("QConv-3d", (1, 2, 4, 5, 5), (3, 2, 2, 3, 3), U8, ("uint8", 128), pads=(1, 0, 1, 0, 1, 1)),
    conv("QConv-groups", (1, 6, 7, 7), (4, 3, 3, 3), I8, I8, group=2, pads=(1, 1, 1, 1)),
    conv("QConv-depthwise", (1, 5, 8, 8), (5, 1, 3, 3), U8, ("uint8", 130), group=5, pads=(1, 1, 1, 1),
         strides=(2, 2)),
    conv("QConv-depthwise-multiplier", (2, 3, 6, 7), (6, 1, 3, 3), I8, I8, group=3, pads=(0, 1, 2, 1)),
    conv("QConv-depthwise-dilated-1d-i16", (1, 4, 19), (4, 1, 5), ("int16", 0), ("int16", 0), group=4, pads=(3, 2),
         strides=(2,), dilations=(2,)),
    conv("QConv-depthwise-i8-zw-3d", (1, 2, 3, 4, 5), (2, 1, 2, 2, 3), I8, ("int8", -3), group=2,
         pads=(1, 0, 1, 0, 1, 1)),
    conv("QConv-depthwise-big-window", (1, 2, 6, 6), (2, 1, 9, 9), U8, ("uint8", 120), group=2, pads=(4, 4, 4, 4)),
    conv("QConv-kernel-over-padding", (1, 2, 3, 3), (3, 2, 5, 5), U8, ("uint8", 90), pads=(2, 2, 2, 2)),
    conv("QConv-pointwise-stride", (1, 7, 6, 6), (9, 7, 1, 1), I8, I8, strides=(2, 2)),
    conv("QConv-depth-3", (1, 1, 6, 6), (3, 1, 1, 3), I8, ("int8", 1)),
    conv("QConv-depth-5-odd-channels", (1, 1, 7, 9), (7, 1, 1, 5), U8, ("uint8", 128), pads=(0, 2, 0, 2)),
    conv("QConv-depth-6", (1, 2, 6, 6), (3, 2, 1, 3), ("int16", 0), ("int16", 0)),
    conv("QConv-same-upper", (1, 3, 7, 6), (4, 3, 3, 3), I8, I8, auto_pad="SAME_UPPER", strides=(2, 2)),
    conv("QConv-wide-kernel-row", (1, 2, 3, 40), (3, 2, 1, 19), I8, I8, pads=(0, 9, 0, 9)),
    conv("QConv-lenet-conv2", (1, 20, 12, 12), (50, 20, 5, 5), I8, I8),
    conv("QConv-lenet-conv1-u8", (1, 1, 28, 28), (20, 1, 5, 5), U8, ("uint8", 124), per_channel=False),
    matmul("QMatMul-activation-b", (3, 25), (25, 7), U8, ("uint8", 128), constant_b=False, bias=None),
    matmul("QMatMul-batched-broadcast", (2, 1, 3, 14), (3, 14, 5), I8, ("int8", -3), constant_b=False,
           bias=None, per_channel=False),
    matmul("QMatMul-batched-constant-b", (2, 3, 9), (9, 12), U8, ("uint8", 128)),
    matmul("QMatMul-1d-a", (13,), (13, 6), I8, I8),
    matmul("QMatMul-1d-b", (4, 13), (13,), U8, ("uint8", 128), per_channel=False),
    matmul("QMatMul-odd-depth-fc", (1, 801), (801, 19), ("int8", 17), I8),
    matmul("QMatMul-int16-b-columns", (2, 31), (31, 9), I8, ("int16", 0)),
]


def random_convs(count: int) -> list[Case]:
    """Convolutions of random geometry and operands (a fixed seed: the same cases every run)."""
    cases = []
    for index in range(count):
        rank = int(RNG.integers(1, 3))
        group = int(RNG.choice([1, 1, 2, 3]))
        channels_in, channels_out = group * int(RNG.integers(1, 4)), group * int(RNG.integers(1, 4))
        kernel = tuple(int(k) for k in RNG.integers(1, 5, rank))
        dilations = tuple(int(d) for d in RNG.integers(1, 3, rank))
        strides = tuple(int(s) for s in RNG.integers(1, 4, rank))
        pads = tuple(int(p) for p in RNG.integers(0, 3, 2 * rank))
        spatial = tuple(int(RNG.integers((k - 1) * d + 1, 12)) for k, d in zip(kernel, dilations))
        _, x, w = OPERANDS[int(RNG.integers(len(OPERANDS)))]
        cases.append(conv(f"QConv-random-{index}", (int(RNG.integers(1, 3)), channels_in) + spatial,
                          (channels_out, channels_in // group) + kernel, x, w,
                          bias=[None, "int32", "int64"][int(RNG.integers(3))], per_channel=bool(RNG.integers(2)),
                          out_dtype=str(RNG.choice(["int8", "uint8", "int16"])), group=group, strides=strides,
                          dilations=dilations, pads=pads))
    return cases


I32_DEPTH = 65792     # uint8 x with zx=0 times uint8 w with zw=128: 65,792 * 255 * 128 < 2**31 <= 65,794 * 255 * 128


def extreme_i32() -> Case:
    """An exact sum within 33,000 of -2**31 whose Σ x * w of the stored weights (up to 255 * 255 per
    term) is more than twice 2**31: the i32 accumulator wraps and must still give the exact sum back."""
    a = np.full((2, I32_DEPTH), 255, np.uint8)
    a[1, ::2] = 0
    b = np.zeros((I32_DEPTH, 4), np.uint8)
    b[:, 1] = 255
    b[::3, 2] = 200
    return matmul("QMatMul-i32-bound", (2, I32_DEPTH), (I32_DEPTH, 4), ("uint8", 0), ("uint8", 128),
                  bias="int32-extreme", out_dtype="int32", values=(a, b))


def extreme_i64() -> Case:
    """Two terms more: the bound passes int32, and so does the exact sum, in an i64 accumulator."""
    depth = I32_DEPTH + 2
    a = np.full((1, depth), 255, np.uint8)
    b = np.zeros((depth, 2), np.uint8)
    b[::2, 1] = 255
    return matmul("QMatMul-i64-bound", (1, depth), (depth, 2), ("uint8", 0), ("uint8", 128), bias=None,
                  out_dtype="int32", values=(a, b))


def extreme_i32_columns() -> Case:
    """The i32 bound again on 8 columns, so that x86 PMADDWD (its pairs wrapping too) takes the sums."""
    a = np.full((1, I32_DEPTH), 255, np.uint8)
    b = np.zeros((I32_DEPTH, 8), np.uint8)
    b[:, 1::2] = 255
    b[::3, 2] = 200
    return matmul("QMatMul-i32-bound-8-columns", (1, I32_DEPTH), (I32_DEPTH, 8), ("uint8", 0), ("uint8", 128),
                  bias="int32-extreme", out_dtype="int32", values=(a, b))


MADD = [  # the x86 PMADDWD paths: whole vectors of the reduction, pieces of 16 and 8, zero-padded tails
    conv("QConv-madd-depth-57-u8", (1, 1, 9, 60), (9, 1, 3, 19), U8, ("uint8", 119), pads=(1, 0, 1, 0)),
    conv("QConv-madd-depth-7", (2, 7, 5, 5), (5, 7, 1, 1), ("int8", -3), ("int8", 2)),
    conv("QConv-madd-depth-96-i16", (1, 6, 6, 6), (7, 6, 4, 4), ("int16", 11), ("int16", 0), out_dtype="int16"),
    matmul("QMatMul-madd-104-columns", (3, 45), (45, 104), U8, ("uint8", 131)),
    matmul("QMatMul-madd-24-columns-odd-depth", (5, 33), (33, 24), ("int8", -7), ("int8", 3)),
    matmul("QMatMul-madd-int16", (2, 19), (19, 40), ("int16", 0), ("int16", -4), bias="int64",
           out_dtype="int16"),
    matmul("QMatMul-madd-u8-i8-batched", (2, 1, 17), (2, 17, 16), U8, I8, constant_b=False, bias=None),
]


HOST = (CONV_OPERANDS + MATMUL_OPERANDS + REQUANT + GEOMETRY + MADD + random_convs(16)
        + [extreme_i32(), extreme_i64(), extreme_i32_columns()])


def output_spec(graph) -> dict:
    return {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
