"""The data-movement emitters (Reshape/Flatten/Squeeze/Unsqueeze, Transpose, Expand, Tile, Concat, Split,
Slice, Pad, DepthToSpace/SpaceToDepth, Gather, and the ops folded at import) compiled into one host
bundle and compared with the reference interpreter, exactly (they copy bits): every op over every
dtype a model carries (float32, float16, int64, int32, int8, uint8, bool), plus the edge cases of
each (negative Slice steps, crops and repeated reflections in Pad, negative and run-time Gather
indices, empty tensors, scalars). A chain checks that an alias op sharing its input's buffer copies
nothing; a model is checked against onnxruntime; objects are checked for library calls.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.memory.plan import plan_memory
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import make_attrs
from pegasus.runtime import interpreter
from tests.support.bundle_cases import Case, build_graph, check_case, ids, run_cases
from tests.support.host_runner import run_bundle_host
from tests.support.objects import undefined_symbols
from tests.support.shape_samples import RNG, sample

DTYPES = ("float32", "float16", "int64", "int32", "int8", "uint8", "bool")


X = sample((2, 3, 4, 5))
I64 = np.int64

FLOAT_CASES = [
    Case("Reshape", "Reshape", [X], {"shape": (6, 20)}),
    Case("Reshape-constant", "Reshape", [X], {"shape": (120,)}, constant=(0,)),
    Case("Flatten-axis0", "Flatten", [X], {"axis": 0}),
    Case("Flatten-axis-2", "Flatten", [X], {"axis": -2}),
    Case("Squeeze", "Squeeze", [sample((1, 3, 1, 2))], {}),
    Case("Unsqueeze", "Unsqueeze", [sample((3, 2))], {"axes": (0, -1)}),
    Case("Transpose-reverse", "Transpose", [X]),
    Case("Transpose-nhwc", "Transpose", [X], {"perm": (0, 2, 3, 1)}),
    Case("Transpose-nchw", "Transpose", [sample((2, 4, 5, 3))], {"perm": (0, 3, 1, 2)}),
    Case("Transpose-inner-swap", "Transpose", [X], {"perm": (0, 1, 3, 2)}),
    Case("Transpose-scalar", "Transpose", [np.float32(3.5)]),
    Case("Expand-both-ways", "Expand", [sample((3, 1))], {"shape": (2, 1, 4)}),
    Case("Expand-scalar", "Expand", [np.float32(-2.0)], {"shape": (3, 4)}),
    Case("Expand-noop", "Expand", [X], {"shape": (1,)}),
    Case("Tile", "Tile", [sample((2, 3, 1))], {"repeats": (2, 1, 3)}),
    Case("Tile-none", "Tile", [X], {}),
    Case("Tile-zero", "Tile", [sample((2, 3))], {"repeats": (0, 2)}),
    Case("Concat-channels", "Concat", [X, sample((2, 1, 4, 5)), sample((2, 2, 4, 5))], {"axis": 1}),
    Case("Concat-last-with-empty", "Concat", [sample((2, 3)), sample((2, 0)), sample((2, 5))], {"axis": -1}),
    Case("Concat-first", "Concat", [sample((1, 4)), sample((3, 4))], {"axis": 0}),
    Case("Concat-one", "Concat", [X], {"axis": 2}),
    Case("Split-unequal", "Split", [X], {"split": (1, 3, 1), "axis": 3}),
    Case("Split-with-empty", "Split", [sample((2, 4))], {"split": (1, 3, 0), "axis": 1}),
    Case("Split-first", "Split", [X], {"split": (1, 1), "axis": 0}),
    Case("Slice-steps", "Slice", [sample((5, 6))], {"starts": (-1, 0), "ends": (-1000, 9), "axes": (1, 0),
                                                    "steps": (-2, 3)}),
    Case("Slice-reverse-all", "Slice", [X], {"starts": (-1, -1), "ends": (-1000, -1000), "axes": (2, 3),
                                             "steps": (-1, -1)}),
    Case("Slice-window", "Slice", [X], {"starts": (1, 1), "ends": (3, -1), "axes": (1, 3)}),
    Case("Slice-empty", "Slice", [sample((5, 6))], {"starts": (1,), "ends": (1,)}),
    Case("Slice-clamped", "Slice", [X], {"starts": (-100, 2), "ends": (100, 1000), "axes": (0, 3), "steps": (1, 2)}),
    Case("DepthToSpace-DCR", "DepthToSpace", [sample((2, 8, 2, 3))], {"blocksize": 2}),
    Case("DepthToSpace-CRD", "DepthToSpace", [sample((1, 18, 2, 2))], {"blocksize": 3, "mode": "CRD"}),
    Case("SpaceToDepth", "SpaceToDepth", [sample((2, 2, 4, 6))], {"blocksize": 2}),
    Case("SpaceToDepth-CRD", "SpaceToDepth", [sample((1, 3, 6, 3))], {"blocksize": 3, "mode": "CRD"}),
    Case("Gather-axis1-negative", "Gather", [X, np.array([[0, -1], [2, -3]], I64)], {"axis": 1}),
    Case("Gather-constant-int32", "Gather", [X, np.int32([4, -5, 0, 2])], {"axis": -1}, constant=(1,)),
    Case("Gather-scalar-index", "Gather", [sample((5, 3)), np.array(-2, np.int32)]),
    Case("Gather-embedding", "Gather", [sample((10, 8)), RNG.integers(0, 10, (2, 7)).astype(I64)]),
    Case("Gather-empty-indices", "Gather", [X, np.zeros((0,), I64)], {"axis": 2}),
    Case("ConstantOfShape", "ConstantOfShape", [], {"shape": (3, 2), "value": 1.5}),
    Case("ConstantOfShape-int64", "ConstantOfShape", [], {"shape": (4,), "value": 7, "dtype": "int64"}),
    Case("Range-float", "Range", [], {"start": 1, "limit": 10, "delta": 2.5}),
    Case("Range-int", "Range", [], {"start": 10, "limit": -3, "delta": -4, "dtype": "int32"}),
    Case("Shape", "Shape", [X], {"start": 1}),
    Case("Size", "Size", [X]),
]

PAD_CASES = [Case(f"Pad-{mode}-{name}", "Pad", [sample(shape)], {"pads": pads, "mode": mode, "constant_value": 2.5})
             for mode in ("constant", "reflect", "edge", "wrap")
             for name, shape, pads in (("spatial", (1, 2, 4, 5), (0, 0, 1, 2, 0, 0, 2, 1)),
                                       ("crop", (4, 5), (1, -1, -2, 2)),
                                       ("wide", (3, 4), (5, 7, 6, 9)),      # more than the axis: repeats
                                       ("none", (2, 3), ()))]
PAD_CASES.append(Case("Pad-constant-from-empty", "Pad", [sample((2, 0))], {"pads": (1, 1, 0, 2), "constant_value": -1}))


def _dtype_cases(dtype: str) -> list[Case]:
    """One configuration of every data-movement op in ``dtype``."""
    x = sample((2, 3, 4, 5), dtype)
    value = {"float16": 2.5, "bool": 1.0}.get(dtype, 7.0)
    return [Case(f"{case_id}-{dtype}", op, inputs, attrs, constant) for case_id, op, inputs, attrs, constant in (
        ("Reshape", "Reshape", [x], {"shape": (6, 20)}, ()),
        ("Reshape-constant", "Reshape", [x], {"shape": (120,)}, (0,)),
        ("Transpose", "Transpose", [x], {"perm": (0, 2, 3, 1)}, ()),
        ("Expand", "Expand", [x[:, :1]], {"shape": (2, 2, 4, 5)}, ()),
        ("Tile", "Tile", [x], {"repeats": (1, 2, 1, 2)}, ()),
        ("Concat", "Concat", [x, x[:, :2]], {"axis": 1}, ()),
        ("Split", "Split", [x], {"split": (2, 3), "axis": 3}, ()),
        ("Slice", "Slice", [x], {"starts": (3, -2), "ends": (-1000, 0), "axes": (2, 3), "steps": (-2, -1)}, ()),
        ("Pad-constant", "Pad", [x], {"pads": (0, 1, 1, 0, 0, 0, 2, 1), "constant_value": value}, ()),
        ("Pad-reflect", "Pad", [x], {"pads": (0, 0, 2, 3, 0, 0, 1, 4), "mode": "reflect"}, ()),
        ("DepthToSpace", "DepthToSpace", [sample((1, 8, 2, 3), dtype)], {"blocksize": 2}, ()),
        ("Gather", "Gather", [x, np.array([[3, -1], [0, 2]], I64)], {"axis": 2}, ()),
        ("ConstantOfShape", "ConstantOfShape", [], {"shape": (2, 3), "value": value, "dtype": dtype}, ()),
    )]


CASES = FLOAT_CASES + PAD_CASES + [case for dtype in DTYPES[1:] for case in _dtype_cases(dtype)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("shape_ops"))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bundle_matches_reference(results, case):
    check_case(results, case)


def test_alias_ops_share_the_buffer_and_copy_nothing(tmp_path):
    """Inside a chain the planner gives Reshape/Flatten/Squeeze/Unsqueeze their input's bytes (so the
    emitted copy is skipped); the values still arrive intact."""
    x = sample((2, 1, 6))
    graph = Graph("chain", inputs=["x"], outputs=["y"])
    graph.tensors["x"] = Tensor("x", TensorType.of(x))
    steps = [("Relu", {}, (2, 1, 6)), ("Squeeze", {"axes": (1,)}, (2, 6)), ("Reshape", {"shape": (3, 4)}, (3, 4)),
             ("Unsqueeze", {"axes": (0,)}, (1, 3, 4)), ("Flatten", {"axis": 2}, (3, 4)), ("Neg", {}, (3, 4))]
    previous, dtype = "x", TensorType.of(x).dtype
    for index, (op, attrs, shape) in enumerate(steps):
        out = "y" if index == len(steps) - 1 else f"t{index}"
        graph.tensors[out] = Tensor(out, TensorType(shape, dtype))
        graph.nodes.append(Node(f"{op}_{index}", op, make_attrs(op, **attrs), [previous], [out]))
        previous = out
    verify(graph)
    plan = plan_memory(lower_for_export(graph))
    assert len({plan.locations[f"t{i}"].offset for i in range(5)}) == 1
    np.testing.assert_array_equal(run_bundle_host(graph, {"x": x}, workdir=tmp_path)["y"],
                                  interpreter.run(graph, {"x": x})["y"])


def test_matches_onnxruntime(tmp_path):
    """Transpose, reversed Slice, reflect Pad, Gather with run-time indices, Concat and DepthToSpace in
    one ONNX model: the bundle against onnxruntime (an independent implementation)."""
    x, idx = sample((1, 8, 4, 5)), np.array([2, -1, 0], I64)
    constants = {"starts": np.array([-1], I64), "ends": np.array([-1000], I64), "axes": np.array([3], I64),
                 "steps": np.array([-2], I64), "pads": np.array([0, 0, 2, 1, 0, 0, 1, 3], I64)}
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
             helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("Concat", ["x", "g"], ["c"], axis=1),
             helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode="CRD")]
    outputs = ["t", "s", "p", "c", "d"]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                     helper.make_tensor_value_info("idx", TensorProto.INT64, idx.shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    import onnxruntime as ort
    feeds = {"x": x, "idx": idx}
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = run_bundle_host(import_onnx(model), feeds, workdir=tmp_path)
    for name, want in zip(outputs, theirs):
        np.testing.assert_array_equal(ours[name], want)


def test_copies_call_no_library_function():
    """Copy and fill loops stay loops on a bare Cortex-M target (no memcpy/memset from newlib)."""
    x = sample((1, 64, 16, 16))
    cases = [Case("concat", "Concat", [x, x], {"axis": 1}), Case("fill", "ConstantOfShape", [], {"shape": (4096,)}),
             Case("pad", "Pad", [x], {"pads": (0, 0, 1, 1, 0, 0, 1, 1)})]
    graph = lower_for_export(build_graph(cases)[0])
    target = resolve_target("arm", "cortex-m7", "hard")
    assert not undefined_symbols(compile_object(build_module(graph, plan_memory(graph), target, "net"), target))
