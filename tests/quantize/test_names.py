"""Layer names and tensor names are two namespaces (issue 10, item 7). tf2onnx calls the last layer ``Identity``
next to the output tensor ``Identity``; pegasus drew both from one pool, so the integer lowering's Dequantize
took ``Identity_1`` and ``inference --dtype quantized`` / ``export glow --dtype quantized`` stopped with
``KeyError: 'Identity'``. Here models whose layers are called like the graph input, the outputs, a weight and
other layers' outputs (and whose outputs are called like tensors pegasus invents) go through the command line
as a user runs it: import, float inference against onnxruntime, quantize under every integer scheme,
``inference --dtype quantized`` against onnxruntime, and a quantized host bundle built with its Makefile whose
output bytes equal ``inference --dtype quantized``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.cli import main
from pegasus.ir import serialize

RNG = np.random.default_rng(7)
SAMPLES = 8
OUTPUTS = ["Identity", "Identity_1", "input_q"]
SCHEMES = [("asymmetric_affine", "uint8"), ("asymmetric_affine", "int8"), ("perchannel_symmetric_affine", "int8"),
           ("dynamic_fixed_point", "int8"), ("dynamic_fixed_point", "int16")]


def _init(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def tf2onnx_like_model() -> onnx.ModelProto:
    """Conv → Relu → MaxPool → Flatten → Gemm → Identity, with a Sigmoid and a Softmax as two more outputs; every
    layer is called like some tensor."""
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["conv"], name="input", pads=[1, 1, 1, 1]),  # the graph input
        helper.make_node("Relu", ["conv"], ["relu"], name="pool"),           # a later layer's output
        helper.make_node("MaxPool", ["relu"], ["pool"], name="relu", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="w"),           # a weight
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="flat", transB=1),  # its own input
        helper.make_node("Identity", ["logits"], ["Identity"], name="Identity"),  # tf2onnx: layer = output
        helper.make_node("Sigmoid", ["pool"], ["Identity_1"], name="Identity_1"),
        # an output called like the tensor the lowering makes for the quantized input
        helper.make_node("Softmax", ["logits"], ["input_q"], name="Identity_2"),
    ]
    graph = helper.make_graph(
        nodes, "tf2onnx_like", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("Identity", TensorProto.FLOAT, [1, 5]),
         helper.make_tensor_value_info("Identity_1", TensorProto.FLOAT, [1, 6, 4, 4]),
         helper.make_tensor_value_info("input_q", TensorProto.FLOAT, [1, 5])],
        [_init("w", (6, 3, 3, 3)), _init("b", (6,), 0.1), _init("fc_w", (5, 96), 0.2), _init("fc_b", (5,), 0.1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(*args) -> None:
    code = main([str(a) for a in args])
    assert code == 0, args


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The model imported, 8 samples as .npy with their dataset file, and the input meta: as a user has them."""
    folder = tmp_path_factory.mktemp("names")
    onnx.save(tf2onnx_like_model(), str(folder / "m.onnx"))
    for i in range(SAMPLES):
        np.save(folder / f"s{i}.npy", RNG.standard_normal((1, 3, 8, 8)).astype(np.float32))
    (folder / "dataset.txt").write_text("".join(f"s{i}.npy\n" for i in range(SAMPLES)))
    run("import", "onnx", "--model", folder / "m.onnx", "--output-model", folder / "m.json",
        "--output-data", folder / "m.data")
    run("generate", "inputmeta", "--model", folder / "m.json", "--source-file", folder / "dataset.txt",
        "--input-meta-output", folder / "m_inputmeta.yml")
    return folder


def onnxruntime_outputs(folder: Path) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"])
    rows = [session.run(OUTPUTS, {"input": np.load(folder / f"s{i}.npy")}) for i in range(SAMPLES)]
    return {name: np.stack([row[k] for row in rows]) for k, name in enumerate(OUTPUTS)}


def inference(folder: Path, out: str, *extra) -> dict[str, np.ndarray]:
    run("inference", "--model", folder / "m.json", "--model-data", folder / "m.data", "--with-input-meta",
        folder / "m_inputmeta.yml", "--postprocess", "dump_result", "--output-dir", folder / out, *extra)
    with np.load(folder / out / "outputs.npz") as npz:
        return {name: npz[name] for name in npz.files}


def test_import_keeps_the_names_and_float_inference_matches_onnxruntime(workspace):
    graph = serialize.load(workspace / "m.json", workspace / "m.data")
    assert graph.inputs == ["input"] and graph.outputs == OUTPUTS
    assert {"input", "pool", "relu", "w", "flat", "Identity_1", "Identity_2"} <= {n.name for n in graph.nodes}
    (workspace / "float").mkdir()
    got, want = inference(workspace, "float"), onnxruntime_outputs(workspace)
    assert sorted(got) == sorted(OUTPUTS)
    for name in OUTPUTS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("quantizer,qtype", SCHEMES)
def test_quantized_inference_and_bundle_keep_the_outputs(workspace, quantizer, qtype):
    tag = f"{quantizer}_{qtype}"
    table = workspace / f"{tag}.quantize"
    run("quantize", "--model", workspace / "m.json", "--model-data", workspace / "m.data", "--with-input-meta",
        workspace / "m_inputmeta.yml", "--quantizer", quantizer, "--qtype", qtype, "--model-quantize", table,
        "--batch-size", SAMPLES)
    (workspace / tag).mkdir()
    got = inference(workspace, tag, "--dtype", "quantized", "--model-quantize", table)
    want = onnxruntime_outputs(workspace)
    assert sorted(got) == sorted(OUTPUTS)
    allowed = 1e-3 if qtype == "int16" else 0.06  # measured: <= 1.2e-4 (int16), <= 0.043 (dfp int8)
    for name in OUTPUTS:  # close to float everywhere: a swapped or stale output would be far off
        error = float(np.max(np.abs(got[name] - want[name])) / np.max(np.abs(want[name])))
        assert error <= allowed, (name, error)

    bundle = workspace / f"{tag}_bundle"
    bundle.mkdir()
    run("export", "glow", "--model", workspace / "m.json", "--model-data", workspace / "m.data", "--dtype",
        "quantized", "--model-quantize", table, "--output-path", bundle, "--network-name", "net")
    header = (bundle / "net.h").read_text()
    for name in ["input"] + OUTPUTS:
        assert f"#define NET_{name} " in header, name
    make = subprocess.run(["make", "-C", str(bundle)], capture_output=True, text=True)
    assert make.returncode == 0, make.stderr + make.stdout
    for i in range(3):
        program = subprocess.run(["./net_run", "-o", "out.bin", workspace / f"s{i}.npy"], cwd=bundle,
                                 capture_output=True, text=True)
        assert program.returncode == 0, program.stderr
        expected = b"".join(got[name][i].astype(np.float32).tobytes() for name in OUTPUTS)
        assert (bundle / "out.bin").read_bytes() == expected, f"sample {i}"


def test_builder_names_step_aside_for_the_models_own_names(tmp_path):
    """Softmax-11 over two axes imports as Flatten → Softmax → Reshape, whose inner tensors the builder names
    ``sm_flatten`` and ``sm_2d``; a model that uses those names itself for later tensors keeps them."""
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1),
             helper.make_node("Neg", ["y"], ["sm_flatten"], name="sm_2d"),
             helper.make_node("Abs", ["sm_flatten"], ["sm_2d"], name="sm_flatten")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("sm_2d", TensorProto.FLOAT, [2, 3, 4]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    run("import", "onnx", "--model", tmp_path / "m.onnx", "--output-model", tmp_path / "m.json",
        "--output-data", tmp_path / "m.data")
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run("inference", "--model", tmp_path / "m.json", "--model-data", tmp_path / "m.data", "--input",
        tmp_path / "x.npy", "--postprocess", "dump_result", "--output-dir", tmp_path)
    want = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with np.load(tmp_path / "outputs.npz") as got:
        assert sorted(got.files) == ["sm_2d", "y"]
        np.testing.assert_allclose(got["sm_2d"][0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got["y"][0], want[1], rtol=1e-6)


def test_tiny_constants_whose_names_differ_only_in_symbol_characters_stay_apart(tmp_path):
    """Constants of up to 16 bytes are compiled into the bundle's code as symbols made from the tensor name;
    ``k/a`` and ``k_a`` both became ``const.k_a``, and the bundle read the first one's values twice."""
    from tests.support.host_runner import run_bundle_host

    nodes = [helper.make_node("Add", ["x", "k/a"], ["t"], name="k_a"), helper.make_node("Mul", ["t", "k_a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([1, 2], np.float32), "k/a"),
                               numpy_helper.from_array(np.array([10, 20], np.float32), "k_a")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    run("import", "onnx", "--model", tmp_path / "m.onnx", "--output-model", tmp_path / "m.json",
        "--output-data", tmp_path / "m.data")
    x = np.array([0.5, 0.25], np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_bundle_host(serialize.load(tmp_path / "m.json", tmp_path / "m.data"), {"x": x})["y"]
    np.testing.assert_array_equal(got, want)
