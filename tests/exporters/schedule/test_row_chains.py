"""Line-buffered residual blocks (exporters/glow/row_chains.py, row_emit.py): a block's layers run a row at a
time, its inner tensors kept as a few rows, its output written over its input when the schedule allows.

- blocks of every shape the chains take — the identity block, a stride-2 block with a 1x1 shortcut (odd
  height), a MobileNetV2 inverted residual (1x1 expand, depthwise, 1x1 project), a 5x5 then a dilated 3x3,
  TF SAME padding of an even height at stride 2 (bottom pad only), a block whose output outgrows its
  input, a 3x3 shortcut that still reads rows the output would cover — each byte for byte the reference
  interpreter's on random inputs, on the host and under qemu on Cortex-M7, M4 and M0;
- the RAM: a block takes its input plus a few rows (less than two of its tensors, the floor of any
  layer-by-layer plan), its output on its input's bytes where the schedule proves it safe, apart where not;
- the proof can fail: told that the 3x3-shortcut block may write over its input, the bundle gives wrong bytes;
- what is not a block: an inner tensor read twice, an inner tensor that is a graph output.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow import row_chains
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.row_chains import RowChain
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.streaming import kept_apart, qconv, run_on_host
from tests.support.tflite_requant import rq

RNG = np.random.default_rng(2026)


def _add(graph: Graph, name: str, a: str, b: str) -> str:
    """TFLite's int8 ADD (QAddRescaled) of two same-shaped tensors, with a fused ReLU."""
    attrs = make_attrs("QAddRescaled", **{**rq(0.7, zero_point=-128, lo=-128), "a_zero_point": -3, "b_zero_point": 4,
                                          "left_shift": 20, "a_multiplier": 1518500250, "a_shift": 31,
                                          "b_multiplier": 1073741824, "b_shift": 31})
    graph.tensors[f"{name}_y"] = Tensor(f"{name}_y", get_op("QAddRescaled").infer(
        attrs, [graph.type_of(a), graph.type_of(b)])[0])
    graph.nodes.append(Node(name, "QAddRescaled", attrs, [a, b], [f"{name}_y"]))
    return f"{name}_y"


def _branch(graph: Graph, name: str, x: str, convs) -> str:
    for index, (w_shape, geometry) in enumerate(convs):
        x = qconv(graph, f"{name}_c{index}", x, w_shape, **geometry)
    return x


def _block(graph: Graph, name: str, x_shape, main, shortcut=()) -> tuple[str, str]:
    """input -> pre (1x1) -> X -> [main branch, shortcut branch (empty: X itself)] -> Add -> post (1x1) -> output.
    Returns (X, the block's output)."""
    graph.tensors[f"{name}_in"] = Tensor(f"{name}_in", TensorType.of(np.zeros(x_shape, np.int8)))
    graph.inputs.append(f"{name}_in")
    channels = x_shape[-1]
    x = qconv(graph, f"{name}_pre", f"{name}_in", (channels, channels, 1, 1))
    out = _add(graph, f"{name}_add", _branch(graph, f"{name}_main", x, main), _branch(graph, f"{name}_short", x,
                                                                                       shortcut))
    graph.outputs.append(qconv(graph, f"{name}_post", out, (4, graph.type_of(out).shape[-1], 1, 1)))
    return x, out


P1 = {"pads": (1, 1, 1, 1)}
#: (name, X's shape, main branch, shortcut branch, whether the output may take X's bytes)
BLOCKS = [
    ("identity", (1, 12, 10, 16), [((16, 16, 3, 3), P1), ((16, 16, 3, 3), P1)], [], True),
    ("downsample-odd", (1, 11, 9, 8), [((16, 8, 3, 3), {**P1, "strides": (2, 2)}), ((16, 16, 3, 3), P1)],
     [((16, 8, 1, 1), {"strides": (2, 2)})], True),
    ("inverted-residual", (1, 9, 7, 8), [((48, 8, 1, 1), {}), ((48, 1, 3, 3), {**P1, "group": 48}),
                                         ((8, 48, 1, 1), {})], [], True),
    ("5x5-then-dilated", (1, 13, 6, 8), [((8, 8, 5, 5), {"pads": (2, 2, 2, 2)}),
                                         ((8, 8, 3, 3), {"pads": (2, 2, 2, 2), "dilations": (2, 2)})], [], True),
    ("same-even-s2", (1, 10, 8, 8), [((8, 8, 3, 3), {"pads": (0, 0, 1, 1), "strides": (2, 2)})],
     [((8, 8, 1, 1), {"strides": (2, 2)})], True),
    ("outgrows-input", (1, 8, 6, 8), [((16, 8, 3, 3), P1)], [((16, 8, 1, 1), {})], False),
    ("3x3-shortcut", (1, 9, 5, 8), [((8, 8, 3, 3), P1)], [((8, 8, 3, 3), P1)], False),
]


def _graph(cases) -> tuple[Graph, dict[str, tuple[str, str]]]:
    graph, blocks = Graph("blocks"), {}
    for name, x_shape, main, shortcut, _ in cases:
        blocks[name] = _block(graph, name, x_shape, main, shortcut)
    verify(graph)
    return graph, blocks


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    return {name: RNG.integers(-128, 128, graph.type_of(name).shape).astype(np.int8) for name in graph.inputs}


def _chains(plan) -> dict[str, RowChain]:
    return {layer.source: layer for layer in plan.layers if isinstance(layer, RowChain)}


def test_blocks_run_row_by_row_bit_exact_on_the_host(tmp_path):
    graph, blocks = _graph(BLOCKS)
    feeds = _feeds(graph)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    chains = _chains(plan)
    expected = interpreter.run(graph, feeds)
    for (name, _, main, shortcut, over), (x, out) in zip(BLOCKS, blocks.values()):
        assert x in chains, name
        assert len(chains[x].nodes) == len(main) + len(shortcut) + 1, name
        assert chains[x].over_source is over, name
        assert (plan.locations[out].offset == plan.locations[x].offset) is over, name
        if not over:
            assert kept_apart(plan, x, out), name
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m0"])
def test_blocks_run_row_by_row_bit_exact_on_cortex_m(cpu, tmp_path):
    graph, _ = _graph(BLOCKS)
    feeds = _feeds(graph)
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    assert len(_chains(result.plan)) == len(BLOCKS)
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    expected = interpreter.run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=f"{name} on {cpu}")


@pytest.mark.parametrize("case", [BLOCKS[0], BLOCKS[1], BLOCKS[2]], ids=lambda case: case[0])
def test_a_block_takes_its_input_and_a_few_rows(case, tmp_path):
    """Layer by layer, X stays alive while the first convolution writes a whole tensor. Row by row the block
    takes X (which the output overwrites), the windows' rows and the kernels' scratch: less than the same
    graph exported layer by layer (--no-fuse)."""
    graph, blocks = _graph([case])
    x, _ = blocks[case[0]]
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", "cortex-m7"))
    chain = _chains(result.plan)[x]
    x_bytes = graph.type_of(x).nbytes
    window_bytes = sum(rows * graph.type_of(t).nbytes // graph.type_of(t).shape[1] for t, rows in chain.windows.items())
    kernel_rows = max(w.window.kernel[0] for w in chain.stages if w.window is not None)
    assert max(chain.windows.values()) <= kernel_rows
    assert result.plan.activations_size <= x_bytes + window_bytes + 2048
    layer_by_layer = export_bundle(graph, tmp_path / "unfused", "net", resolve_target("arm", "cortex-m7"), fuse=False)
    assert not _chains(layer_by_layer.plan)
    assert result.plan.activations_size < layer_by_layer.plan.activations_size


def test_the_overwrite_proof_can_fail(tmp_path, monkeypatch):
    """The 3x3 shortcut reads X row r + 1 after output row r is written: told it may overwrite X, the
    block gives wrong bytes (so the bit-exact checks above would catch an unsound schedule)."""
    case = BLOCKS[-1]
    graph, blocks = _graph([case])
    feeds = _feeds(graph)
    monkeypatch.setattr(row_chains, "_may_overwrite", lambda graph, chain: True)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path)
    x, out = blocks[case[0]]
    assert plan.locations[out].offset == plan.locations[x].offset
    assert not np.array_equal(outputs[graph.outputs[0]], interpreter.run(graph, feeds)[graph.outputs[0]])


def test_what_is_not_a_block(tmp_path):
    """An inner tensor read by a layer outside the block, or one that is a graph output: layer by layer."""
    graph, blocks = _graph([BLOCKS[0]])
    inner = next(n for n in graph.nodes if n.name == "identity_main_c0").outputs[0]
    graph.outputs.append(inner)
    verify(graph)
    feeds = _feeds(graph)
    plan, outputs, _, _ = run_on_host(graph, feeds, tmp_path / "output")
    assert not _chains(plan)
    expected = interpreter.run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=name)
    graph.outputs.pop()
    qconv(graph, "again", inner, (4, 16, 1, 1))
    graph.outputs.append("again_y")
    verify(graph)
    plan, outputs, _, _ = run_on_host(graph, _feeds(graph), tmp_path / "reread")
    assert not _chains(plan)
