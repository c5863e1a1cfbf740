"""8-bit QConv weights stored as 16-bit pairs for Cortex-M's DSP kernels (integer_conv_weights.spreads_pairs):
dense channels-last layers of a multiple of four input channels, rows of each pair of output channels
interleaved (``interleave_rows``), read by the SMLAD loop of integer_im2col.py (inline and as a shared
function, blocks of 2 channels with 1 left over). Checked: the stored layout against the weights written out
here, the bundles on Cortex-M4/M7 (and M0, which keeps bytes) against the reference interpreter bit for bit,
and that weights stay bytes where they are read as bytes (the fused conv + pool kernel) or read once (a
dense layer: bytes, or two rows' bytes as halfwords, tests/exporters/kernels/cortex_m/test_dense_halves.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.kernels.integer.integer_conv_weights import pack_weights
from pegasus.exporters.glow.pipeline import schedule
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir import serialize
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ops.registry import make_attrs
from pegasus.runtime import interpreter
from tests.conftest import run_cli
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph
from tests.support.paired_weights import RNG, assert_bundle_matches, conv


def dense(name: str, depth: int, columns: int) -> Case:
    a = RNG.integers(-128, 127, (1, depth), endpoint=True).astype(np.int8)
    b = RNG.integers(-127, 127, (depth, columns), endpoint=True).astype(np.int8)
    bias = RNG.integers(-3000, 3000, columns).astype(np.int32)
    attrs = {"multiplier": tuple(int(v) for v in RNG.integers(1 << 29, 1 << 30, columns)),
             "shift": (38 + depth.bit_length() // 2,) * columns, "out_zero_point": 2, "out_dtype": "int8",
             "rounding": "tflite", "a_zero_point": -7}
    return Case(name, "QMatMul", [a, b, bias], attrs, constant=(1, 2))


CASES = [
    conv("3x3-8to7-pad", 8, 7, 3, pad=1),             # odd M: a lone last row
    conv("1x1-16to5", 16, 5, 1),
    conv("3x3-4to3-stride2", 4, 3, 3, stride=2, size=(7, 7)),
    conv("3x3-8to6-uint8", 8, 6, 3, pad=1, unsigned=True),   # centred at export: w - 120
    conv("1x1-64to9-relu", 64, 9, 1, relu=True),      # 16 groups: the SMLAD loop as a function of its own
    conv("3x3-32to3", 32, 3, 3, pad=1),               # 72 groups, a block of 2 and a lone row
    dense("dense-64x15", 64, 15),                     # one position: bytes (odd M), blocks of 4 channels
    conv("3x3-8to1-pad", 8, 1, 3, pad=1),             # one output channel: no pair at all, the lone row only
]


def test_stored_layout():
    """Rows of a pair (2i, 2i + 1) word by word from 2 * depth * i halves: per group of four taps of the row's
    (k..., C) order, centred and doubled (TFLite rounding: integer_conv_plan.doubles), (w0, w2) of row 2i, of
    row 2i + 1, then (w1, w3) of each; an odd last row alone (its groups (w0, w2, w1, w3))."""
    case = conv("layout", 8, 5, 3, unsigned=True)
    graph, _ = build_graph([case])
    node = graph.nodes[0]
    packed = pack_weights(node, graph, resolve_target("arm", "cortex-m7"))[1]
    assert packed.dtype == np.int32
    halves = packed.reshape(-1).view(np.int16)
    w = 2 * (case.inputs[1].astype(np.int64) - 120)
    rows = w.transpose(0, 2, 3, 1).reshape(5, -1)          # (M, k, k, C) -> the taps in channels-last order
    depth = rows.shape[1]
    for c in range(5):
        start, step, jump = (c // 2 * 2 * depth + c % 2 * 2, 8, 4) if c < 4 else (4 * depth, 4, 2)
        for q in range(depth // 4):
            at = start + q * step
            got = np.concatenate([halves[at:at + 2], halves[at + jump:at + jump + 2]])
            np.testing.assert_array_equal(got, rows[c, 4 * q:4 * q + 4][[0, 2, 1, 3]], err_msg=f"row {c} group {q}")
    assert pack_weights(node, graph, resolve_target("arm", "cortex-m0"))[1].dtype == np.uint8


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "cortex-m0"])
def test_bundles_on_cortex_m(cpu, tmp_path):
    assert_bundle_matches(CASES, cpu, tmp_path)


def test_weights_stay_bytes_where_read_as_bytes():
    """A QConv fused with its MaxPool (integer_conv_pool.py reads bytes) and a dense layer keep their 8-bit
    weights on a DSP CPU; the 8-channel layer beside them is spread (twice the bytes), and so is a layer of 6
    input channels, in the first words of an array of its window's shape (integer_conv_weights.pack_weights)."""
    graph = Graph("pool")
    x = RNG.integers(-128, 127, (1, 8, 8, 8), endpoint=True).astype(np.int8)
    graph.tensors["x"] = Tensor("x", TensorType.of(x))
    graph.inputs.append("x")
    for index in range(2):
        w = Tensor.constant(f"w{index}", RNG.integers(-127, 127, (8, 8, 3, 3), endpoint=True).astype(np.int8))
        graph.tensors[w.name] = w
    requant = {"multiplier": (1 << 30,), "shift": (44,), "out_zero_point": 0, "out_dtype": "int8",
               "rounding": "tflite", "channels_last": True, "pads": (1, 1, 1, 1)}
    for name, ttype in (("y0", (1, 8, 8, 8)), ("p0", (1, 4, 4, 8)), ("y1", (1, 4, 4, 8))):
        graph.tensors[name] = Tensor(name, TensorType(ttype, graph.type_of("x").dtype))
    graph.nodes = [Node("conv0", "QConv", make_attrs("QConv", **requant), ["x", "w0"], ["y0"]),
                   Node("pool0", "MaxPool", make_attrs("MaxPool", kernel_shape=(2, 2), strides=(2, 2),
                                                       channels_last=True), ["y0"], ["p0"]),
                   Node("conv1", "QConv", make_attrs("QConv", **requant), ["p0", "w1"], ["y1"])]
    graph.outputs = ["y1"]
    lowered = schedule(graph, resolve_target("arm", "cortex-m7")).graph
    assert lowered.value_of(lowered.nodes[0].inputs[1]).dtype == np.int8       # fused with the pool: bytes
    assert lowered.value_of(lowered.nodes[2].inputs[1]).dtype == np.int32      # spread
    dense_graph = schedule(build_graph([dense("d", 64, 8)])[0], resolve_target("arm", "cortex-m7")).graph
    dense_node = next(node for node in dense_graph.nodes if node.op == "QConv")
    weights = dense_graph.value_of(dense_node.inputs[1])       # a dense layer: a byte a weight, two rows'
    assert weights.dtype == np.int16 and weights.nbytes == 64 * 8          # bytes as halfwords (integer_halves.py)
    six = Case("six", "QConv", [RNG.integers(-128, 127, (1, 4, 4, 6), endpoint=True).astype(np.int8),
                                RNG.integers(-127, 127, (4, 6, 3, 3), endpoint=True).astype(np.int8)],
               requant, constant=(1,))
    small, _ = build_graph([six])
    packed = pack_weights(small.nodes[0], small, resolve_target("arm", "cortex-m7"))[1]
    # 54 taps in groups of four: 14 groups, two words each per row, 112 words in rows of 54
    assert packed.dtype == np.int32 and packed.shape == (3, 3, 3, 6)
    assert np.count_nonzero(packed.reshape(-1)[4 * 28:]) == 0 and np.count_nonzero(packed.reshape(-1)[:4 * 28])


def test_compact_weights_keep_bytes(tmp_path):
    """``--compact-weights``: on a DSP Cortex-M every layer keeps its 8-bit weights (the convolutions' take half
    the flash: CONSTANT_MEM_SIZE against the default export of the same model), and the bundle still computes
    the reference's bits on Cortex-M4."""
    cases = [conv("3x3-8to7-pad", 8, 7, 3, pad=1), conv("1x1-64to9-relu", 64, 9, 1, relu=True)]
    graph, feeds = build_graph(cases)
    serialize.save(graph, tmp_path / "m.json", tmp_path / "m.data")
    sizes = {}
    for flags in ([], ["--compact-weights"]):
        out = tmp_path / ("compact" if flags else "default")
        done = run_cli("export", "glow", "--model", tmp_path / "m.json", "--model-data", tmp_path / "m.data",
                       "--target", "arm", "--mcpu", "cortex-m4", "--output-path", out, *flags)
        assert done.code == 0, done.stderr
        header = (out / "m.h").read_text()
        sizes[bool(flags)] = int(next(line.split()[-1] for line in header.splitlines()
                                      if line.startswith("#define M_CONSTANT_MEM_SIZE")))
    weights = sum(case.inputs[1].size for case in cases)
    assert sizes[False] - sizes[True] >= weights - 128       # the pairs' second byte of every weight, less padding
    target = dataclasses.replace(resolve_target("arm", "cortex-m4"), byte_weights=True)
    packed = schedule(graph, target).graph
    assert all(packed.value_of(node.inputs[1]).dtype == np.int8 for node in packed.nodes if node.op == "QConv")
    export_bundle(graph, tmp_path / "bytes", "net", target)
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path / "bytes", "net", "cortex-m4", feeds, spec)
    for name, value in interpreter.run(graph, feeds).items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)
