"""Conv and ConvTranspose emitters in host bundles against the reference interpreter (rtol 1e-4 /
atol 1e-5; float16 within its own precision): the LeNet layers, padding (explicit, SAME_*, VALID,
windows entirely in the padding), strides (vector, shuffled and gathered), dilations, groups and
depthwise, 1-D/3-D, batches, float16/float64, and weights given as inputs; for ConvTranspose also the
stride phases with no taps, dilations sharing a factor with the stride and pads beyond the kernel;
plus onnxruntime on one model.

The kernels size their register tiles from the target (``simd_of``): every case also runs with the
tiles an AVX-512 host, a Cortex-M7 (scalar FPU, 32 registers) and Helium (8 vector registers) would
get, so the tail tiles, channel remainders and scalar paths those choose are exercised on the host.
``TILINGS``/``tiling``/``run_tiled``/``half_precision`` are shared with test_kernels_linear.py and test_kernels_pool.py.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.errors import PegasusError
from pegasus.exporters.glow.kernels.reference import conv as conv_kernels
from pegasus.exporters.glow.kernels.reference import linear as linear_kernels
from pegasus.exporters.glow.llvm.simd import Simd
from pegasus.exporters.glow.llvm.windows import narrow_tail
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.dtypes import DType
from tests.support.bundle_cases import Case, check_case, ids, run_cases
from tests.support.conv_tilings import TILINGS, half_precision, run_tiled
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(5)


def _x(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


def _w(*shape, fan_in=None, dtype=np.float32) -> np.ndarray:
    """Weights scaled like a trained layer's (sums of products stay of order 1)."""
    fan_in = fan_in or int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)


def _conv(id_, x, w, b=None, constant=(1, 2), **attrs) -> Case:
    inputs = [x, w] + ([b] if b is not None else [])
    return Case(id_, "Conv", inputs, attrs, constant=constant)


CONV_CASES = [
    _conv("lenet-conv1", _x(1, 1, 28, 28), _w(20, 1, 5, 5), _x(20)),
    _conv("lenet-conv2", _x(1, 20, 12, 12), _w(50, 20, 5, 5), _x(50)),
    _conv("pads-strides-group", _x(2, 6, 11, 13), _w(8, 3, 3, 3), pads=[1, 2, 0, 1], strides=[2, 1], group=2),
    _conv("depthwise", _x(1, 8, 9, 10), _w(8, 1, 3, 3), _x(8), pads=[1, 1, 1, 1], group=8),
    _conv("depthwise-multiplier", _x(1, 3, 9, 10), _w(6, 1, 3, 3), pads=[1, 1, 1, 1], group=3),
    _conv("dilated-strided", _x(1, 3, 15, 17), _w(5, 3, 3, 3), dilations=[2, 3], pads=[2, 3, 2, 3], strides=[2, 2]),
    _conv("same-upper", _x(1, 3, 8, 9), _w(5, 3, 3, 3), auto_pad="SAME_UPPER", strides=[2, 3]),
    _conv("same-lower", _x(1, 3, 8, 9), _w(5, 3, 4, 4), _x(5), auto_pad="SAME_LOWER"),
    _conv("valid", _x(1, 2, 8, 9), _w(3, 2, 3, 2), auto_pad="VALID", pads=[]),
    _conv("1d", _x(1, 3, 20), _w(5, 3, 4), _x(5), pads=[2, 1], strides=[3]),
    _conv("1d-wide-stride2", _x(1, 2, 70), _w(3, 2, 3), _x(3), strides=[2], pads=[1, 1]),
    _conv("3d", _x(1, 2, 5, 6, 7), _w(3, 2, 3, 2, 3), _x(3), pads=[1, 0, 1, 1, 1, 0]),
    _conv("pointwise", _x(1, 8, 7, 7), _w(16, 8, 1, 1), _x(16)),
    _conv("pointwise-wide", _x(1, 5, 3, 45), _w(13, 5, 1, 1), _x(13)),
    _conv("window-in-padding", _x(1, 2, 3, 3), _w(3, 2, 5, 5), _x(3), pads=[4, 4, 4, 4]),
    _conv("stride2-rows", _x(1, 3, 9, 40), _w(4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    _conv("stride5-gather", _x(1, 2, 11, 60), _w(3, 2, 3, 3), strides=[1, 5]),
    _conv("wide-odd-row", _x(1, 3, 5, 37), _w(7, 3, 3, 3), _x(7), pads=[1, 1, 1, 1]),
    # output rows of 48 = a 32-position tile and a narrower 16-position one at the padding (AVX-512 tiling;
    # 1-D and grouped: the row kernel, not conv_plane's im2col), 40 = 5 SSE tiles of 8, 44 = 5 and a tail of 4
    _conv("narrow-tail-1d", _x(1, 3, 96), _w(20, 3, 7), _x(20), pads=[3, 3], strides=[2]),
    _conv("narrow-tail-grouped", _x(1, 4, 9, 96), _w(20, 2, 7, 7), _x(20), pads=[3, 3, 3, 3], strides=[2, 2],
          group=2),
    _conv("narrow-tail-sse", _x(1, 2, 6, 88), _w(5, 2, 5, 5), pads=[2, 2, 2, 2], strides=[2, 2]),
    _conv("kernel-wider-than-input", _x(1, 2, 6, 3), _w(2, 2, 3, 5), pads=[1, 2, 1, 2]),
    _conv("weights-as-inputs", _x(1, 3, 7, 7), _w(4, 3, 3, 3), _x(4), constant=(), pads=[1, 1, 1, 1]),
    _conv("batch", _x(3, 2, 6, 6), _w(4, 2, 3, 3), _x(4)),
    _conv("f64", _x(1, 3, 9, 9, dtype=np.float64), _w(4, 3, 3, 3, dtype=np.float64), _x(4, dtype=np.float64),
          pads=[1, 1, 1, 1]),
    half_precision(_conv("f16", _x(1, 3, 9, 11, dtype=np.float16), _w(5, 3, 3, 3, dtype=np.float16),
                _x(5, dtype=np.float16), pads=[1, 1, 1, 1], strides=[1, 2])),
]


def _deconv(id_, x, w, b=None, **attrs) -> Case:
    return Case(id_, "ConvTranspose", [x, w] + ([b] if b is not None else []), attrs, constant=(1, 2))


CONV_TRANSPOSE_CASES = [
    _deconv("plain", _x(1, 3, 5, 6), _w(3, 4, 3, 3, fan_in=27), _x(4)),
    _deconv("strides-pads-group-outpad", _x(2, 4, 5, 6), _w(4, 3, 3, 2, fan_in=12), strides=[2, 3],
            pads=[1, 0, 1, 1], group=2, output_padding=[1, 1]),
    _deconv("1d-dilated", _x(1, 3, 7), _w(3, 2, 4, fan_in=12), strides=[2], dilations=[2], pads=[1, 2]),
    _deconv("same-upper", _x(1, 2, 4, 4), _w(2, 3, 3, 3, fan_in=18), auto_pad="SAME_UPPER", strides=[2, 2]),
    _deconv("output-shape", _x(1, 2, 3, 3), _w(2, 2, 3, 3, fan_in=18), _x(2), strides=[3, 2],
            output_shape=[10, 8]),
    _deconv("upsample-2x2", _x(1, 4, 6, 6), _w(4, 2, 2, 2, fan_in=16), _x(2), strides=[2, 2]),
    _deconv("3d", _x(1, 2, 3, 4, 3), _w(2, 2, 2, 3, 2, fan_in=24), strides=[2, 1, 2]),
    _deconv("kernel-below-stride", _x(1, 2, 4, 5), _w(2, 2, 2, 2, fan_in=8), _x(2), strides=[3, 3]),
    _deconv("dilation-shares-stride", _x(1, 2, 5, 6), _w(2, 3, 3, 3, fan_in=18), strides=[2, 2], dilations=[2, 2],
            pads=[1, 0, 0, 1]),
    _deconv("dilation-3-stride-2", _x(1, 2, 5, 6), _w(2, 2, 3, 2, fan_in=12), strides=[2, 2], dilations=[3, 1]),
    _deconv("pads-beyond-kernel", _x(1, 2, 8, 9), _w(2, 2, 3, 3, fan_in=18), strides=[2, 1], pads=[3, 2, 3, 2]),
    _deconv("depthwise", _x(1, 4, 6, 7), _w(4, 1, 3, 3, fan_in=9), _x(4), strides=[2, 2], pads=[1, 1, 1, 1],
            group=4),
    _deconv("wide-rows", _x(1, 3, 4, 40), _w(3, 4, 3, 3, fan_in=27), strides=[1, 2], pads=[1, 1, 1, 1]),
    half_precision(_deconv("f16", _x(1, 2, 4, 5, dtype=np.float16), _w(2, 3, 3, 3, fan_in=18, dtype=np.float16),
                  strides=[2, 1])),
]

CASES = CONV_CASES + CONV_TRANSPOSE_CASES


@pytest.fixture(scope="module", params=list(TILINGS), ids=list(TILINGS))
def results(request, tmp_path_factory):
    return run_tiled(CASES, tmp_path_factory, f"conv-{request.param}", TILINGS[request.param])


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_tiles_follow_the_register_file():
    """Two vectors of a row times as many channels as the accumulator registers hold; a short row
    gets the power of two holding it (odd vector widths make poor code)."""
    num = linear_kernels.Numeric(None, DType.FLOAT32)
    assert conv_kernels.tile_shape(Simd(16, 16), num, 24, 20) == (8, 6)      # SSE: 8 positions x 6 channels
    assert conv_kernels.tile_shape(Simd(64, 32), num, 8, 50) == (8, 16)      # AVX-512 on an 8-wide row
    assert conv_kernels.tile_shape(Simd(4, 32), num, 24, 50) == (4, 4)       # Cortex-M7: 4 x 4 scalars
    assert conv_kernels.tile_shape(Simd(16, 16), num, 5, 3) == (8, 3)
    assert conv_kernels.tile_shape(Simd(16, 16), num, 3, 3) == (4, 3)
    assert conv_kernels.tile_shape(Simd(16, 16), num, 1, 40) == (1, 12)
    # a row's rest of whole vectors is one narrower tile, any other rest an overlapping one
    assert narrow_tail(112, 32, 16) == 16 and narrow_tail(100, 32, 16) == 0
    assert narrow_tail(40, 8, 4) == 0 and narrow_tail(44, 8, 4) == 4
    assert narrow_tail(24, 32, 16) == 0 and narrow_tail(6, 4, 1) == 0


def test_conv_on_integers_is_refused(tmp_path):
    with pytest.raises(PegasusError, match="Conv on int32"):
        run_cases([_conv("int", np.ones((1, 1, 3, 3), np.int32), np.ones((1, 1, 2, 2), np.int32))], tmp_path)


def test_matches_onnxruntime(tmp_path):
    """Conv (padded, strided) then ConvTranspose back up, bundle against onnxruntime."""
    x = _x(1, 3, 16, 16)
    inits = [numpy_helper.from_array(a, n) for n, a in (("w1", _w(8, 3, 3, 3)), ("b1", _x(8)),
                                                          ("w2", _w(8, 4, 2, 2, fan_in=32)), ("b2", _x(4)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("ConvTranspose", ["h", "w2", "b2"], ["y"], strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = run_bundle_host(import_onnx(model), {"x": x}, workdir=tmp_path)
    np.testing.assert_allclose(ours["y"], theirs[0], rtol=1e-4, atol=1e-5)
