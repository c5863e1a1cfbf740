"""Channels-last float kernels (kernels/reference/conv_channels_last.py, kernels/reference/pool_channels_last.py) in
bundles against onnxruntime running the channels-first ONNX op on the transposed input (rtol 1e-4 / atol 1e-5;
float16 within its own precision, integers exactly).

Covers float32 (a few float16/float64) Conv (dense, grouped, depthwise with multiplier 1, 2 and 3, 1×1,
1-D, 3-D, strides, dilations, SAME/VALID/explicit pads, windows entirely in the padding, odd channel counts
for the tail lanes, batch 2), ConvTranspose, MaxPool/AveragePool (ceil_mode, count_include_pad) and the
global pools; every case under the register tilings of test_kernels_conv.py (host, AVX-512, scalar FPU as
on Cortex-M4/M7, Helium), a subset bare metal on Cortex-M7 and Cortex-M4 under QEMU. Convolutions fused
with their element-wise consumers and pooling; a channels-last network compiles without a transpose and
needs no more activation memory than its channels-first twin; layers without a channels-last kernel
(weights given at run time, MaxPool's Indices) still run, between transposes; on Cortex-M7 the
channels-last kernels take no more instructions than the channels-first ones.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.fused import conv_pool as conv_pool_kernels
from pegasus.exporters.glow.kernels.reference import conv as conv_kernels
from pegasus.exporters.glow.kernels.reference import conv_channels_last, pool_channels_last
from pegasus.exporters.glow.kernels.reference import linear as linear_kernels
from pegasus.exporters.glow.kernels.reference import pool as pool_kernels
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.simd import Simd
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from tests.support import toolchains
from tests.support.conv_tilings import TILINGS
from tests.support.host_runner import load_bundle

RNG = np.random.default_rng(17)
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.uint8): TensorProto.UINT8}


@contextmanager
def tiling(simd: Simd | None):
    """Make every dense kernel, channels-last ones included, tile for ``simd`` whatever the target."""
    if simd is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for module in (conv_kernels, linear_kernels, pool_kernels, conv_pool_kernels, conv_channels_last,
                       pool_channels_last):
            patch.setattr(module, "simd_of", lambda target: simd)
        yield


def first(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(array, -1, 1))


def last(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(array, 1, -1))


@dataclass
class Case:
    """One channels-last layer: ``x`` is the channels-first input, ``w``/``b`` the ONNX weights."""

    id: str
    op: str
    x: np.ndarray
    attrs: dict = field(default_factory=dict)
    w: np.ndarray | None = None
    b: np.ndarray | None = None
    weights_as_inputs: bool = False
    indices: bool = False
    rtol: float = 1e-4
    atol: float = 1e-5

    def onnx_outputs(self) -> list[np.ndarray]:
        """onnxruntime's channels-first result (float16/float64 inputs computed in float32), made channels
        last (MaxPool's Indices stay as they are: flat positions in the channels-first input). ONNX has no
        integer GlobalMaxPool: NumPy's max stands in."""
        x = self.x.astype(np.float32) if self.x.dtype.kind == "f" else self.x
        if self.op == "GlobalMaxPool" and x.dtype.kind != "f":
            return [last(x.max(axis=tuple(range(2, x.ndim)), keepdims=True))]
        inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (("w", self.w), ("b", self.b))
                 if a is not None]
        names = ["x"] + [init.name for init in inits]
        outputs = ["y", "indices"] if self.indices else ["y"]
        onnx_attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.attrs.items()}
        node = helper.make_node(self.op, names, outputs, **onnx_attrs)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", ONNX_TYPES[x.dtype], x.shape)],
                                  [helper.make_tensor_value_info(n, t, None) for n, t in
                                   zip(outputs, (ONNX_TYPES[x.dtype], TensorProto.INT64))],
                                  inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        model.ir_version = 9
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        result = session.run(None, {"x": x})
        return [last(result[0]).astype(self.x.dtype)] + result[1:]


def _x(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


def _w(*shape, fan_in=None) -> np.ndarray:
    fan_in = fan_in or int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _conv(id_, x, w, b=None, **attrs) -> Case:
    return Case(id_, "Conv", x, attrs, w, b)


def _deconv(id_, x, w, b=None, **attrs) -> Case:
    return Case(id_, "ConvTranspose", x, attrs, w, b)


def _half(case: Case) -> Case:
    case.x = case.x.astype(np.float16)
    case.w, case.b = (None if a is None else a.astype(np.float16) for a in (case.w, case.b))
    case.rtol, case.atol = 2e-3, 2e-3
    return case


def _double(case: Case) -> Case:
    case.x = case.x.astype(np.float64)
    case.w, case.b = (None if a is None else a.astype(np.float64) for a in (case.w, case.b))
    return case


CONV_CASES = [
    _conv("dense-3x3-pads-batch", _x(2, 3, 9, 10), _w(5, 3, 3, 3), _x(5), pads=[1, 1, 1, 1]),
    _conv("dense-17-channels", _x(1, 17, 6, 7), _w(17, 17, 3, 3), _x(17), pads=[1, 1, 1, 1]),
    _conv("dense-no-bias-strides", _x(1, 4, 11, 13), _w(8, 4, 3, 3), strides=[2, 2], pads=[1, 0, 1, 2]),
    _conv("dense-dilated", _x(1, 3, 15, 17), _w(5, 3, 3, 3), dilations=[2, 3], pads=[2, 3, 2, 3], strides=[2, 1]),
    _conv("same-upper", _x(1, 3, 8, 9), _w(5, 3, 3, 3), auto_pad="SAME_UPPER", strides=[2, 3]),
    _conv("same-lower", _x(1, 3, 8, 9), _w(5, 3, 4, 4), _x(5), auto_pad="SAME_LOWER"),
    _conv("valid", _x(1, 2, 8, 9), _w(3, 2, 3, 2), auto_pad="VALID"),
    _conv("groups", _x(2, 6, 7, 9), _w(8, 3, 3, 3), _x(8), group=2, pads=[1, 2, 0, 1]),
    _conv("groups-one-output-each", _x(1, 8, 6, 6), _w(4, 2, 3, 3), group=4, pads=[1, 1, 1, 1]),
    _conv("depthwise-17", _x(1, 17, 9, 10), _w(17, 1, 3, 3), _x(17), group=17, pads=[1, 1, 1, 1]),
    _conv("depthwise-32-stride2", _x(1, 32, 12, 12), _w(32, 1, 3, 3), _x(32), group=32, strides=[2, 2],
          auto_pad="SAME_UPPER"),
    _conv("depthwise-5x5-dilated", _x(2, 3, 13, 11), _w(3, 1, 5, 5), group=3, dilations=[2, 1], pads=[4, 2, 4, 2]),
    _conv("depthwise-multiplier-2", _x(1, 5, 8, 9), _w(10, 1, 3, 3), _x(10), group=5, pads=[1, 1, 1, 1]),
    _conv("depthwise-multiplier-3", _x(1, 3, 7, 8), _w(9, 1, 3, 3), group=3, pads=[0, 1, 2, 1], strides=[1, 2]),
    _conv("pointwise-32-64", _x(1, 32, 8, 8), _w(64, 32, 1, 1), _x(64)),
    _conv("pointwise-odd", _x(1, 5, 3, 11), _w(17, 5, 1, 1), _x(17)),
    _conv("one-input-channel", _x(1, 1, 10, 10), _w(3, 1, 5, 5), _x(3), pads=[2, 2, 2, 2]),
    _conv("one-output-channel", _x(1, 3, 6, 6), _w(1, 3, 3, 3), _x(1)),
    _conv("1d", _x(1, 3, 20), _w(5, 3, 4), _x(5), pads=[2, 1], strides=[3]),
    _conv("1d-depthwise", _x(2, 17, 30), _w(17, 1, 5), group=17, pads=[2, 2]),
    _conv("3d", _x(1, 2, 5, 6, 7), _w(3, 2, 3, 2, 3), _x(3), pads=[1, 0, 1, 1, 1, 0]),
    _conv("window-in-padding", _x(1, 2, 3, 3), _w(3, 2, 5, 5), _x(3), pads=[4, 4, 4, 4]),
    _conv("depthwise-window-in-padding", _x(1, 3, 3, 3), _w(3, 1, 5, 5), _x(3), group=3, pads=[4, 4, 4, 4]),
    _conv("kernel-wider-than-input", _x(1, 2, 6, 3), _w(2, 2, 3, 5), pads=[1, 2, 1, 2]),
    _conv("long-row", _x(1, 3, 2, 45), _w(4, 3, 1, 3), _x(4), pads=[0, 1, 0, 1]),
    _half(_conv("f16", _x(1, 3, 9, 11), _w(5, 3, 3, 3), _x(5), pads=[1, 1, 1, 1], strides=[1, 2])),
    _half(_conv("f16-depthwise", _x(1, 9, 7, 7), _w(9, 1, 3, 3), _x(9), group=9, pads=[1, 1, 1, 1])),
    _double(_conv("f64", _x(1, 3, 9, 9), _w(5, 3, 3, 3), _x(5), pads=[1, 1, 1, 1])),
    _double(_conv("f64-depthwise", _x(1, 6, 7, 8), _w(6, 1, 3, 3), group=6, pads=[1, 1, 1, 1], strides=[2, 1])),
]

CONV_TRANSPOSE_CASES = [
    _deconv("deconv-plain", _x(1, 3, 5, 6), _w(3, 4, 3, 3, fan_in=27), _x(4)),
    _deconv("deconv-strides-pads-group-outpad", _x(2, 4, 5, 6), _w(4, 3, 3, 2, fan_in=12), strides=[2, 3],
            pads=[1, 0, 1, 1], group=2, output_padding=[1, 1]),
    _deconv("deconv-1d-dilated", _x(1, 3, 7), _w(3, 2, 4, fan_in=12), strides=[2], dilations=[2], pads=[1, 2]),
    _deconv("deconv-upsample-2x2", _x(1, 17, 6, 6), _w(17, 5, 2, 2, fan_in=68), _x(5), strides=[2, 2]),
    _deconv("deconv-depthwise", _x(1, 4, 6, 7), _w(4, 1, 3, 3, fan_in=9), _x(4), strides=[2, 2],
            pads=[1, 1, 1, 1], group=4),
    _deconv("deconv-kernel-below-stride", _x(1, 2, 4, 5), _w(2, 2, 2, 2, fan_in=8), _x(2), strides=[3, 3]),
]

POOL_CASES = [
    Case("max-3x3-pads-ceil", "MaxPool", _x(2, 17, 11, 13),
         dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    Case("max-2x2-32", "MaxPool", _x(1, 32, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    Case("max-dilated-1", "MaxPool", _x(1, 1, 11, 13), dict(kernel_shape=[3, 2], dilations=[2, 2], pads=[2, 1, 2, 1])),
    Case("max-1d", "MaxPool", _x(1, 3, 20), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    Case("max-3d-same", "MaxPool", _x(1, 5, 5, 6, 7), dict(kernel_shape=[2, 3, 2], auto_pad="SAME_UPPER")),
    Case("max-int8", "MaxPool", RNG.integers(-128, 128, (1, 5, 9, 9)).astype(np.int8),
         dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    Case("max-uint8-ceil", "MaxPool", RNG.integers(0, 256, (1, 3, 9, 9)).astype(np.uint8),
         dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    Case("avg-pads-ceil", "AveragePool", _x(1, 17, 11, 13),
         dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    Case("avg-count-pads-ceil", "AveragePool", _x(2, 5, 11, 13),
         dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)),
    Case("avg-same-lower-count-pads", "AveragePool", _x(1, 3, 11, 13),
         dict(kernel_shape=[2, 4], auto_pad="SAME_LOWER", count_include_pad=1)),
    Case("avg-uneven-pads", "AveragePool", _x(1, 2, 7, 30),
         dict(kernel_shape=[3, 5], pads=[0, 2, 2, 1], strides=[1, 2])),
    Case("avg-dilated", "AveragePool", _x(1, 3, 12, 14),
         dict(kernel_shape=[2, 3], dilations=[3, 2], pads=[1, 2, 1, 2])),
    Case("avg-1d", "AveragePool", _x(2, 3, 21), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    Case("avg-3d", "AveragePool", _x(1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 3], pads=[1, 1, 1, 0, 1, 1])),
    _half(Case("avg-f16", "AveragePool", _x(1, 3, 11, 13), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))),
    _double(Case("avg-f64", "AveragePool", _x(1, 5, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1))),
    _double(Case("max-f64", "MaxPool", _x(1, 5, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))),
    Case("global-avg-1", "GlobalAveragePool", _x(1, 1, 7, 7)),
    Case("global-avg-17-batch", "GlobalAveragePool", _x(2, 17, 5, 7)),
    Case("global-avg-64", "GlobalAveragePool", _x(1, 64, 3, 3)),
    Case("global-avg-3d", "GlobalAveragePool", _x(1, 3, 3, 4, 5)),
    Case("global-avg-1x1", "GlobalAveragePool", _x(1, 5, 1, 1)),
    Case("global-max-5", "GlobalMaxPool", _x(2, 5, 7, 9)),
    Case("global-max-1d", "GlobalMaxPool", _x(1, 3, 70)),
    Case("global-max-int8", "GlobalMaxPool", RNG.integers(-128, 128, (1, 17, 4, 4)).astype(np.int8)),
    _double(Case("global-avg-f64", "GlobalAveragePool", _x(1, 5, 6, 6))),
    _half(Case("global-avg-f16", "GlobalAveragePool", _x(1, 9, 6, 6))),
]

CASES = CONV_CASES + CONV_TRANSPOSE_CASES + POOL_CASES


def add_layer(graph: Graph, index: int, case: Case, feeds: dict[str, np.ndarray]) -> list[str]:
    """The case as channels-last layer ``c{index}`` of ``graph``; returns its output names."""
    x = f"c{index}_x"
    graph.tensors[x] = Tensor(x, TensorType.of(last(case.x)))
    graph.inputs.append(x)
    feeds[x] = last(case.x)
    names = [x]
    for suffix, value in (("w", case.w), ("b", case.b)):
        if value is None:
            continue
        name = f"c{index}_{suffix}"
        if case.weights_as_inputs:
            graph.tensors[name] = Tensor(name, TensorType.of(value))
            graph.inputs.append(name)
            feeds[name] = value
        else:
            graph.tensors[name] = Tensor.constant(name, value)
        names.append(name)
    attrs = make_attrs(case.op, **case.attrs, channels_last=True)
    types = get_op(case.op).infer(attrs, [graph.type_of(n) for n in names])
    outputs = [f"c{index}_y{j}" for j in range(len(types) if case.indices else 1)]
    outputs += [""] * (len(types) - len(outputs))
    for name, ttype in zip(outputs, types):
        if name:
            graph.tensors[name] = Tensor(name, ttype)
            graph.outputs.append(name)
    graph.nodes.append(Node(f"c{index}_{case.op}", case.op, attrs, names, outputs))
    return [name for name in outputs if name]


def build(cases: list[Case]) -> tuple[Graph, dict[str, np.ndarray], list[list[str]]]:
    graph, feeds = Graph("channels_last"), {}
    outputs = [add_layer(graph, index, case, feeds) for index, case in enumerate(cases)]
    verify(graph)
    return graph, feeds, outputs


COMPILED_OPS = "ops compiled"    # results key: the ops of the compiled graphs


def run_host(cases: list[Case], folder, per_bundle: int = 20) -> dict:
    """Host bundles of ``per_bundle`` layers each; per case id, its outputs (and under ``COMPILED_OPS``, the
    ops the compiled graphs hold)."""
    results = {COMPILED_OPS: set()}
    for start in range(0, len(cases), per_bundle):
        chunk = cases[start:start + per_bundle]
        graph, feeds, names = build(chunk)
        sub = folder / f"bundle{start}"
        sub.mkdir()
        bundle = load_bundle(graph, feeds, sub)
        assert bundle() == 0
        outputs = bundle.outputs()
        results[COMPILED_OPS] |= {node.op for node in bundle.result.graph.nodes}
        for case, case_names in zip(chunk, names):
            results[case.id] = [outputs[name] for name in case_names]
    return results


def check(case: Case, got: list[np.ndarray]) -> None:
    for actual, expected in zip(got, case.onnx_outputs(), strict=True):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, case.id
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=case.rtol,
                                       atol=case.atol, err_msg=case.id)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=case.id)


@pytest.fixture(scope="module", params=list(TILINGS), ids=list(TILINGS))
def results(request, tmp_path_factory):
    with tiling(TILINGS[request.param]):
        return run_host(CASES, tmp_path_factory.mktemp(f"channels-last-{request.param}"))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bundle_matches_onnxruntime(results, case):
    check(case, results[case.id])


def test_native_layers_compile_without_transposes(results):
    """Every case above ran in a channels-last kernel: the compiled graphs hold no Transpose."""
    assert results[COMPILED_OPS] == {case.op for case in CASES}


# ---- layers kept channels first ----------------------------------------------------------------------

FALLBACK_CASES = [
    Case("weights-as-inputs", "Conv", _x(1, 3, 7, 7), dict(pads=[1, 1, 1, 1]), _w(4, 3, 3, 3), _x(4),
         weights_as_inputs=True),
    Case("max-indices", "MaxPool", _x(2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         indices=True),
]


def test_layers_without_a_channels_last_kernel_run_between_transposes(tmp_path):
    """Weights known only at run time cannot be re-laid, and MaxPool's Indices are channels-first positions:
    those layers run channels first between transposes, and still match onnxruntime."""
    graph, feeds, names = build(FALLBACK_CASES + CASES[:1])
    bundle = load_bundle(graph, feeds, tmp_path)
    assert bundle() == 0
    outputs = bundle.outputs()
    for case, case_names in zip(FALLBACK_CASES + CASES[:1], names):
        check(case, [outputs[name] for name in case_names])
    transposed = {node.name.rsplit("_to_channels_", 1)[0] for node in bundle.result.graph.nodes
                  if node.op == "Transpose"}
    assert transposed == {"c0_Conv", "c1_MaxPool"}


# ---- small networks: fusion, transposes, memory -------------------------------------------------------

SPATIAL = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


@dataclass
class Net:
    """A chain of layers from the channels-first input ``x``: (op, attributes, constant inputs)."""

    id: str
    x: np.ndarray
    layers: list[tuple[str, dict, list[np.ndarray]]]

    def expected(self) -> np.ndarray:
        """onnxruntime on the channels-first chain (ONNX Clip takes min/max as inputs), its output made
        channels last when it still has spatial axes."""
        nodes, inits, current = [], [], "x"
        for index, (op, attrs, constants) in enumerate(self.layers):
            if op == "Clip":
                constants, attrs = [np.float32(attrs["min"]), np.float32(attrs["max"])], {}
            names = [f"k{index}_{j}" for j in range(len(constants))]
            inits += [numpy_helper.from_array(np.asarray(value), name) for name, value in zip(names, constants)]
            nodes.append(helper.make_node(op, [current, *names], [f"t{index}"], **attrs))
            current = f"t{index}"
        graph = helper.make_graph(nodes, self.id, [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.x.shape)],
                                  [helper.make_tensor_value_info(current, TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        model.ir_version = 9
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        y = session.run(None, {"x": self.x})[0]
        return last(y) if y.ndim > 2 else y

    def add_to(self, graph: Graph, feeds: dict, channels_last: bool, prefix: str = "") -> str:
        """The chain in ``graph`` (input ``{prefix}x``, channels last or first); returns its output's name."""
        builder = GraphBuilder(graph)
        current = f"{prefix}x"
        feeds[current] = last(self.x) if channels_last else self.x
        builder.add_input(current, TensorType.of(feeds[current]))
        graph.inputs.append(current)
        for index, (op, attrs, constants) in enumerate(self.layers):
            names = [builder.add_constant(f"{prefix}k{index}_{j}", value) for j, value in enumerate(constants)]
            layout = {"channels_last": channels_last} if op in SPATIAL else {}
            current = builder.emit(op, [current, *names], {**attrs, **layout}, name=f"{prefix}{op}{index}")[0]
        graph.outputs.append(current)
        return current


def _chain(id_, channels, size, *layers) -> Net:
    return Net(id_, _x(1, channels, size, size), list(layers))


def _dw(channels, multiplier=1, k=3, **attrs):
    return ("Conv", {"group": channels, **attrs}, [_w(channels * multiplier, 1, k, k), _x(channels * multiplier)])


FUSED_NETS = [
    (_chain("conv-relu6-maxpool", 5, 10, ("Conv", {"pads": [1, 1, 1, 1]}, [_w(8, 5, 3, 3), _x(8)]),
            ("Clip", {"min": 0.0, "max": 6.0}, []), ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [])),
     "Conv_Clip_MaxPool"),
    (_chain("depthwise-relu-avgpool-ceil", 17, 11, _dw(17, pads=[1, 1, 1, 1]), ("Relu", {}, []),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}, [])),
     "Conv_Relu_AveragePool"),
    (_chain("multiplier-2-overlapping-maxpool", 3, 9, _dw(3, 2, pads=[1, 1, 1, 1]), ("LeakyRelu", {"alpha": 0.1}, []),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, [])),
     "Conv_LeakyRelu_MaxPool"),
    (_chain("strided-conv-avgpool-count-pads", 4, 13, ("Conv", {"strides": [2, 2]}, [_w(6, 4, 3, 3)]),
            ("AveragePool", {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "count_include_pad": 1}, [])),
     "Conv_AveragePool"),
    (_chain("pointwise-sigmoid", 17, 6, ("Conv", {}, [_w(9, 17, 1, 1), _x(9)]), ("Sigmoid", {}, [])), "Conv_Sigmoid"),
]


@pytest.mark.parametrize("simd", list(TILINGS.values()), ids=list(TILINGS))
def test_fused_layers_match_onnxruntime(simd, tmp_path):
    """A channels-last Conv with its element-wise consumers and pooling is one layer (one loop nest, no
    buffer for the tensors in between) and computes what onnxruntime does."""
    graph, feeds = Graph("fused"), {}
    outputs = [net.add_to(graph, feeds, True, f"n{index}_") for index, (net, _) in enumerate(FUSED_NETS)]
    verify(graph)
    with tiling(simd):
        bundle = load_bundle(graph, feeds, tmp_path)
    assert bundle() == 0
    assert sorted(layer.op for layer in bundle.result.plan.layers) == sorted(op for _, op in FUSED_NETS)
    got = bundle.outputs()
    for (net, _), name in zip(FUSED_NETS, outputs):
        np.testing.assert_allclose(got[name], net.expected(), rtol=1e-4, atol=1e-5, err_msg=net.id)


NETWORK = _chain("conv-relu-depthwise-pool-gap-gemm", 3, 32,
                 ("Conv", {"pads": [1, 1, 1, 1]}, [_w(16, 3, 3, 3), _x(16)]), ("Relu", {}, []),
                 _dw(16, pads=[1, 1, 1, 1]), ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, []),
                 ("GlobalAveragePool", {}, []), ("Flatten", {}, []),
                 ("Gemm", {"transB": 1}, [_w(10, 16), _x(10)]))


def test_network_compiles_without_transposes_in_no_more_memory(tmp_path):
    """conv → relu → depthwise → pool → global average → Gemm, channels last: no Transpose in the compiled
    graph, onnxruntime's answer, and no more activation memory than the same network channels first; the
    weights are stored once, re-laid (as many constant bytes as channels first)."""
    sizes, constants = {}, {}
    for channels_last in (True, False):
        graph, feeds = Graph("net"), {}
        output = NETWORK.add_to(graph, feeds, channels_last)
        verify(graph)
        folder = tmp_path / ("last" if channels_last else "first")
        folder.mkdir()
        bundle = load_bundle(graph, feeds, folder)
        assert bundle() == 0
        np.testing.assert_allclose(bundle.outputs()[output], NETWORK.expected(), rtol=1e-4, atol=1e-5)
        sizes[channels_last] = bundle.result.plan.activations_size
        constants[channels_last] = len((folder / "net.weights.bin").read_bytes())
        if channels_last:
            assert "Transpose" not in {node.op for node in bundle.result.graph.nodes}
            assert [layer.op for layer in bundle.result.plan.layers][:2] == ["Conv_Relu", "Conv_MaxPool"]
    print(f"ACTIVATIONS: channels last {sizes[True]} B, channels first {sizes[False]} B")
    assert sizes[True] <= sizes[False]
    assert constants[True] == constants[False]


def test_elementwise_layers_run_in_place_on_channels_last_tensors(tmp_path):
    """A Relu after a channels-last pooling writes over the pooling's output, as it would channels first."""
    net = _chain("pool-relu-gap", 6, 8, ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, []),
                 ("Relu", {}, []), ("GlobalAveragePool", {}, []))
    graph, feeds = Graph("inplace"), {}
    output = net.add_to(graph, feeds, True)
    bundle = load_bundle(graph, feeds, tmp_path)
    assert bundle() == 0
    np.testing.assert_allclose(bundle.outputs()[output], net.expected(), rtol=1e-4, atol=1e-5)
    pool, relu = (node for node in graph.nodes if node.op in ("MaxPool", "Relu"))
    locations = bundle.result.plan.locations
    assert locations[relu.outputs[0]] == locations[pool.outputs[0]]


# ---- tiles and Cortex-M --------------------------------------------------------------------------------


def test_tiles_follow_the_register_file():
    """Depthwise: as many positions as accumulators allow beside a weight per row tap (each input vector
    serves a row of taps; on Cortex-M, within a load's reach when that leaves 4), channels with what is
    left; dense: positions × channel vectors loading the
    fewest operands, the weight vectors and the broadcast input staying in registers beside them."""
    num = Numeric(None, DType.FLOAT32)
    shape = conv_channels_last.tile_shape
    assert shape(Simd(4, 32), num, 32, 64, True, 3) == (16, 1)      # Cortex-M7: 16 + 3 weights + 1 input
    assert shape(Simd(4, 32), num, 32, 32, True, 3) == (5, 3)       # 7 inputs x 32 channels in a VLDR's reach
    assert shape(Simd(4, 32), num, 16, 64, False) == (4, 6)         # 24 + 6 weights + 1 input
    assert shape(Simd(32, 16), num, 32, 32, True, 3) == (12, 1)     # AVX2
    assert shape(Simd(32, 16), num, 32, 32, True, 5) == (10, 1)
    assert shape(Simd(32, 16), num, 16, 64, False) == (6, 2)
    assert shape(Simd(64, 32), num, 7, 96, True, 3) == (7, 2)       # a short row: channels take the rest
    assert shape(Simd(16, 8), num, 16, 64, False) == (2, 2)         # Helium


BY_ID = {case.id: case for case in CASES}
BARE_METAL = [BY_ID[case_id] for case_id in (
    "dense-3x3-pads-batch", "dense-dilated", "groups", "depthwise-17", "depthwise-multiplier-2", "pointwise-odd",
    "1d-depthwise", "window-in-padding", "f16", "deconv-strides-pads-group-outpad", "max-3x3-pads-ceil",
    "max-int8", "avg-count-pads-ceil", "avg-1d", "global-avg-17-batch", "global-max-5")]


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
def test_bundle_matches_onnxruntime_on_cortex_m(cpu, tmp_path):
    """The same kernels bare metal (scalar FPU) under QEMU, with a fused conv-ReLU6-pool chain."""
    graph, feeds, names = build(BARE_METAL)
    net, fused_op = FUSED_NETS[0]
    fused_output = net.add_to(graph, feeds, True, "net_")
    verify(graph)
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    assert fused_op in {layer.op for layer in result.plan.layers}
    assert "Transpose" not in {node.op for node in result.graph.nodes}
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    for case, case_names in zip(BARE_METAL, names):
        check(case, [outputs[name] for name in case_names])
    np.testing.assert_allclose(outputs[fused_output], net.expected(), rtol=1e-4, atol=1e-5)


def test_cortex_m7_channels_last_costs_no_more_instructions_than_channels_first(tmp_path):
    """Cortex-M7 instructions (QEMU -icount) of a 3×3 depthwise over 32 channels of 32×32 and a 1×1
    convolution 32 → 64 on 16×16: the channels-last kernels are not slower than the channels-first ones."""
    nets = [Net("depthwise", _x(1, 32, 32, 32), [_dw(32, pads=[1, 1, 1, 1])]),
            Net("pointwise", _x(1, 32, 16, 16), [("Conv", {}, [_w(64, 32, 1, 1), _x(64)])])]
    for net in nets:
        counts = {}
        for channels_last in (False, True):
            graph, feeds = Graph(net.id), {}
            output = net.add_to(graph, feeds, channels_last)
            folder = tmp_path / f"{net.id}-{channels_last}"
            folder.mkdir()
            export_bundle(graph, folder, "net", resolve_target("arm", "cortex-m7"))
            spec = {output: (graph.type_of(output).shape, np.float32)}
            run = toolchains.run_cortex_m_detailed(folder, "net", "cortex-m7", feeds, spec, icount=True)
            expected = net.expected() if channels_last else first(net.expected())
            np.testing.assert_allclose(run.outputs[output], expected, rtol=1e-4, atol=1e-5)
            counts[channels_last] = run.ticks * toolchains.board_for("cortex-m7").instructions_per_tick
        print(f"{net.id}: channels first {counts[False]:,}, channels last {counts[True]:,} instructions")
        assert counts[True] <= counts[False]
