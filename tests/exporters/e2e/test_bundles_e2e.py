"""Whole bundles through real toolchains: the demo LeNet on the host (the generated main.c and a test
harness), bare metal on Cortex-M7/M4/M33 under qemu-system-arm and on Cortex-A53 under qemu-aarch64;
the nine light models on the host; single-op graphs on the three Cortex-M CPUs. Outputs must equal the
float reference within rtol 1e-4 / atol 1e-5. Also: determinism and the CLI's optional dumps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.runner import Runner

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter
from tests.conftest import DEMO_DIR, run_cli
from tests.support import toolchains

sys.path.insert(0, str(DEMO_DIR))
from heldout import heldout_digits  # noqa: E402

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
CORTEX_M = ["cortex-m7", "cortex-m4", "cortex-m33"]
RNG = np.random.default_rng(7)


def close(actual: dict, expected: dict) -> None:
    for name, want in expected.items():
        np.testing.assert_allclose(actual[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def output_spec(graph):
    return {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}


@pytest.fixture(scope="module")
def lenet(demo_onnx):
    return import_onnx(demo_onnx, name="lenet_mnist")


@pytest.fixture(scope="module")
def digits():
    images, _ = heldout_digits()
    return images[:3]


@pytest.fixture(scope="module")
def lenet_bundle(lenet, tmp_path_factory):
    """LeNet exported once per target: {target key: bundle folder}."""
    made = {}

    def get(key: str) -> Path:
        if key not in made:
            arch, cpu = {"host": (None, None), "aarch64": ("aarch64", "cortex-a53")}.get(key, ("arm", key))
            folder = tmp_path_factory.mktemp(f"lenet-{key}")
            export_bundle(lenet, folder, "lenet_mnist", resolve_target(arch, cpu))
            made[key] = folder
        return made[key]
    return get


def test_lenet_host_harness(lenet, lenet_bundle, digits):
    for image in digits:
        feeds = {"data": image[None]}
        out = toolchains.run_host(lenet_bundle("host"), "lenet_mnist", feeds, output_spec(lenet))
        close(out, interpreter.run(lenet, feeds))


@pytest.mark.parametrize("cpu", CORTEX_M + ["aarch64"])
def test_lenet_cross_targets(cpu, lenet, lenet_bundle, digits):
    feeds = {"data": digits[0][None]}
    run = toolchains.run_aarch64 if cpu == "aarch64" else (
        lambda *a: toolchains.run_cortex_m(a[0], a[1], cpu, a[2], a[3]))
    out = run(lenet_bundle(cpu), "lenet_mnist", feeds, output_spec(lenet))
    close(out, interpreter.run(lenet, feeds))


def test_lenet_example_program_builds_and_classifies(lenet, lenet_bundle, digits):
    folder = lenet_bundle("host")
    subprocess.run(["make", "-C", str(folder)], check=True, capture_output=True)
    np.save(folder / "digit.npy", digits[1][None])
    programs = [p for p in folder.iterdir() if p.is_file() and os.access(p, os.X_OK) and p.suffix == ""]
    assert programs, "make produced no program"
    proc = subprocess.run([str(programs[0]), str(folder / "digit.npy")], cwd=folder, capture_output=True,
                          text=True, check=True)
    expected = interpreter.run(lenet, {"data": digits[1][None]})["softmax"].ravel()
    lines = proc.stdout.splitlines()
    first = lines[next(i for i, line in enumerate(lines) if "top-5" in line) + 1]
    assert int(first.split(":")[0]) == int(np.argmax(expected)), proc.stdout
    assert "Time per inference" in proc.stdout


def test_export_is_deterministic(lenet, tmp_path):
    target = resolve_target("arm", "cortex-m7")
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        export_bundle(lenet, tmp_path / sub, "lenet_mnist", target)
    for file in sorted((tmp_path / "a").iterdir()):
        assert file.read_bytes() == (tmp_path / "b" / file.name).read_bytes(), file.name


LIGHT = sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))


@pytest.mark.parametrize("model_name", LIGHT)
def test_light_model_on_host(model_name, tmp_path):
    model = onnx.load(os.path.join(LIGHT_DIR, f"light_{model_name}.onnx"))
    graph = import_onnx(model, name=model_name)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {vi.name: Runner.generate_dummy_data(vi, seed=0, name=model_name, random=False)
             for vi in model.graph.input if vi.name not in initializers}
    export_bundle(graph, tmp_path, "net", resolve_target())
    out = toolchains.run_host(tmp_path, "net", feeds, output_spec(graph))
    close(out, interpreter.run(graph, feeds))


def _single_op(op: str, inputs: dict[str, tuple], attrs: dict | None = None, consts: dict | None = None,
               out_shape=None):
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    inits = [numpy_helper.from_array(v, n) for n, v in (consts or {}).items()]
    node = helper.make_node(op, list(inputs) + list(consts or {}), ["y"], **(attrs or {}))
    graph = helper.make_graph([node], op.lower(), infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                         out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


SINGLE_OPS = {
    "Conv": _single_op("Conv", {"x": (1, 3, 9, 9)}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                       {"w": _f(4, 3, 3, 3), "b": _f(4)}),
    "ConvDepthwise": _single_op("Conv", {"x": (1, 4, 8, 8)}, {"group": 4}, {"w": _f(4, 1, 3, 3)}),
    "ConvTranspose": _single_op("ConvTranspose", {"x": (1, 2, 4, 4)}, {"strides": [2, 2]}, {"w": _f(2, 3, 3, 3)}),
    "Gemm": _single_op("Gemm", {"x": (2, 8)}, {"transB": 1}, {"w": _f(5, 8), "b": _f(5)}),
    "MatMul": _single_op("MatMul", {"x": (3, 6)}, None, {"w": _f(6, 4)}),
    "MaxPool": _single_op("MaxPool", {"x": (1, 2, 7, 7)}, {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "AveragePool": _single_op("AveragePool", {"x": (1, 2, 6, 6)}, {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}),
    "GlobalAveragePool": _single_op("GlobalAveragePool", {"x": (1, 3, 5, 5)}),
    "Relu": _single_op("Relu", {"x": (2, 17)}),
    "Sigmoid": _single_op("Sigmoid", {"x": (2, 17)}),
    "Tanh": _single_op("Tanh", {"x": (2, 17)}),
    "Exp": _single_op("Exp", {"x": (2, 17)}),
    "Erf": _single_op("Erf", {"x": (2, 17)}),
    "HardSwish": _single_op("HardSwish", {"x": (2, 17)}),
    "LeakyRelu": _single_op("LeakyRelu", {"x": (2, 17)}, {"alpha": 0.2}),
    "Add": _single_op("Add", {"x": (2, 3, 4)}, None, {"b": _f(3, 1)}),
    "Mul": _single_op("Mul", {"x": (2, 3, 4), "z": (2, 3, 4)}),
    "Div": _single_op("Div", {"x": (4, 5)}, None, {"d": RNG.uniform(1, 2, (5,)).astype(np.float32)}),
    "Softmax": _single_op("Softmax", {"x": (3, 10)}),
    "Transpose": _single_op("Transpose", {"x": (2, 3, 4)}, {"perm": [2, 0, 1]}),
    "Concat": _single_op("Concat", {"x": (2, 3), "z": (2, 5)}, {"axis": 1}),
    "ReduceMean": _single_op("ReduceMean", {"x": (2, 3, 4)}, {"axes": [1], "keepdims": 0}),
    "BatchNormalization": _single_op("BatchNormalization", {"x": (1, 3, 4, 4)}, None,
                                     {"s": _f(3), "bias": _f(3), "m": _f(3), "v": RNG.uniform(0.5, 1, 3).astype(
                                         np.float32)}),
    "LayerNormalization": _single_op("LayerNormalization", {"x": (2, 6)}, None, {"g": _f(6), "bb": _f(6)}),
    "Resize": _single_op("Resize", {"x": (1, 1, 3, 3)}, {"mode": "linear"},
                         {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}),
}


@pytest.fixture(scope="module")
def single_op_graphs():
    return {name: import_onnx(model, name=name.lower()) for name, model in SINGLE_OPS.items()}


@pytest.mark.parametrize("cpu", CORTEX_M)
@pytest.mark.parametrize("op", list(SINGLE_OPS))
def test_single_op_on_cortex_m(op, cpu, single_op_graphs, tmp_path):
    graph = single_op_graphs[op]
    feeds = {name: _f(*graph.type_of(name).shape) for name in graph.inputs}
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    out = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, output_spec(graph))
    close(out, interpreter.run(graph, feeds))


def test_cli_export_with_dumps(demo_model, tmp_path):
    out = tmp_path / "bundle"
    out.mkdir()
    result = run_cli("export", "glow", "--model", demo_model[0], "--model-data", demo_model[1], "--output-path", out,
                     "--target", "arm", "--mcpu", "cortex-m7", "--dump-graph-DAG", tmp_path / "g.dot",
                     "--dump-memory-plan", tmp_path / "plan.png", "--bundle-api", "dynamic")
    assert result.code == 0, result.stderr
    assert {p.name for p in out.iterdir()} >= {"lenet_mnist.o", "lenet_mnist.h", "lenet_mnist.weights.bin",
                                               "lenet_mnist.weights.txt", "main.c", "Makefile",
                                               "lenet_mnist.memory.txt", "lenet_mnist.memory.json"}
    header = (out / "lenet_mnist.h").read_text()
    assert "extern BundleConfig lenet_mnist_config;" in header
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Flash" in result.stdout and "RAM" in result.stdout
