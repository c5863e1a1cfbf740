"""Conv and ConvTranspose, and the sliding-window geometry they share with pooling.

``infer`` must give exactly what ``reference`` produces across attributes; results are checked
against onnxruntime on one-node models. ``against_ort`` (also used by the pool, linear and
normalization tests) runs a node through import + interpreter and through onnxruntime, all outputs.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pegasus.ops.registry import ShapeError, make_attrs
from pegasus.ops.spatial import WindowAttrs, tap_counts, transposed_window, window
from tests.support.ops_against_ort import against_ort, assert_all_same, rand
from tests.support.ops_reference import check_infer

# ---- geometry ------------------------------------------------------------------------------------


def test_same_padding_puts_the_odd_pad_at_the_end_for_upper_and_begin_for_lower():
    upper = window(WindowAttrs(auto_pad="SAME_UPPER", strides=(2,)), (7,), (4,))
    lower = window(WindowAttrs(auto_pad="SAME_LOWER", strides=(2,)), (7,), (4,))
    assert upper.out == lower.out == (4,)
    assert (upper.pads_begin, upper.pads_end) == ((1,), (2,))
    assert (lower.pads_begin, lower.pads_end) == ((2,), (1,))


def test_ceil_mode_drops_a_window_that_would_start_in_the_end_padding():
    attrs = WindowAttrs(kernel_shape=(3,), strides=(3,), pads=(1, 1))
    assert window(attrs, (2,)).out == (1,)
    assert window(attrs, (2,), ceil_mode=True).out == (1,)  # ceil gives 2, but window 2 starts on the pad
    assert window(WindowAttrs(kernel_shape=(2,), strides=(2,)), (5,), ceil_mode=True).out == (3,)


def test_tap_counts_never_count_the_ceil_overrun():
    win = window(WindowAttrs(kernel_shape=(3,), strides=(2,), pads=(1, 1)), (6,), ceil_mode=True)
    assert win.out == (4,)  # the last window reads input 5, end pad 6 and overrun 7
    assert tap_counts(win, (6,), include_pads=False).tolist() == [2, 3, 3, 1]
    assert tap_counts(win, (6,), include_pads=True).tolist() == [3, 3, 3, 2]


def test_transposed_geometry_follows_the_spec_formula():
    attrs = WindowAttrs(strides=(3,), pads=(1, 2))
    assert transposed_window(attrs, (3,), (3,), output_padding=(1,)).out == (3 * 2 + 1 + 3 - 3,)
    same = transposed_window(WindowAttrs(auto_pad="SAME_UPPER", strides=(2,)), (3,), (3,))
    assert same.out == (6,) and (same.pads_begin, same.pads_end) == ((0,), (1,))


@pytest.mark.parametrize("attrs,kernel,message", [
    ({"pads": (1, 1)}, (3, 3), "pads has 2 values"), ({"strides": (0, 1)}, (3, 3), "strides must be positive"),
    ({"auto_pad": "SAME"}, (3, 3), "auto_pad 'SAME'"), ({"kernel_shape": (2, 2)}, (3, 3), "does not match"),
    ({"kernel_shape": (9, 3)}, None, "does not fit"), ({}, None, "kernel_shape is required")])
def test_bad_geometry_is_a_shape_error(attrs, kernel, message):
    with pytest.raises(ShapeError, match=message):
        window(WindowAttrs(**attrs), (5, 5), kernel)


# ---- Conv ----------------------------------------------------------------------------------------

CONV_CASES = list(itertools.product((1, 2, 3), (1, 2), ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
                                    (1, 2), (1, 2)))


@pytest.mark.parametrize("nd,group,auto_pad,stride,dilation", CONV_CASES)
def test_conv_infer_matches_reference(nd, group, auto_pad, stride, dilation):
    x, w, b = rand(2, 4, *(7, 6, 5)[:nd]), rand(6, 4 // group, *(3, 2, 3)[:nd]), rand(6)
    attrs = {"group": group, "auto_pad": auto_pad, "strides": [stride] * nd, "dilations": [dilation] * nd}
    if auto_pad == "NOTSET":
        attrs["pads"] = [1] * nd + [0] * nd
    check_infer("Conv", attrs, [x, w, b])
    check_infer("Conv", attrs, [x, w])


@pytest.mark.parametrize("nd,group,auto_pad,stride,dilation", CONV_CASES[::3])
def test_conv_against_onnxruntime(nd, group, auto_pad, stride, dilation):
    if auto_pad.startswith("SAME") and dilation > 1:
        pytest.skip("onnxruntime refuses dilations with SAME padding")
    x, w, b = rand(2, 4, *(7, 6, 5)[:nd]), rand(6, 4 // group, *(3, 2, 3)[:nd]), rand(6)
    attrs = {"group": group, "auto_pad": auto_pad, "strides": [stride] * nd, "dilations": [dilation] * nd}
    if auto_pad == "NOTSET":
        attrs["pads"] = [2] * nd + [1] * nd
    assert_all_same(against_ort("Conv", {"x": x}, attrs, constants={"w": w, "b": b}))


@pytest.mark.parametrize("multiplier,stride", [(1, 1), (2, 2)])
def test_depthwise_conv_against_onnxruntime(multiplier, stride):
    x, w = rand(1, 8, 9, 9), rand(8 * multiplier, 1, 3, 3)
    attrs = {"group": 8, "pads": [1, 1, 1, 1], "strides": [stride, stride], "kernel_shape": [3, 3]}
    assert_all_same(against_ort("Conv", {"x": x}, attrs, constants={"w": w}))


def test_large_conv_is_blocked_and_still_exact():
    x, w = rand(1, 16, 70, 70), rand(8, 16, 5, 5)  # im2col of 1.9M elements: split into row blocks
    from pegasus.ops import conv

    old, conv._COLS_LIMIT = conv._COLS_LIMIT, 100_000
    try:
        assert_all_same(against_ort("Conv", {"x": x}, {"pads": [2, 2, 2, 2]}, constants={"w": w}), atol=1e-4)
    finally:
        conv._COLS_LIMIT = old


def test_conv_float16_keeps_its_type():
    (y,) = check_infer("Conv", {}, [rand(1, 2, 5, 5, dtype=np.float16), rand(3, 2, 3, 3, dtype=np.float16)])
    assert y.dtype == np.float16


@pytest.mark.parametrize("shapes,message", [
    (((1, 4, 5, 5), (6, 3, 3, 3)), "C/group"), (((1, 4, 5, 5), (6, 4, 3)), "rank"),
    (((4, 5), (6, 4, 3)), "at least one spatial axis"), (((1, 4, 5, 5), (6, 4, 3, 3), (5,)), "B has shape")])
def test_conv_bad_shapes_are_shape_errors(shapes, message):
    from pegasus.ir.dtypes import DType
    from pegasus.ir.tensor import TensorType
    from pegasus.ops import get_op

    with pytest.raises(ShapeError, match=message):
        get_op("Conv").infer(make_attrs("Conv"), [TensorType(s, DType.FLOAT32) for s in shapes])


# ---- ConvTranspose -------------------------------------------------------------------------------

TRANSPOSE_CASES = list(itertools.product((1, 2, 3), (1, 2), ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
                                         (1, 2), ("", "pads", "output_padding", "output_shape")))


def _transpose_attrs(nd, group, auto_pad, stride, extra):
    attrs = {"group": group, "auto_pad": auto_pad, "strides": [stride] * nd}
    if extra == "pads" and auto_pad == "NOTSET":
        attrs["pads"] = [1] * nd + [0] * nd
    if extra == "output_padding" and stride > 1:
        attrs["output_padding"] = [1] * nd
    if extra == "output_shape":
        attrs["output_shape"] = [stride * 3 + 1] * nd  # full size is stride*3 + 3: crops 2
    return attrs


@pytest.mark.parametrize("nd,group,auto_pad,stride,extra", TRANSPOSE_CASES)
def test_conv_transpose_infer_matches_reference(nd, group, auto_pad, stride, extra):
    x, w = rand(2, 4, *(4,) * nd), rand(4, 3, *(3,) * nd)
    check_infer("ConvTranspose", _transpose_attrs(nd, group, auto_pad, stride, extra), [x, w, rand(3 * group)])


@pytest.mark.parametrize("nd,group,auto_pad,stride,extra", TRANSPOSE_CASES[::5])
def test_conv_transpose_against_onnxruntime(nd, group, auto_pad, stride, extra):
    x, w, b = rand(2, 4, *(4,) * nd), rand(4, 3, *(3,) * nd), rand(3 * group)
    attrs = _transpose_attrs(nd, group, auto_pad, stride, extra)
    assert_all_same(against_ort("ConvTranspose", {"x": x}, attrs, constants={"w": w, "b": b}))


def test_conv_transpose_dilations_against_onnxruntime():
    x, w = rand(1, 2, 5, 4), rand(2, 3, 3, 2)
    attrs = {"dilations": [2, 3], "strides": [2, 1], "pads": [1, 0, 2, 1]}
    assert_all_same(against_ort("ConvTranspose", {"x": x}, attrs, constants={"w": w}))
