"""Plain row chains (exporters/glow/row_chains.py ``_downsampling_pairs``, row_emit.py): a convolution whose
output is read only by a convolution strided along the rows runs with it a row at a time (with the
convolution that expands their output, when there is one), the large tensor between them kept as the few
rows the strided window reads.

- the shapes MobileNetV1 0.25 has (1x1 8 -> 16, 3x3 depthwise stride 2 with TF SAME padding of an even
  height: bottom only, 1x1 16 -> 32) and others: an odd height padded top and bottom (a padding row before
  the first), a dense 3x3 stride 2 reader, a 5x5 stride 2 depthwise reader, a shrinking reader after the
  pair (not taken in), readers whose stride passes their window (1x1 stride 2, 2x2 stride 3: rows
  skipped); inputs with non-zero zero points — each byte for byte the reference interpreter's, on
  the host and under qemu on Cortex-M7, M4 and M0;
- the RAM: the chain takes X (its output on X's bytes) and a few rows, less than the tensor between the
  two layers, and less than the same graph exported layer by layer;
- the window logic can fail: a padding row filled with another value than the zero point, or a compacted
  window keeping one row fewer, gives wrong bytes;
- what is not chained: a stride-1 reader, a tensor between them read twice.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pegasus.exporters.glow import row_chains, row_emit
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.row_chains import RowChain
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.integer_cases import conv
from tests.support.streaming import run_on_host

RNG = np.random.default_rng(17)
SAME_EVEN_S2 = {"pads": (0, 0, 1, 1), "strides": (2, 2)}
P1_S2 = {"pads": (1, 1, 1, 1), "strides": (2, 2)}


def _conv(graph: Graph, name: str, x: str, w_shape, zx: int, **geometry) -> str:
    """Append a channels-last int8 QConv reading ``x`` (input zero point ``zx``) and return its output."""
    t = graph.type_of(x)
    case = conv(name, (1, t.shape[-1], *t.shape[1:-1]), w_shape, ("int8", zx), ("int8", 0), bias=None,
                out_zero_point=-9, **geometry)
    inputs = [x]
    for position, value in enumerate(case.inputs[1:], start=1):
        inputs.append(f"{name}_in{position}")
        graph.tensors[inputs[-1]] = Tensor.constant(inputs[-1], value)
    attrs = make_attrs("QConv", **{**case.attrs, "channels_last": True})
    out_type = get_op("QConv").infer(attrs, [graph.type_of(n) for n in inputs])[0]
    graph.tensors[f"{name}_y"] = Tensor(f"{name}_y", out_type)
    graph.nodes.append(Node(name, "QConv", attrs, inputs, [f"{name}_y"]))
    return f"{name}_y"


def _pair(graph: Graph, name: str, shape, expand: int, reader, after=None, post: bool = True) -> tuple[str, str]:
    """input -> pre (1x1) -> X -> 1x1 (``expand`` channels) -> T -> ``reader`` (w shape, geometry) -> [``after``:
    a 1x1 of that many channels] -> [post: 1x1 to 4 channels] -> output. Returns (X, T)."""
    graph.tensors[f"{name}_in"] = Tensor(f"{name}_in", TensorType.of(np.zeros(shape, np.int8)))
    graph.inputs.append(f"{name}_in")
    x = _conv(graph, f"{name}_pre", f"{name}_in", (shape[-1], shape[-1], 1, 1), 3)
    t = _conv(graph, f"{name}_expand", x, (expand, shape[-1], 1, 1), -9)
    y = _conv(graph, f"{name}_reader", t, reader[0], -128, **reader[1])
    if after:
        y = _conv(graph, f"{name}_after", y, (after, graph.type_of(y).shape[-1], 1, 1), -9)
    graph.outputs.append(_conv(graph, f"{name}_post", y, (4, graph.type_of(y).shape[-1], 1, 1), -9) if post else y)
    return x, t


#: (name, input shape, expanded channels, reader, channels of the 1x1 after it, stages chained)
PAIRS = [
    ("mobilenet-v1", (1, 12, 10, 8), 16, ((16, 1, 3, 3), {**SAME_EVEN_S2, "group": 16}), 32, 3),
    ("odd-height-padded", (1, 11, 7, 8), 16, ((16, 1, 3, 3), {**P1_S2, "group": 16}), None, 2),
    ("dense-3x3-s2", (1, 10, 6, 4), 16, ((8, 16, 3, 3), P1_S2), None, 2),
    ("depthwise-5x5-s2", (1, 13, 5, 8), 24, ((24, 1, 5, 5), {"pads": (2, 2, 2, 2), "strides": (2, 2),
                                                             "group": 24}), None, 2),
    ("shrinking-after", (1, 12, 6, 8), 16, ((16, 1, 3, 3), {**SAME_EVEN_S2, "group": 16}), 8, 2),
    ("two-top-pads", (1, 10, 8, 4), 16, ((16, 1, 3, 3), {"pads": (2, 1, 0, 1), "strides": (2, 2), "group": 16}),
     None, 2),
    # readers striding past their window: the rows between their windows are never computed (they were
    # written before the window's first slot)
    ("1x1-s2-depthwise", (1, 13, 7, 4), 16, ((16, 1, 1, 1), {"strides": (2, 2), "group": 16}), None, 2),
    ("2x2-s3-dense", (1, 14, 7, 4), 16, ((8, 16, 2, 2), {"strides": (3, 3)}), None, 2),
]
#: the pairs whose output may not take X's bytes: an output row covers X rows the chain has still to read, or
#: the output is larger than X
APART = {"two-top-pads", "1x1-s2-depthwise"}


def _graph(cases, post: bool = True) -> tuple[Graph, dict[str, tuple[str, str]]]:
    graph, pairs = Graph("pairs"), {}
    for name, shape, expand, reader, after, _ in cases:
        pairs[name] = _pair(graph, name, shape, expand, reader, after, post)
    verify(graph)
    return graph, pairs


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    return {name: RNG.integers(-128, 128, graph.type_of(name).shape).astype(np.int8) for name in graph.inputs}


def _chains(plan) -> dict[str, RowChain]:
    return {layer.source: layer for layer in plan.layers if isinstance(layer, RowChain)}


def test_pairs_run_row_by_row_bit_exact_on_the_host(tmp_path):
    graph, pairs = _graph(PAIRS)
    feeds = _feeds(graph)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    chains = _chains(plan)
    for name, _, _, _, _, stages in PAIRS:
        x, t = pairs[name]
        assert x in chains, name
        assert len(chains[x].stages) == stages, name
        assert t not in plan.locations, name   # T exists only as rows of a window
        assert chains[x].over_source is (name not in APART), name
    expected = interpreter.run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m0"])
def test_pairs_run_row_by_row_bit_exact_on_cortex_m(cpu, tmp_path):
    graph, _ = _graph(PAIRS)
    feeds = _feeds(graph)
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    assert len(_chains(result.plan)) == len(PAIRS)
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    expected = interpreter.run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=f"{name} on {cpu}")


@pytest.mark.parametrize("case", PAIRS[:2], ids=lambda case: case[0])
def test_a_pair_takes_its_input_and_a_few_rows(case, tmp_path):
    """Layer by layer T exists whole (its writer and its reader both hold it); chained, X (the output on its
    bytes), T's window and the kernels' scratch: less than T, and less than the graph exported layer by layer."""
    graph, pairs = _graph([case])
    x, t = pairs[case[0]]
    target = resolve_target("arm", "cortex-m7")
    result = export_bundle(graph, tmp_path, "net", target)
    chain = _chains(result.plan)[x]
    assert chain.windows[t] == 3
    window_bytes = sum(rows * graph.type_of(n).nbytes // graph.type_of(n).shape[1] for n, rows in chain.windows.items())
    assert result.plan.activations_size <= graph.type_of(x).nbytes + window_bytes + 1024
    assert result.plan.activations_size < graph.type_of(t).nbytes + graph.type_of(x).nbytes
    layer_by_layer = export_bundle(graph, tmp_path / "unfused", "net", target, fuse=False)
    assert not _chains(layer_by_layer.plan)
    assert result.plan.activations_size < layer_by_layer.plan.activations_size


def test_the_window_logic_can_fail(tmp_path, monkeypatch):
    """Padding rows filled with 0 instead of the reader's zero point (-128), or a compacted window keeping
    one row fewer than its reader reads again: wrong bytes (so the bit-exact checks above would see it). The
    chains' outputs are the graph's, so no later layer's clamp can hide a wrong row."""
    graph, _ = _graph(PAIRS[1:3], post=False)
    feeds = _feeds(graph)
    expected = interpreter.run(graph, feeds)

    def differs(folder) -> bool:
        _, outputs, _, _ = run_on_host(graph, feeds, tmp_path / folder)
        return any(not np.array_equal(outputs[name], expected[name]) for name in graph.outputs)

    assert not differs("right")
    fill = row_emit._Block.fill_or_compute

    def zero_fill(self, producer, reader, row, out):
        fill(self, producer, SimpleNamespace(node=SimpleNamespace(attrs=SimpleNamespace(x_zero_point=0))), row, out)

    with monkeypatch.context() as patch:
        patch.setattr(row_emit._Block, "fill_or_compute", zero_fill)
        assert differs("zero-fill")
    room = row_emit._Block.make_room
    with monkeypatch.context() as patch:
        patch.setattr(row_emit._Block, "make_room", lambda self, tensor, keep, row: room(
            self, tensor, self.b.add(keep, row_emit.const(1)), row))
        assert differs("short-window")


def test_the_overwrite_proof_can_fail(tmp_path, monkeypatch):
    """With two padding rows on top, output row r has read X up to row 2r and covers X rows 2r and 2r + 1:
    told it may write over X, the chain gives wrong bytes."""
    graph, pairs = _graph([case for case in PAIRS if case[0] in APART])
    feeds = _feeds(graph)
    monkeypatch.setattr(row_chains, "_may_overwrite", lambda graph, chain: True)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    x, _ = pairs["two-top-pads"]
    chain = _chains(plan)[x]
    assert plan.locations[chain.outputs[0]].offset == plan.locations[x].offset
    assert not np.array_equal(outputs[graph.outputs[0]], interpreter.run(graph, feeds)[graph.outputs[0]])


def test_what_is_not_chained(tmp_path):
    """A stride-1 reader (layer by layer its input and output stream), and a T read by another layer too."""
    graph = Graph("plain")
    _pair(graph, "s1", (1, 8, 6, 8), 16, ((16, 1, 3, 3), {"pads": (1, 1, 1, 1), "group": 16}))
    _, t = _pair(graph, "reread", (1, 8, 6, 8), 16, ((16, 1, 3, 3), {**SAME_EVEN_S2, "group": 16}))
    graph.outputs.append(_conv(graph, "again", t, (4, 16, 1, 1), -9))
    verify(graph)
    feeds = _feeds(graph)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    assert not _chains(plan)
    expected = interpreter.run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)
