"""Layers whose functions would be the same IR (codegen.py ``_shared``: same kernel, shapes and argument
attributes, at other offsets) are compiled once and called for each: a chain of equal convolutions and
element-wise layers keeps one function per distinct layer, runs as onnxruntime does, and a layer that differs
in anything (its attributes, a weight shape) keeps a function of its own. A layer whose emitter would see what
an earlier one saw (``_layer_key``) is not even generated again, and the object file is the same bytes as when
every layer is generated and compared.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from llvmlite import ir
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow import codegen
from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.memory.plan import plan_memory
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ops.registry import make_attrs
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(23)


def _chain():
    """x -> three padded conv3x3 + relu -> an unpadded conv3x3 + relu (another shape) -> two Muls by
    per-channel scales; every layer with its own weights."""
    inits, nodes, current = [], [], "x"
    for i, pads in enumerate([1, 1, 1, 0]):
        inits += [numpy_helper.from_array((RNG.standard_normal((8, 8, 3, 3)) / 9).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [current, f"w{i}", f"b{i}"], [f"c{i}"], pads=[pads] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        current = f"r{i}"
    for i in range(2):
        inits.append(numpy_helper.from_array(RNG.standard_normal((1, 8, 1, 1)).astype(np.float32), f"s{i}"))
        nodes.append(helper.make_node("Mul", [current, f"s{i}"], [f"m{i}"]))
        current = f"m{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 12, 12))],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_equal_layers_share_one_function_and_match_onnxruntime(tmp_path):
    model = _chain()
    graph = import_onnx(model, name="chain")
    lowered = lower_for_export(graph)
    target = resolve_target(None, None, None, "pic")
    layers = fuse_layers(lowered)
    module = build_module(lowered, plan_memory(lowered, layers), target, "net")
    defined = [f for f in module.functions if not f.is_declaration and f.name != "net"]
    calls = [i for block in module.get_global("net").blocks for i in block.instructions if isinstance(i, ir.CallInstr)]
    callees = [call.callee.name for call in calls]
    assert len(layers) == 6 and len(callees) == 6
    # the three padded conv + relu are one function, the unpadded one another, the two Muls a third
    assert callees[0] == callees[1] == callees[2] != callees[3] != callees[4] == callees[5] != callees[0]
    assert sorted(f.name for f in defined) == sorted(set(callees))
    x = RNG.uniform(-1, 1, (1, 8, 12, 12)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    actual = run_bundle_host(graph, {"x": x}, workdir=tmp_path)[graph.outputs[0]]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def test_layers_an_earlier_one_equals_are_not_generated_again(monkeypatch):
    lowered = lower_for_export(import_onnx(_chain(), name="chain"))
    target = resolve_target(None, None, None, "pic")
    emitted = []
    emit = codegen._emit_layer_body
    monkeypatch.setattr(codegen, "_emit_layer_body", lambda function, graph, unit, *rest: (
        emitted.append(unit.op), emit(function, graph, unit, *rest))[-1])
    keyed = compile_object(build_module(lowered, plan_memory(lowered, fuse_layers(lowered)), target, "net"), target)
    assert emitted == ["Conv_Relu", "Conv_Relu", "Mul"]   # the 2nd and 3rd padded conv, the 2nd Mul: not again
    monkeypatch.setattr(codegen, "_layer_key", lambda *args: "")
    emitted.clear()
    every = compile_object(build_module(lowered, plan_memory(lowered, fuse_layers(lowered)), target, "net"), target)
    assert len(emitted) == 6
    assert keyed == every


def test_layers_giving_different_optional_inputs_have_different_keys():
    """Clip(x, bound) and Clip(x, "", bound) read the same tensors in the same order: only which input slot is
    given tells them apart (the emitter sees None in the other's place), so they must not share a function."""
    tensors = {name: Tensor(name, TensorType(shape, DType.FLOAT32))
               for name, shape in (("x", (1, 4, 8)), ("bound", ()), ("low", (1, 4, 8)), ("high", (1, 4, 8)))}
    attrs = make_attrs("Clip")
    graph = Graph("clips", [Node("low", "Clip", attrs, ["x", "bound"], ["low"]),
                            Node("high", "Clip", attrs, ["x", "", "bound"], ["high"])], tensors, ["x", "bound"],
                  ["low", "high"])
    plan = plan_memory(graph)
    low, high = ([n for n in layer.inputs + layer.outputs if n] for layer in plan.layers)
    assert [graph.type_of(n) for n in low[:2]] == [graph.type_of(n) for n in high[:2]]
    assert codegen._layer_key(graph, plan, plan.layers[0], low, None) != codegen._layer_key(graph, plan,
                                                                                           plan.layers[1], high, None)
