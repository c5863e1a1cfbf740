"""Concat by construction (exporters/glow/memory/plan.py ``concat_in_place``, on hosted targets): the layers
producing a Concat's inputs write into the joined tensor, at each input's slice, and the Concat copies
nothing. A dense block (each Concat joining the previous one and a new convolution's output) nests into one
buffer; an input that another layer still reads after something is written over the joined tensor, a graph
input, an input given twice and a slice off the 64-byte grid keep a buffer of their own and are copied. Every
bundle must give what onnxruntime gives (rtol 1e-4 / atol 1e-5); a Cortex-M plan keeps every copy.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from tests.support.host_runner import load_bundle

RNG = np.random.default_rng(17)


def _conv(name: str, x: str, cin: int, cout: int, inits: list, kernel: int = 1, pad: int | None = None) -> object:
    inits.append(numpy_helper.from_array(RNG.uniform(-0.5, 0.5, (cout, cin, kernel, kernel)).astype(np.float32),
                                         f"{name}_w"))
    return helper.make_node("Conv", [x, f"{name}_w"], [name], pads=[kernel // 2 if pad is None else pad] * 4)


def _model(nodes, inits, channels: int, size: int, outputs: list[str]):
    graph = helper.make_graph(nodes, "concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              (1, channels, size, size))],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _dense_block():
    """x -> c0 (8 channels); three times: r_i = Relu(cat_{i-1}), c_i = 3x3 conv of r_i (4 channels),
    cat_i = Concat(cat_{i-1}, c_i); then a 1x1 conv of the last join. 8x8 planes: slices of 4 * 64 * 4 bytes."""
    inits: list = []
    nodes = [_conv("c0", "x", 3, 8, inits)]
    joined, channels = "c0", 8
    for i in range(1, 4):
        nodes += [helper.make_node("Relu", [joined], [f"r{i}"]), _conv(f"c{i}", f"r{i}", channels, 4, inits, 3),
                  helper.make_node("Concat", [joined, f"c{i}"], [f"cat{i}"], axis=1)]
        joined, channels = f"cat{i}", channels + 4
    nodes.append(_conv("y", joined, channels, 5, inits))
    return _model(nodes, inits, 3, 8, ["y"])


def _kept():
    """Concats whose inputs must keep their own bytes: ``a`` is read by a convolution after a Relu wrote over
    the joined tensor ``j`` (j dies at the Relu), ``x`` is the graph input, ``d`` is joined twice, and ``q``
    would start 144 bytes (one 6x6 plane) into ``k``. ``b`` and ``p`` are built in place."""
    inits: list = []
    nodes = [_conv("a", "x", 3, 4, inits), _conv("b", "x", 3, 4, inits), _conv("d", "x", 3, 4, inits),
             _conv("p", "x", 3, 1, inits, 3, 0), _conv("q", "x", 3, 2, inits, 3, 0),
             helper.make_node("Concat", ["a", "b"], ["j"], axis=1), helper.make_node("Relu", ["j"], ["jr"]),
             _conv("after", "a", 4, 2, inits), _conv("m", "jr", 8, 2, inits),
             helper.make_node("Concat", ["x", "d", "d"], ["twice"], axis=1), _conv("n", "twice", 11, 2, inits),
             helper.make_node("Concat", ["p", "q"], ["k"], axis=1), _conv("o", "k", 3, 2, inits)]
    return _model(nodes, inits, 3, 8, ["after", "m", "n", "o"])


def _run(model, tmp_path):
    x = RNG.uniform(-1, 1, tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim))
    feeds = {"x": x.astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    bundle = load_bundle(import_onnx(model, name="concat"), feeds, tmp_path)
    assert bundle() == 0
    got = bundle.outputs()
    for output, expected in zip(model.graph.output, want):
        np.testing.assert_allclose(got[output.name], expected, rtol=1e-4, atol=1e-5, err_msg=output.name)
    return bundle.result.plan


def test_dense_block_is_built_in_one_buffer(tmp_path):
    plan = _run(_dense_block(), tmp_path)
    at = {name: plan.locations[name].offset for name in ("c0", "c1", "c2", "c3", "cat1", "cat2", "cat3")}
    plane = 8 * 8 * 4
    assert at["c0"] == at["cat1"] == at["cat2"] == at["cat3"]
    assert [at[f"c{i}"] - at["cat3"] for i in (1, 2, 3)] == [8 * plane, 12 * plane, 16 * plane]


def test_inputs_that_must_keep_their_bytes_are_copied(tmp_path):
    plan = _run(_kept(), tmp_path)

    def inside(name: str, joined: str) -> bool:
        x, y = plan.locations[name], plan.locations[joined]
        return x.region == y.region and y.offset <= x.offset < y.offset + y.size

    assert inside("b", "j") and not inside("a", "j")     # a is read after the Relu wrote over j
    assert not inside("d", "twice") and not inside("x", "twice")
    assert inside("p", "k") and not inside("q", "k")


@pytest.mark.parametrize("make", [_dense_block, _kept], ids=["dense", "kept"])
def test_cortex_m_plans_keep_the_copies(make, tmp_path):
    target = resolve_target("arm", "cortex-m7")
    plan = export_bundle(import_onnx(make(), name="concat"), tmp_path, "concat", target).plan
    for buffer in plan.buffers:
        assert not buffer.offsets
