"""Every supported Caffe layer, in small networks written here (prototxt text + a caffemodel of random blobs),
imported by pegasus and compared with OpenCV's dnn module on random inputs (rtol = atol = 1e-4).

Each case is one or a few layers after an input; geometry cases stress Caffe's own rules (pooling's ceil
rounding and the clipping of the last window, AVE pooling's divisor with padding, per-axis kernels, grouped
and dilated windows). Where OpenCV lacks a layer (Upsample, Bias, Clip, Interp's shrink, crop and
second bottom, an equal Slice) or departs from Caffe (it ignores InnerProduct's ``transpose``, Log's base,
scale and shift, LRN's ``k`` and Concat's ``concat_dim``), the case is checked against NumPy formulas of
Caffe's kernels written in the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.importers.caffe.loader import import_caffe
from pegasus.runtime.interpreter import run
from tests.importers.caffe.harness import caffe_model, check_against_opencv, run_pegasus


def net(shape, *layers, inputs=("data",)) -> str:
    header = "".join(f'input: "{name}"\ninput_shape {{ {" ".join(f"dim: {d}" for d in s)} }}\n'
                     for name, s in zip(inputs, shape if isinstance(shape[0], tuple) else (shape,)))
    return header + "\n".join(layers)


def layer(name, kind, bottoms="data", tops=None, body=""):
    bottoms = bottoms.split() if isinstance(bottoms, str) else bottoms
    tops = (tops or name).split()
    links = " ".join(f'bottom: "{b}"' for b in bottoms) + " " + " ".join(f'top: "{t}"' for t in tops)
    return f'layer {{ name: "{name}" type: "{kind}" {links} {body} }}'


def rand(*shape, low=-1.0, high=1.0, seed=None):
    return np.random.default_rng(seed if seed is not None else sum(shape) + len(shape)).uniform(low, high, shape)


# (id, prototxt, blobs by layer, options for check_against_opencv)
CASES = [
    # ---- Convolution / Deconvolution / InnerProduct
    ("conv_basic", net((1, 3, 9, 9), layer("c", "Convolution", body="convolution_param { num_output: 4 "
                                           "kernel_size: 3 }")),
     {"c": [rand(4, 3, 3, 3), rand(4)]}, {}),
    ("conv_pad_stride", net((1, 3, 10, 11), layer("c", "Convolution", body="convolution_param { num_output: 5 "
                                                  "kernel_size: 3 pad: 1 stride: 2 }")),
     {"c": [rand(5, 3, 3, 3), rand(5)]}, {}),
    ("conv_hw", net((1, 2, 9, 12), layer("c", "Convolution", body="convolution_param { num_output: 3 kernel_h: 3 "
                                         "kernel_w: 5 pad_h: 1 pad_w: 2 stride_h: 2 stride_w: 3 bias_term: false }")),
     {"c": [rand(3, 2, 3, 5)]}, {}),
    ("conv_per_axis", net((1, 2, 9, 12), layer("c", "Convolution", body="convolution_param { num_output: 3 "
                                               "kernel_size: 1 kernel_size: 3 pad: 0 pad: 1 stride: 2 stride: 1 }")),
     {"c": [rand(3, 2, 1, 3), rand(3)]}, {}),
    ("conv_group_dilation", net((1, 4, 11, 11), layer("c", "Convolution", body="convolution_param { num_output: 6 "
                                                      "kernel_size: 3 group: 2 dilation: 2 pad: 2 }")),
     {"c": [rand(6, 2, 3, 3), rand(6)]}, {}),
    ("conv_depthwise", net((1, 4, 8, 8), layer("c", "Convolution", body="convolution_param { num_output: 4 "
                                               "kernel_size: 3 group: 4 pad: 1 stride: 2 }")),
     {"c": [rand(4, 1, 3, 3), rand(4)]}, {}),
    ("deconv", net((1, 4, 5, 6), layer("d", "Deconvolution", body="convolution_param { num_output: 3 kernel_size: 4 "
                                       "stride: 2 pad: 1 }")),
     {"d": [rand(4, 3, 4, 4), rand(3)]}, {}),
    ("deconv_group", net((1, 4, 5, 5), layer("d", "Deconvolution", body="convolution_param { num_output: 6 "
                                             "kernel_size: 3 stride: 2 group: 2 bias_term: false }")),
     {"d": [rand(4, 3, 3, 3)]}, {}),
    ("inner_product", net((1, 3, 4, 5), layer("fc", "InnerProduct", body="inner_product_param { num_output: 7 }")),
     {"fc": [rand(7, 60), rand(7)]}, {}),
    ("inner_product_axis2", net((2, 3, 4, 5), layer("fc", "InnerProduct", body="inner_product_param { num_output: 6 "
                                                    "axis: 2 }")),
     {"fc": [rand(6, 20), rand(6)]}, {}),
    # ---- Pooling: Caffe's ceil rounding and clipped last windows
    ("max_pool_ceil", net((1, 2, 7, 8), layer("p", "Pooling", body="pooling_param { pool: MAX kernel_size: 3 "
                                              "stride: 2 }")), {}, {}),
    ("max_pool_pad", net((1, 2, 7, 6), layer("p", "Pooling", body="pooling_param { pool: MAX kernel_size: 3 stride: 2 "
                                             "pad: 1 }")), {}, {}),
    ("ave_pool_pad", net((1, 2, 7, 6), layer("p", "Pooling", body="pooling_param { pool: AVE kernel_size: 3 stride: 2 "
                                             "pad: 1 }")), {}, {}),
    ("ave_pool_overrun", net((1, 2, 6, 9), layer("p", "Pooling", body="pooling_param { pool: AVE kernel_size: 3 "
                                                 "stride: 2 }")), {}, {}),
    ("ave_pool_pad_overrun", net((1, 2, 8, 5), layer("p", "Pooling", body="pooling_param { pool: AVE kernel_size: 2 "
                                                     "stride: 2 pad: 1 }")), {}, {}),
    ("ave_pool_dropped_window", net((1, 2, 6, 6), layer("p", "Pooling", body="pooling_param { pool: AVE "
                                                        "kernel_size: 3 stride: 3 pad: 1 }")), {}, {}),
    ("pool_hw", net((1, 2, 9, 10), layer("p", "Pooling", body="pooling_param { pool: MAX kernel_h: 3 kernel_w: 2 "
                                         "stride_h: 2 stride_w: 3 pad_h: 1 pad_w: 1 }")), {}, {}),
    ("pool_floor", net((1, 2, 7, 8), layer("p", "Pooling", body="pooling_param { pool: AVE kernel_size: 3 stride: 2 "
                                           "ceil_mode: false }")), {}, {}),
    ("global_max", net((1, 3, 5, 7), layer("p", "Pooling", body="pooling_param { pool: MAX global_pooling: true }")),
     {}, {}),
    ("global_ave", net((1, 3, 5, 7), layer("p", "Pooling", body="pooling_param { pool: AVE global_pooling: true }")),
     {}, {}),
    # ---- activations and element-wise functions
    ("relu", net((1, 3, 4, 4), layer("r", "ReLU")), {}, {}),
    ("leaky_relu", net((1, 3, 4, 4), layer("r", "ReLU", body="relu_param { negative_slope: 0.2 }")), {}, {}),
    ("relu6", net((1, 3, 4, 4), layer("r", "ReLU6")), {}, {"low": -9, "high": 9}),
    ("prelu", net((1, 3, 4, 4), layer("r", "PReLU")), {"r": [rand(3)]}, {}),
    ("prelu_shared", net((1, 3, 4, 4), layer("r", "PReLU", body="prelu_param { channel_shared: true }")),
     {"r": [rand(1)]}, {}),
    ("elu", net((1, 3, 4, 4), layer("e", "ELU", body="elu_param { alpha: 0.7 }")), {}, {}),
    ("sigmoid", net((1, 3, 4, 4), layer("s", "Sigmoid")), {}, {}),
    ("tanh", net((1, 3, 4, 4), layer("t", "TanH")), {}, {}),
    ("absval", net((1, 3, 4, 4), layer("a", "AbsVal")), {}, {}),
    ("bnll", net((1, 3, 4, 4), layer("b", "BNLL")), {}, {}),
    ("power", net((1, 3, 4, 4), layer("p", "Power", body="power_param { power: 2 scale: 0.5 shift: 1 }")), {}, {}),
    ("power_fraction", net((1, 3, 4, 4), layer("p", "Power", body="power_param { power: 0.5 scale: 2 shift: 5 }")),
     {}, {}),
    ("exp", net((1, 3, 4, 4), layer("e", "Exp")), {}, {}),
    ("exp_base", net((1, 3, 4, 4), layer("e", "Exp", body="exp_param { base: 2 scale: 0.5 shift: 0.25 }")), {}, {}),
    ("log", net((1, 3, 4, 4), layer("l", "Log")), {}, {"low": 0.1, "high": 3.0}),
    ("dropout", net((1, 3, 4, 4), layer("d", "Dropout", body="dropout_param { dropout_ratio: 0.3 }")), {}, {}),
    # ---- normalizations and affines
    ("batch_norm", net((1, 3, 4, 4), layer("bn", "BatchNorm", body="batch_norm_param { eps: 0.001 }")),
     {"bn": [rand(3), rand(3, low=0.2, high=2.0), [0.5]]}, {}),
    ("batch_norm_zero_factor", net((1, 3, 4, 4), layer("bn", "BatchNorm")),
     {"bn": [rand(3), rand(3, low=0.2, high=2.0), [0.0]]}, {}),
    ("batch_norm_batch_stats", net((1, 3, 4, 4), layer("bn", "BatchNorm", body="batch_norm_param "
                                                       "{ use_global_stats: false }")),
     {"bn": [rand(3), rand(3, low=0.2, high=2.0), [1.0]]}, {}),
    ("batch_norm_2d", net((2, 5), layer("bn", "BatchNorm")), {"bn": [rand(5), rand(5, low=0.2, high=2.0), [2.0]]}, {}),
    ("scale_bias", net((1, 3, 4, 4), layer("s", "Scale", body="scale_param { bias_term: true }")),
     {"s": [rand(3), rand(3)]}, {}),
    ("scale_axes", net((2, 3, 4, 5), layer("s", "Scale", body="scale_param { axis: 2 num_axes: 2 }")),
     {"s": [rand(4, 5)]}, {}),
    ("scale_bottom", net(((2, 3, 4, 4), (2, 3)), layer("s", "Scale", bottoms="data f", body="scale_param { axis: 0 }"),
                         inputs=("data", "f")), {}, {}),
    ("lrn_across", net((1, 7, 4, 4), layer("n", "LRN", body="lrn_param { local_size: 5 alpha: 0.3 beta: 0.75 }")),
     {}, {}),
    ("lrn_within", net((1, 2, 6, 5), layer("n", "LRN", body="lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 "
                                           "norm_region: WITHIN_CHANNEL }")), {}, {}),
    ("normalize", net((1, 4, 3, 3), layer("n", "Normalize", body="norm_param { across_spatial: false "
                                          "channel_shared: false }")), {"n": [rand(4, low=1, high=20)]}, {}),
    ("normalize_spatial_shared", net((1, 4, 3, 3), layer("n", "Normalize", body="norm_param { across_spatial: true "
                                                         "channel_shared: true }")), {"n": [[7.5]]}, {}),
    ("softmax", net((1, 5, 3, 2), layer("s", "Softmax")), {}, {}),
    ("softmax_axis", net((2, 3, 4), layer("s", "Softmax", body="softmax_param { axis: -1 }")), {}, {}),
    # ---- combining and moving data
    ("eltwise_sum_coeff", net(((1, 2, 3, 3),) * 3, layer("e", "Eltwise", bottoms="a b c", body="eltwise_param "
                                                         "{ operation: SUM coeff: 1 coeff: -0.5 coeff: 2 }"),
                              inputs=("a", "b", "c")), {}, {}),
    ("eltwise_prod", net(((1, 2, 3, 3),) * 3, layer("e", "Eltwise", bottoms="a b c", body="eltwise_param "
                                                    "{ operation: PROD }"), inputs=("a", "b", "c")), {}, {}),
    ("eltwise_max", net(((1, 2, 3, 3),) * 2, layer("e", "Eltwise", bottoms="a b", body="eltwise_param "
                                                   "{ operation: MAX }"), inputs=("a", "b")), {}, {}),
    ("concat", net(((1, 2, 3, 3), (1, 4, 3, 3)), layer("c", "Concat", bottoms="a b"), inputs=("a", "b")), {}, {}),
    ("concat_axis2", net(((1, 2, 3, 3), (1, 2, 5, 3)), layer("c", "Concat", bottoms="a b", body="concat_param "
                                                              "{ axis: 2 }"), inputs=("a", "b")), {}, {}),
    ("slice_points", net((1, 6, 3, 3), layer("s", "Slice", tops="s1 s2 s3", body="slice_param { axis: 1 "
                                             "slice_point: 1 slice_point: 4 }")), {}, {}),
    ("split", net((1, 2, 3, 3), layer("s", "Split", tops="s1 s2"), layer("a", "Eltwise", bottoms="s1 s2")), {}, {}),
    ("flatten", net((2, 3, 4, 5), layer("f", "Flatten")), {}, {}),
    ("flatten_axes", net((2, 3, 4, 5), layer("f", "Flatten", body="flatten_param { axis: 1 end_axis: 2 }")), {}, {}),
    ("reshape", net((2, 3, 4, 5), layer("r", "Reshape", body="reshape_param { shape { dim: 0 dim: -1 dim: 5 } }")),
     {}, {}),
    ("reshape_axis", net((2, 3, 4, 5), layer("r", "Reshape", body="reshape_param { shape { dim: 2 dim: 2 } axis: 2 "
                                             "num_axes: 1 }")), {}, {}),
    ("permute", net((1, 2, 3, 4), layer("p", "Permute", body="permute_param { order: 0 order: 2 order: 3 order: 1 }")),
     {}, {}),
    ("crop", net(((1, 3, 8, 9), (1, 3, 5, 4)), layer("c", "Crop", bottoms="a b", body="crop_param { axis: 2 "
                                                      "offset: 1 offset: 3 }"), inputs=("a", "b")), {}, {}),
    ("crop_one_offset", net(((1, 3, 8, 9), (1, 2, 5, 4)), layer("c", "Crop", bottoms="a b", body="crop_param "
                                                                 "{ axis: 1 offset: 1 }"), inputs=("a", "b")), {}, {}),
    ("interp_zoom", net((1, 2, 4, 5), layer("i", "Interp", body="interp_param { zoom_factor: 3 }")), {}, {}),
    ("interp_size", net((1, 2, 4, 5), layer("i", "Interp", body="interp_param { height: 7 width: 3 }")), {}, {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_layer_matches_opencv(tmp_path, case):
    _, text, blobs, options = case
    prototxt, caffemodel = caffe_model(tmp_path, text, blobs)
    check_against_opencv(prototxt, caffemodel, **options)


def _interp2(x: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Caffe's caffe_cpu_interp2: bilinear, source coordinate = out * (in - 1) / (out - 1), in float32."""
    h, w = x.shape[-2:]
    rh = np.float32((h - 1) / (out_h - 1)) if out_h > 1 else np.float32(0)
    rw = np.float32((w - 1) / (out_w - 1)) if out_w > 1 else np.float32(0)
    y = np.empty(x.shape[:-2] + (out_h, out_w), np.float32)
    for i in range(out_h):
        r = rh * np.float32(i)
        i0 = int(r)
        i1 = i0 + (1 if i0 < h - 1 else 0)
        a = np.float32(r - i0)
        for j in range(out_w):
            c = rw * np.float32(j)
            j0 = int(c)
            j1 = j0 + (1 if j0 < w - 1 else 0)
            b = np.float32(c - j0)
            y[..., i, j] = ((1 - a) * ((1 - b) * x[..., i0, j0] + b * x[..., i0, j1])
                            + a * ((1 - b) * x[..., i1, j0] + b * x[..., i1, j1]))
    return y


@pytest.mark.parametrize("body, crop, size", [
    ("shrink_factor: 2", (0, 0), (4, 5)),
    ("shrink_factor: 2 zoom_factor: 3", (0, 0), (10, 13)),
    ("zoom_factor: 2 pad_beg: -1 pad_end: -2", (1, 2), (9, 11)),
    ("height: 1 width: 4", (0, 0), (1, 4)),
])
def test_interp_matches_caffe_formula(tmp_path, body, crop, size):
    prototxt, _ = caffe_model(tmp_path, net((1, 2, 8, 9), layer("i", "Interp", body=f"interp_param {{ {body} }}")))
    graph = import_caffe(prototxt, None)
    x = rand(1, 2, 8, 9, seed=3).astype(np.float32)
    begin, end = crop
    expected = _interp2(x[..., begin:8 - end, begin:9 - end], *size)
    np.testing.assert_allclose(run(graph, {"data": x})["i"], expected, rtol=1e-5, atol=1e-6)


def test_interp_size_of_second_bottom(tmp_path):
    text = net(((1, 2, 4, 5), (1, 7, 6, 3)), layer("i", "Interp", bottoms="a b"), inputs=("a", "b"))
    x = rand(1, 2, 4, 5, seed=4)
    got = run_pegasus(tmp_path, text, None, {"a": x, "b": np.zeros((1, 7, 6, 3))})["i"]
    np.testing.assert_allclose(got, _interp2(x.astype(np.float32), 6, 3), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("body, factors", [("scale: 2", (2, 2)), ("scale: 3", (3, 3)),
                                           ("scale_h: 2 scale_w: 3", (2, 3))])
def test_upsample_is_nearest_neighbour(tmp_path, body, factors):
    prototxt, _ = caffe_model(tmp_path, net((1, 2, 3, 4), layer("u", "Upsample", body=f"upsample_param {{ {body} }}")))
    graph = import_caffe(prototxt, None)
    x = rand(1, 2, 3, 4, seed=5).astype(np.float32)
    expected = np.repeat(np.repeat(x, factors[0], axis=2), factors[1], axis=3)
    np.testing.assert_array_equal(run(graph, {"data": x})["u"], expected)


# ---- cases against Caffe's formulas in NumPy (OpenCV lacks the layer or departs from Caffe there)
def test_inner_product_transpose(tmp_path):
    w, x = rand(6, 4), rand(2, 6, seed=1)
    text = net((2, 6), layer("fc", "InnerProduct", body="inner_product_param { num_output: 4 transpose: true "
                                                        "bias_term: false }"))
    got = run_pegasus(tmp_path, text, {"fc": [w]}, {"data": x})["fc"]
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body, formula", [
    ("", np.log),
    ("shift: 3", lambda x: np.log(x + 3)),
    ("base: 10 scale: 2 shift: 5", lambda x: np.log10(2 * x + 5)),
    ("base: 2 scale: -0.5 shift: 1.5", lambda x: np.log2(1.5 - 0.5 * x)),
])
def test_log(tmp_path, body, formula):
    x = rand(1, 3, 4, 4, low=0.1, high=2.0)
    got = run_pegasus(tmp_path, net((1, 3, 4, 4), layer("l", "Log", body=f"log_param {{ {body} }}")), None,
                      {"data": x})["l"]
    np.testing.assert_allclose(got, formula(x), rtol=1e-5, atol=1e-5)


def test_bias(tmp_path):
    b, x = rand(3, 4), rand(2, 3, 4, 5, seed=2)
    text = net((2, 3, 4, 5), layer("b", "Bias", body="bias_param { axis: 1 num_axes: 2 }"),
               layer("c", "Bias", bottoms="data", body="bias_param { axis: 1 }"))
    got = run_pegasus(tmp_path, text, {"b": [b], "c": [b[:, 0]]}, {"data": x})
    np.testing.assert_allclose(got["b"], x + b[None, :, :, None], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["c"], x + b[None, :, 0, None, None], rtol=1e-6, atol=1e-6)


def test_bias_of_second_bottom(tmp_path):
    x, y = rand(2, 3, 4, 5, seed=2), rand(3, 4, seed=3)
    text = net(((2, 3, 4, 5), (3, 4)), layer("b", "Bias", bottoms="x y"), inputs=("x", "y"))
    got = run_pegasus(tmp_path, text, None, {"x": x, "y": y})["b"]
    np.testing.assert_allclose(got, x + y[None, :, :, None], rtol=1e-6, atol=1e-6)


def test_lrn_across_channels_with_k(tmp_path):
    x = rand(1, 7, 3, 3)
    text = net((1, 7, 3, 3), layer("n", "LRN", body="lrn_param { local_size: 5 alpha: 0.3 beta: 0.75 k: 2 }"))
    got = run_pegasus(tmp_path, text, None, {"data": x})["n"]
    squares = np.pad(x * x, [(0, 0), (2, 2), (0, 0), (0, 0)])
    window = sum(squares[:, i:i + 7] for i in range(5))
    np.testing.assert_allclose(got, x / (2 + 0.3 / 5 * window) ** 0.75, rtol=1e-5, atol=1e-6)


def test_concat_dim(tmp_path):
    a, b = rand(1, 2, 3, 3), rand(1, 2, 3, 1)
    text = net(((1, 2, 3, 3), (1, 2, 3, 1)), layer("c", "Concat", bottoms="a b", body="concat_param { concat_dim: 3 }"),
               inputs=("a", "b"))
    np.testing.assert_array_equal(run_pegasus(tmp_path, text, None, {"a": a, "b": b})["c"],
                                  np.concatenate([a, b], axis=3).astype(np.float32))


def test_slice_into_equal_parts(tmp_path):
    x = rand(1, 2, 6, 3)
    text = net((1, 2, 6, 3), layer("s", "Slice", tops="s1 s2 s3", body="slice_param { axis: 2 }"))
    got = run_pegasus(tmp_path, text, None, {"data": x})
    for index, top in enumerate(("s1", "s2", "s3")):
        np.testing.assert_array_equal(got[top], x[:, :, 2 * index:2 * index + 2].astype(np.float32))


def test_clip(tmp_path):
    x = rand(1, 3, 4, 4)
    text = net((1, 3, 4, 4), layer("c", "Clip", body="clip_param { min: -0.5 max: 0.75 }"))
    np.testing.assert_array_equal(run_pegasus(tmp_path, text, None, {"data": x})["c"],
                                  np.clip(x.astype(np.float32), -0.5, 0.75))
