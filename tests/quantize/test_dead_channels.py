"""Near-zero weights next to a bias (issue 10, item 8). A trained MobileNet has dead output channels whose weights
BatchNormalization folding leaves at ~1e-30; per-channel quantization gave them a scale of ~1e-32, ``bias / (s_in
* s_w)`` overflowed int64 (``RuntimeWarning: invalid value encountered in cast``) and the integer bias became 0 or
INT64_MIN: channels whose float output is relu(bias) > 0 output 0, silently.

Conv, Gemm and MatMul + Add layers with such channels (and an all-zero channel, and the same with an all-zero
bias, and with every channel dead) are quantized under every integer scheme, lowered and run: integer inference
must stay within one output step of onnxruntime's float result on the dead channels (and within five on the
others, whose products carry the inputs' and weights' rounding), the quantized host bundle must equal it byte
for byte, and no NumPy warning may be raised anywhere. A table made before the fix (dead channels on their own
tiny scale) still gives the bias, and says so."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.cli import main
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.assign import build_table
from pegasus.quantizers.calibrate import calibrate
from pegasus.quantizers.quantize_file import load_table, save_table
from pegasus.quantizers.schemes import Scheme
from pegasus.runtime import interpreter
from tests.support.host_runner import run_bundle_host

CHANNELS = 8
DEAD = [2, 5]      # weights ~1e-30 (BatchNormalization folding of a dead channel)
ZERO = 6           # weights exactly 0
SCHEMES = {"pc_i8": ("perchannel_symmetric_affine", "int8"), "u8": ("asymmetric_affine", "uint8"),
           "i8": ("asymmetric_affine", "int8"), "dfp_i8": ("dynamic_fixed_point", "int8"),
           "dfp_i16": ("dynamic_fixed_point", "int16")}
INPUT = {"Conv": [1, 3, 6, 6], "Gemm": [4, 12], "MatMul": [4, 12]}


def weights_and_bias(variant: str, shape: tuple[int, ...], rng) -> tuple[np.ndarray, np.ndarray]:
    """Weights with output channels along axis 0 and a bias, positive on the dead channels."""
    w = (rng.standard_normal(shape) * 0.3).astype(np.float32)
    b = (rng.standard_normal(shape[0]) * 0.2).astype(np.float32)
    dead = list(range(shape[0])) if variant == "all_dead" else DEAD
    w[dead] = (np.sign(w[dead]) * 1e-30).astype(np.float32)
    b[dead] = np.linspace(0.3, 0.8, len(dead))
    if variant != "all_dead":
        w[ZERO] = 0.0
        b[ZERO] = 0.5
    if variant == "zero_bias":
        b[:] = 0.0
    return w, b


def model(op: str, variant: str) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    if op == "Conv":
        w, b = weights_and_bias(variant, (CHANNELS, 3, 3, 3), rng)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["z"], pads=[1, 1, 1, 1])]
    elif op == "Gemm":
        w, b = weights_and_bias(variant, (CHANNELS, 12), rng)
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["z"], transB=1)]
    else:
        w, b = weights_and_bias(variant, (CHANNELS, 12), rng)
        w = np.ascontiguousarray(w.T)  # columns are the output channels
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["z"])]
    nodes.append(helper.make_node("Relu", ["z"], ["y"]))
    out_shape = [1, CHANNELS, 6, 6] if op == "Conv" else [4, CHANNELS]
    graph = helper.make_graph(nodes, "dead", [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT[op])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def samples(op: str, count: int = 8) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [{"x": rng.standard_normal(INPUT[op]).astype(np.float32)} for _ in range(count)]


def quantize(graph, feeds, quantizer: str, qtype: str):
    scheme = Scheme.of(quantizer, qtype)
    calibration = calibrate(graph, feeds, total=len(feeds), batch_size=len(feeds), signed=scheme.qtype != "u8",
                            progress=False)
    return build_table(graph, calibration.ranges, scheme, algorithm="normal", digest=serialize.graph_digest(graph))


def output_steps(got: np.ndarray, want: np.ndarray, step: float) -> np.ndarray:
    """|integer - float| per output channel, in output steps."""
    channel_axis = 1
    error = np.abs(got.astype(np.float64) - want.astype(np.float64)) / step
    return error.max(axis=tuple(i for i in range(error.ndim) if i != channel_axis))


def check_against_onnxruntime(onnx_model, lowered_graph, table, feeds, dead: list[int]) -> None:
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    step = float(table.get("y").scale[0])
    for feed in feeds:
        want = session.run(None, feed)[0]
        errors = output_steps(interpreter.run(lowered_graph, feed)["y"], want, step)
        assert errors[dead].max() <= 1.0, f"dead channels {dead}: {errors[dead]} output steps off"
        assert errors.max() <= 5.0, f"{errors} output steps off"  # live channels: 27 taps of rounding
        if table.get("b") is not None and np.any(onnx.numpy_helper.to_array(onnx_model.graph.initializer[1])):
            assert want[:, dead].min() >= 0.3  # the float model's dead channels output their bias


@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("variant", ["dead", "zero_bias", "all_dead"])
@pytest.mark.parametrize("op", ["Conv", "Gemm", "MatMul"])
def test_dead_channels_output_their_bias(op, variant, scheme, tmp_path):
    onnx_model = model(op, variant)
    feeds = samples(op)
    dead = list(range(CHANNELS)) if variant == "all_dead" else DEAD + [ZERO]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any NumPy warning (overflow, invalid cast) fails the test
        graph = import_onnx(onnx_model, name="dead")
        table = quantize(graph, feeds, *SCHEMES[scheme])
        lowered = lower_to_integer(graph, table)
        check_against_onnxruntime(onnx_model, lowered.graph, table, feeds, dead)
        if variant == "dead":
            bundle = run_bundle_host(lowered.graph, feeds[0], workdir=tmp_path)
            assert bundle["y"].tobytes() == interpreter.run(lowered.graph, feeds[0])["y"].tobytes()
    assert lowered.float_layers == []
    if scheme == "pc_i8" and variant != "all_dead":  # the table's own grid holds the bias: nothing to adapt
        assert lowered.notes == []


@pytest.mark.parametrize("op", ["Conv", "Gemm"])
def test_a_table_made_before_the_fix_still_gives_the_bias_and_says_so(op, tmp_path, capsys):
    """Tables written before the fix gave dead channels their own scale (max|w| / 127 ~ 8e-33) and are reused
    by ``pegasus quantize`` as they are: the lowering raises those channels' weight scale so that the bias fits
    (the weights become 0), prints which channels, and the answer is right."""
    onnx_model = model(op, "dead")
    onnx.save(onnx_model, str(tmp_path / "m.onnx"))
    feeds = samples(op)
    for i, feed in enumerate(feeds):
        np.save(tmp_path / f"s{i}.npy", feed["x"])
    (tmp_path / "dataset.txt").write_text("".join(f"s{i}.npy\n" for i in range(len(feeds))))
    for args in (["import", "onnx", "--model", tmp_path / "m.onnx", "--output-model", tmp_path / "m.json",
                  "--output-data", tmp_path / "m.data"],
                 ["generate", "inputmeta", "--model", tmp_path / "m.json", "--source-file", tmp_path / "dataset.txt",
                  "--input-meta-output", tmp_path / "meta.yml"],
                 ["quantize", "--model", tmp_path / "m.json", "--model-data", tmp_path / "m.data",
                  "--with-input-meta", tmp_path / "meta.yml", "--quantizer", "perchannel_symmetric_affine",
                  "--qtype", "int8", "--model-quantize", tmp_path / "m.quantize", "--batch-size", len(feeds)]):
        assert main([str(a) for a in args]) == 0
    graph = serialize.load(tmp_path / "m.json", tmp_path / "m.data")
    table = load_table(tmp_path / "m.quantize", graph, serialize.graph_digest(graph))
    weights = np.asarray(onnx.numpy_helper.to_array(onnx_model.graph.initializer[0]), dtype=np.float64)
    old = np.abs(weights).reshape(CHANNELS, -1).max(axis=1) / 127.0
    table.tensors["w"].scale = [float(s) if s > 0 else 1.0 for s in old]  # the pre-fix grid
    save_table(table, tmp_path / "m.quantize")
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main([str(a) for a in ["inference", "--model", tmp_path / "m.json", "--model-data", tmp_path / "m.data",
                                      "--dtype", "quantized", "--model-quantize", tmp_path / "m.quantize",
                                      "--with-input-meta", tmp_path / "meta.yml", "--postprocess", "dump_result",
                                      "--output-dir", tmp_path]]) == 0
    out = capsys.readouterr().out
    assert f"2 output channel(s) ({DEAD[0]}, {DEAD[1]})" in out and "raised" in out, out
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    step = float(table.get("y").scale[0])
    with np.load(tmp_path / "outputs.npz") as npz:
        for i, feed in enumerate(feeds):
            errors = output_steps(npz["y"][i], session.run(None, feed)[0], step)
            assert errors[DEAD].max() <= 1.0 and errors.max() <= 5.0, errors


def test_a_bias_that_is_not_finite_saturates_and_says_so():
    """An infinite bias (a mask folded into a layer) has no integer value: it saturates at the limit, explicitly,
    and the lowering says which channel; the other channels are unaffected."""
    onnx_model = model("Gemm", "dead")
    bias = numpy_helper.to_array(onnx_model.graph.initializer[1]).copy()
    bias[0] = np.inf
    onnx_model.graph.initializer[1].CopyFrom(numpy_helper.from_array(bias, "b"))
    feeds = samples("Gemm")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graph = import_onnx(onnx_model, name="inf")
        finite = [{"x": f["x"]} for f in feeds]
        table = quantize(graph, finite, "perchannel_symmetric_affine", "int8")
        lowered = lower_to_integer(graph, table)
        got = interpreter.run(lowered.graph, feeds[0])["y"]
    assert any("saturates" in note and "channel(s) 0 " in note for _, note in lowered.notes), lowered.notes
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds[0])[0]
    step = float(table.get("y").scale[0])
    assert np.all(got[:, 0] == got[:, 0].max()) and got[:, 0].max() >= float(table.get("y").max_value[0]) - step
    errors = output_steps(got[:, 1:], want[:, 1:], step)
    assert errors.max() <= 5.0, errors


def test_numpy_warnings_raised_in_pegasus_code_fail_the_suite():
    """pyproject.toml's ``error::RuntimeWarning:pegasus`` matches the start of the module a warning is raised in:
    a NumPy warning inside any pegasus module (quantizers, importers and exporters install as pegasus.*) is an
    error, one raised in a test's own code is not."""
    import pegasus.exporters.glow.codegen
    import pegasus.importers.onnx.loader
    import pegasus.quantizers.schemes
    from pegasus.ops.fixedpoint import quantize_values

    with pytest.raises(RuntimeWarning, match="invalid value"):
        quantize_values(np.array([np.nan]), 1.0, 0, "int8")  # rint(nan) cast to int8, inside pegasus.ops
    for module in (pegasus.quantizers.schemes, pegasus.importers.onnx.loader, pegasus.exporters.glow.codegen):
        assert module.__name__.startswith("pegasus.")
    with pytest.warns(RuntimeWarning):
        np.array([np.nan]).astype(np.int8)  # the same warning in this test's own code stays a warning
