"""RNN, GRU and LSTM: ``infer`` agrees with ``reference``, and one-node models agree with onnxruntime
across directions, optional inputs (bias, initial states, peepholes, sequence lengths), layouts and
attributes (clip, input_forget, linear_before_reset, activations with alpha/beta).

onnxruntime refuses layout=1, so a batch-major model is checked against onnxruntime running the same
weights time-major on transposed inputs and outputs.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pegasus.errors import PegasusError
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.tensor import TensorType
from pegasus.ops import get_op
from pegasus.ops.registry import ShapeError, make_attrs
from pegasus.runtime.interpreter import run
from tests.support.ops_reference import assert_same, check_infer, onnx_model
from tests.support.requirements import need_module

ort = need_module("onnxruntime")

RNG = np.random.default_rng(7)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
STATES = {"RNN": 1, "GRU": 1, "LSTM": 2}
SEQ, BATCH, SIZE, HIDDEN = 5, 3, 4, 6


def rand(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def make_inputs(op: str, dirs: int = 1, *, bias: bool = False, initial: bool = False, peepholes: bool = False,
                lens: np.ndarray | None = None, layout: int = 0) -> dict[str, np.ndarray | None]:
    """The op's inputs in ONNX order; None marks an omitted one."""
    g = GATES[op] * HIDDEN
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    inputs = {"X": rand(BATCH, SEQ, SIZE, scale=1) if layout else rand(SEQ, BATCH, SIZE, scale=1),
              "W": rand(dirs, g, SIZE), "R": rand(dirs, g, HIDDEN), "B": rand(dirs, 2 * g) if bias else None,
              "sequence_lens": lens, "initial_h": rand(*state) if initial else None}
    if op == "LSTM":
        inputs["initial_c"] = rand(*state) if initial else None
        inputs["P"] = rand(dirs, 3 * HIDDEN) if peepholes else None
    return inputs


def single_node(op: str, inputs: dict, attrs: dict, *, opset: int = 22, runtime: tuple[str, ...] = ("X",)):
    """(model, feeds) of one recurrent node; inputs not in ``runtime`` become initializers."""
    constants = {n: v for n, v in inputs.items() if v is not None and n not in runtime}
    feeds = {n: inputs[n] for n in runtime if inputs[n] is not None}
    model = onnx_model(op, inputs, {"hidden_size": HIDDEN, **attrs}, opset=opset, constants=constants,
                       outputs=1 + STATES[op])
    return model, feeds


def ours(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    results = run(import_onnx(model), feeds)
    return [results[o.name] for o in model.graph.output]


def theirs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def ours_and_ort(op: str, inputs: dict, attrs: dict, **kwargs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    model, feeds = single_node(op, inputs, attrs, **kwargs)
    return ours(model, feeds), theirs(model, feeds)


def assert_close(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same(a, b, rtol=1e-4, atol=1e-5)


def batch_major(inputs: dict) -> dict:
    """The same inputs for layout=1: X is [batch, seq, size], the states [batch, dirs, hidden]."""
    moved = {"X": (1, 0, 2), "initial_h": (1, 0, 2), "initial_c": (1, 0, 2)}
    return {n: v.transpose(moved[n]) if n in moved and v is not None else v for n, v in inputs.items()}


CASES = list(itertools.product(("RNN", "GRU", "LSTM"), ("forward", "reverse", "bidirectional"), (False, True)))


@pytest.mark.parametrize("op,direction,extras", CASES)
def test_matches_onnxruntime(op, direction, extras):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(op, dirs, bias=extras, initial=extras, peepholes=extras)
    assert_close(*ours_and_ort(op, inputs, {"direction": direction}))


@pytest.mark.parametrize("op,direction,extras", CASES)
def test_batch_major_layout_matches_onnxruntime_time_major(op, direction, extras):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(op, dirs, bias=extras, initial=extras)
    y, *states = theirs(*single_node(op, inputs, {"direction": direction}))
    got = ours(*single_node(op, batch_major(inputs), {"direction": direction, "layout": 1}))
    assert_close(got, [y.transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in states])


@pytest.mark.parametrize("op,direction", list(itertools.product(("RNN", "GRU", "LSTM"), ("forward", "bidirectional"))))
def test_runtime_sequence_lengths_and_states(op, direction):
    """Steps past a sequence's end keep the state and give zeros; lengths and states fed at run time."""
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(op, dirs, bias=True, initial=True, lens=np.array([SEQ, 2, 0], np.int32))
    runtime = ("X", "sequence_lens", "initial_h") + (("initial_c",) if op == "LSTM" else ())
    assert_close(*ours_and_ort(op, inputs, {"direction": direction}, runtime=runtime))


def test_lstm_clip_peepholes_input_forget():
    inputs = make_inputs("LSTM", 2, bias=True, initial=True, peepholes=True)
    attrs = {"direction": "bidirectional", "clip": 0.7, "input_forget": 1}
    assert_close(*ours_and_ort("LSTM", inputs, attrs))


@pytest.mark.parametrize("lbr,clip", list(itertools.product((0, 1), (None, 0.4))))
def test_gru_linear_before_reset_and_clip(lbr, clip):
    attrs = {"direction": "bidirectional", "linear_before_reset": lbr} | ({"clip": clip} if clip else {})
    assert_close(*ours_and_ort("GRU", make_inputs("GRU", 2, bias=True, initial=True), attrs))


ACTIVATIONS = [
    ("RNN", ["Relu"], [], []), ("RNN", ["Affine"], [0.3], [0.1]), ("RNN", ["ScaledTanh"], [0.7], [1.5]),
    ("RNN", ["Elu"], [0.3], []), ("RNN", ["ThresholdedRelu"], [0.2], []), ("RNN", ["Softsign"], [], []),
    ("RNN", ["Softplus"], [], []), ("RNN", ["HardSigmoid"], [0.3], [0.4]), ("RNN", ["LeakyRelu"], [], []),
    ("GRU", ["HardSigmoid", "LeakyRelu"], [0.25, 0.2], [0.45]),
    ("LSTM", ["HardSigmoid", "Tanh", "Softsign"], [], []),
    ("LSTM", ["Sigmoid", "LeakyRelu", "ScaledTanh", "HardSigmoid", "Affine", "Tanh"], [0.1, 0.8, 0.2, 0.5],
     [1.2, 0.6, 0.1]),
]


@pytest.mark.parametrize("op,names,alphas,betas", ACTIVATIONS)
def test_activations_consume_alpha_beta_in_order(op, names, alphas, betas):
    dirs = len(names) // len(get_op(op).default_activations)
    attrs = {"direction": "bidirectional" if dirs == 2 else "forward", "activations": names}
    attrs |= ({"activation_alpha": alphas} if alphas else {}) | ({"activation_beta": betas} if betas else {})
    assert_close(*ours_and_ort(op, make_inputs(op, dirs, bias=True), attrs))


@pytest.mark.parametrize("op,opset", [("LSTM", 7), ("GRU", 7), ("RNN", 7), ("GRU", 14), ("LSTM", 14)])
def test_older_opsets(op, opset):
    assert_close(*ours_and_ort(op, make_inputs(op, 1, bias=True, initial=True), {}, opset=opset))


def test_omitted_outputs_and_constant_full_lengths_are_dropped():
    """Y may be omitted ('' in ONNX); full-length constant sequence_lens do not reach the IR."""
    inputs = make_inputs("LSTM", 1, lens=np.full(BATCH, SEQ, np.int32))
    node = helper.make_node("LSTM", ["X", "W", "R", "", "L"], ["", "Y_h"], hidden_size=HIDDEN)
    graph = helper.make_graph(
        [node], "t", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, inputs["X"].shape)],
        [helper.make_empty_tensor_value_info("Y_h")],
        initializer=[numpy_helper.from_array(inputs[n], n) for n in ("W", "R")]
        + [numpy_helper.from_array(inputs["sequence_lens"], "L")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 8
    imported = import_onnx(model)
    (lstm,) = imported.nodes
    assert lstm.inputs == ["X", "W", "R"] and lstm.outputs == ["", "Y_h"]
    assert_close([run(imported, {"X": inputs["X"]})["Y_h"]], theirs(model, {"X": inputs["X"]}))


# ---- infer agrees with reference -----------------------------------------------------------------


@pytest.mark.parametrize("op,direction,layout", list(itertools.product(("RNN", "GRU", "LSTM"),
                                                                       ("forward", "bidirectional"), (0, 1))))
def test_infer_matches_reference(op, direction, layout):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(op, dirs, bias=True, initial=True, peepholes=True, layout=layout,
                         lens=np.array([1, SEQ, 3], np.int32))
    results = check_infer(op, {"direction": direction, "layout": layout}, list(inputs.values()))
    assert results[0].shape == ((BATCH, SEQ, dirs, HIDDEN) if layout else (SEQ, dirs, BATCH, HIDDEN))


def test_float16_keeps_its_type():
    inputs = {n: None if v is None else v.astype(np.float16) for n, v in make_inputs("GRU", 1, bias=True).items()}
    results = check_infer("GRU", {}, list(inputs.values()))
    assert all(r.dtype == np.float16 for r in results)


@pytest.mark.parametrize("attrs,change,message", [
    ({"direction": "sideways"}, {}, "direction"),
    ({"hidden_size": 7}, {}, "hidden_size"),
    ({"activations": ("Sigmoid",)}, {}, "activations"),
    ({"activations": ("Sigmoid", "Tanh", "Gelu")}, {}, "unknown activation"),
    ({}, {"B": rand(1, 4 * HIDDEN)}, "B has shape"),
    ({}, {"initial_h": rand(2, BATCH, HIDDEN)}, "initial_h has shape"),
    ({}, {"P": rand(1, 4 * HIDDEN)}, "P has shape"),
])
def test_bad_shapes_and_attributes_are_shape_errors(attrs, change, message):
    inputs = make_inputs("LSTM") | change
    opdef = get_op("LSTM")
    with pytest.raises(ShapeError, match=message):
        opdef.infer(make_attrs(opdef, **attrs), [None if v is None else TensorType.of(v) for v in inputs.values()])


def test_unknown_onnx_attribute_is_reported():
    model = onnx_model("GRU", make_inputs("GRU"), {"hidden_size": HIDDEN, "frobnicate": 1}, opset=22, outputs=2)
    with pytest.raises(PegasusError, match="frobnicate"):
        import_onnx(model)
