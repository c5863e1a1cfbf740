"""RNN, GRU and LSTM compiled into host bundles: one-node ONNX models over directions, layouts, optional
inputs (bias, initial states, peepholes, sequence lengths, weights fed at run time), omitted outputs,
clip / input_forget / linear_before_reset, every activation with alpha/beta, float16/float64 and sizes
that leave partial tiles; outputs must equal the reference interpreter (and, for some, onnxruntime)
within rtol 1e-4 / atol 1e-5."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.memory.plan import plan_memory
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ops import get_op
from pegasus.runtime.interpreter import run
from tests.support.host_runner import run_bundle_host

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
OUTPUTS = ("Y", "Y_h", "Y_c")


def recurrent_model(op: str, attrs: dict | None = None, *, seq: int = 5, batch: int = 3, size: int = 4,
                    hidden: int = 6, bias: bool = False, initial: bool = False, peepholes: bool = False,
                    lens: list[int] | None = None, runtime: tuple[str, ...] = ("X",),
                    outputs: tuple[bool, ...] = (True, True, True), dtype=np.float32,
                    seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """(model, feeds) of one recurrent node; inputs not named in ``runtime`` become initializers."""
    attrs = dict(attrs or {})
    rng = np.random.default_rng(seed)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout, g = attrs.get("layout", 0), GATES[op] * hidden
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)

    def rand(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(dtype)

    values = {"X": rand(*((batch, seq, size) if layout else (seq, batch, size)), scale=1.0),
              "W": rand(dirs, g, size), "R": rand(dirs, g, hidden), "B": rand(dirs, 2 * g) if bias else None,
              "sequence_lens": None if lens is None else np.array(lens, np.int32),
              "initial_h": rand(*state) if initial else None,
              "initial_c": rand(*state) if initial and op == "LSTM" else None,
              "P": rand(dirs, 3 * hidden) if peepholes else None}
    names = [n if values[n] is not None else "" for n in NAMES]
    while not names[-1]:
        names.pop()
    outs = [name if wanted else "" for name, wanted in zip(OUTPUTS, outputs[:1 + (op == "LSTM") + 1])]
    node = helper.make_node(op, names, outs, hidden_size=hidden, **attrs)
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(values[n].dtype), values[n].shape)
         for n in runtime if values[n] is not None],
        [helper.make_empty_tensor_value_info(o) for o in outs if o],
        initializer=[numpy_helper.from_array(v, n) for n, v in values.items() if v is not None and n not in runtime])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 8
    return model, {n: values[n] for n in runtime if values[n] is not None}


def bundle_and_reference(model: onnx.ModelProto, feeds: dict, tmp_path) -> tuple[dict, dict]:
    graph = import_onnx(model)
    return run_bundle_host(graph, feeds, workdir=tmp_path), run(graph, feeds)


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys() and want
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape
        np.testing.assert_allclose(got[name].astype(np.float64), expected.astype(np.float64), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def check(tmp_path, op: str, attrs: dict | None = None, **kwargs) -> None:
    assert_close(*bundle_and_reference(*recurrent_model(op, attrs, **kwargs), tmp_path))


BI = {"direction": "bidirectional"}
CONFIGS = [
    ("RNN", {}, {}),
    ("RNN", BI, {"bias": True, "initial": True}),
    ("RNN", {"direction": "reverse", "clip": 0.3}, {"bias": True}),
    ("GRU", {}, {}),
    ("GRU", {"linear_before_reset": 1}, {"bias": True, "initial": True}),
    ("GRU", BI | {"clip": 0.4}, {"bias": True, "initial": True}),
    ("GRU", {"direction": "reverse", "linear_before_reset": 1}, {"bias": True}),
    ("GRU", BI | {"linear_before_reset": 1, "clip": 0.5}, {"initial": True}),
    ("LSTM", {}, {}),
    ("LSTM", BI, {"bias": True, "initial": True, "peepholes": True}),
    ("LSTM", {"input_forget": 1, "clip": 0.7}, {"bias": True, "peepholes": True}),
    ("LSTM", {"direction": "reverse"}, {"initial": True}),
    ("LSTM", BI | {"input_forget": 1, "clip": 0.2}, {"bias": True, "initial": True, "peepholes": True}),
]


@pytest.mark.parametrize("op,attrs,inputs", CONFIGS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONFIGS)])
def test_configurations(tmp_path, op, attrs, inputs):
    check(tmp_path, op, attrs, **inputs)


@pytest.mark.parametrize("op,direction", list(itertools.product(GATES, ("forward", "bidirectional"))))
def test_batch_major_layout(tmp_path, op, direction):
    check(tmp_path, op, {"direction": direction, "layout": 1}, bias=True, initial=True, peepholes=op == "LSTM",
          lens=[2, 5, 0] if direction == "forward" else None, runtime=("X", "sequence_lens"))


@pytest.mark.parametrize("op,direction", list(itertools.product(GATES, ("forward", "reverse", "bidirectional"))))
def test_sequence_lengths_fed_at_run_time(tmp_path, op, direction):
    """Steps past a sequence's end keep the state and give zeros; an empty sequence gives zero states."""
    check(tmp_path, op, {"direction": direction}, bias=True, initial=True, lens=[5, 2, 0],
          runtime=("X", "sequence_lens"))


@pytest.mark.parametrize("op", list(GATES))
def test_weights_and_states_fed_at_run_time(tmp_path, op):
    runtime = ("X", "W", "R", "B", "initial_h") + (("initial_c", "P") if op == "LSTM" else ())
    check(tmp_path, op, BI, bias=True, initial=True, peepholes=op == "LSTM", runtime=runtime)


@pytest.mark.parametrize("op", list(GATES))
def test_sizes_with_partial_tiles(tmp_path, op):
    """hidden 37, input 19: row tiles and vector loops end in partial tails."""
    check(tmp_path, op, BI, seq=4, batch=2, size=19, hidden=37, bias=True, initial=True, peepholes=op == "LSTM")


@pytest.mark.parametrize("op,outputs", [("LSTM", (True, False, False)), ("LSTM", (False, True, False)),
                                        ("LSTM", (False, False, True)), ("GRU", (False, True)),
                                        ("RNN", (True, False))])
def test_omitted_outputs(tmp_path, op, outputs):
    check(tmp_path, op, BI, bias=True, initial=True, outputs=outputs)


ACTIVATIONS = [
    ("RNN", ["Relu"], [], []), ("RNN", ["Tanh"], [], []), ("RNN", ["Sigmoid"], [], []),
    ("RNN", ["Affine"], [0.3], [0.1]), ("RNN", ["Affine"], [], []), ("RNN", ["ScaledTanh"], [0.7], [1.5]),
    ("RNN", ["Elu"], [0.3], []), ("RNN", ["ThresholdedRelu"], [0.2], []), ("RNN", ["Softsign"], [], []),
    ("RNN", ["Softplus"], [], []), ("RNN", ["HardSigmoid"], [0.3], [0.4]), ("RNN", ["HardSigmoid"], [], []),
    ("RNN", ["LeakyRelu"], [], []), ("RNN", ["LeakyRelu", "Elu"], [0.05], []),
    ("GRU", ["HardSigmoid", "LeakyRelu"], [0.25, 0.2], [0.45]),
    ("GRU", ["Sigmoid", "Softsign", "HardSigmoid", "ScaledTanh"], [0.3, 0.9], [0.6, 1.1]),
    ("LSTM", ["HardSigmoid", "Tanh", "Softsign"], [], []),
    ("LSTM", ["Sigmoid", "LeakyRelu", "ScaledTanh", "HardSigmoid", "Affine", "Tanh"], [0.1, 0.8, 0.2, 0.5],
     [1.2, 0.6, 0.1]),
]


@pytest.mark.parametrize("op,names,alphas,betas", ACTIVATIONS, ids=[f"{a[0]}-{'-'.join(a[1])}" for a in ACTIVATIONS])
def test_activations_with_alpha_beta(tmp_path, op, names, alphas, betas):
    dirs = len(names) // len(get_op(op).default_activations)
    attrs = {"direction": "bidirectional" if dirs == 2 else "forward", "activations": names}
    attrs |= ({"activation_alpha": alphas} if alphas else {}) | ({"activation_beta": betas} if betas else {})
    check(tmp_path, op, attrs, bias=True, initial=True)


@pytest.mark.parametrize("op,dtype", [("GRU", np.float16), ("LSTM", np.float16), ("LSTM", np.float64),
                                      ("RNN", np.float64)])
def test_float16_and_float64(tmp_path, op, dtype):
    check(tmp_path, op, BI, bias=True, initial=True, peepholes=op == "LSTM", dtype=dtype)


@pytest.mark.parametrize("op", list(GATES))
def test_matches_onnxruntime(tmp_path, op):
    """An independent check: the bundle against onnxruntime directly."""
    import onnxruntime as ort
    model, feeds = recurrent_model(op, BI | {"clip": 0.9}, bias=True, initial=True, peepholes=op == "LSTM",
                                   lens=[4, 5, 1], runtime=("X", "sequence_lens"), seed=3)
    got = run_bundle_host(import_onnx(model), feeds, workdir=tmp_path)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip((o.name for o in model.graph.output), session.run(None, feeds)))
    assert_close(got, want)


def test_module_calls_nothing_outside_itself():
    """Only LLVM intrinsics may be declared (math comes from the bundle's own library)."""
    model, _ = recurrent_model("LSTM", BI | {"clip": 0.5}, bias=True, initial=True, peepholes=True,
                               lens=[1, 2, 3], runtime=("X", "sequence_lens"))
    graph = lower_for_export(import_onnx(model))
    module = build_module(graph, plan_memory(graph), resolve_target("arm", "cortex-m7", "hard"), "net")
    declared = [f.name for f in module.functions if f.is_declaration]
    assert all(name.startswith("llvm.") for name in declared), declared
