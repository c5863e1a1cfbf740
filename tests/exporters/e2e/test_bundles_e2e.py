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
from onnx.backend.test.runner import Runner

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.runtime import interpreter
from tests.conftest import DEMO_DIR, run_cli
from tests.support import toolchains

sys.path.insert(0, str(DEMO_DIR))
from heldout import heldout_digits  # noqa: E402

from tests.support.model_bundles import LIGHT, LIGHT_DIR, SINGLE_OPS, output_spec, randn

CORTEX_M = ["cortex-m7", "cortex-m4", "cortex-m33"]


def close(actual: dict, expected: dict) -> None:
    for name, want in expected.items():
        np.testing.assert_allclose(actual[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


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


@pytest.fixture(scope="module")
def single_op_graphs():
    return {name: import_onnx(model, name=name.lower()) for name, model in SINGLE_OPS.items()}


@pytest.mark.parametrize("cpu", CORTEX_M)
@pytest.mark.parametrize("op", list(SINGLE_OPS))
def test_single_op_on_cortex_m(op, cpu, single_op_graphs, tmp_path):
    graph = single_op_graphs[op]
    feeds = {name: randn(*graph.type_of(name).shape) for name in graph.inputs}
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
