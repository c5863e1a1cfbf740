"""``pegasus run``: the demo LeNet run bare metal under qemu (Cortex-M4/M7/M55), under qemu-aarch64 and on
this machine gives the outputs onnxruntime (float) and the integer reference (quantized) give, and reports
the instructions, the stack and the buffers; a missing emulator is one line naming the Debian package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest

from pegasus.commands.quantized_model import lower_model
from pegasus.ir import serialize
from pegasus.runtime import interpreter
from tests.conftest import DEMO_DIR, run_cli

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def digit(tmp_path_factory):
    path = tmp_path_factory.mktemp("input") / "x.npy"
    np.save(path, RNG.uniform(0, 1, (1, 1, 28, 28)).astype(np.float32))
    return path


@pytest.fixture(scope="module")
def quantize_table(demo_model, tmp_path_factory):
    model, data = demo_model
    table = tmp_path_factory.mktemp("table") / "lenet.quantize"
    result = run_cli("quantize", "--model", model, "--model-data", data, "--with-input-meta",
                     DEMO_DIR / "lenet_mnist_inputmeta.yml", "--model-quantize", table)
    assert result.code == 0, result.stderr
    return table


def _run(demo_model, digit, out, *flags):
    model, data = demo_model
    result = run_cli("run", "--model", model, "--model-data", data, "--input", digit, "--output-dir", out, *flags)
    assert result.code == 0, result.stderr
    return result.stdout, dict(np.load(out / "outputs.npz"))


def _onnxruntime(digit):
    session = onnxruntime.InferenceSession(str(DEMO_DIR / "lenet_mnist.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: np.load(digit)})[0]


def _check_measured(stdout, measured: bool):
    assert "buffers: weights (constant)" in stdout and "activations" in stdout
    instructions = re.search(r"instructions per inference: ([\d,]+) .*instructions, not cycles", stdout)
    stack = re.search(r"stack used by the bundle call: ([\d,]+) B", stdout)
    if measured:
        assert instructions and int(instructions.group(1).replace(",", "")) > 100_000, stdout
        assert stack and 64 <= int(stack.group(1).replace(",", "")) < 48 * 1024, stdout
    else:
        assert "instructions per inference: not measured" in stdout


TARGETS = {"cortex-m7": ["--target", "arm", "--mcpu", "cortex-m7"],
           "cortex-m4": ["--target", "arm", "--mcpu", "cortex-m4"],
           "cortex-m55": ["--target", "arm", "--mcpu", "cortex-m55"],
           "cortex-a53": ["--target", "aarch64", "--mcpu", "cortex-a53"],
           "host": ["--target", "x86_64"]}


@pytest.mark.parametrize("where", sorted(TARGETS))
def test_float_lenet_matches_onnxruntime(demo_model, digit, tmp_path, where):
    stdout, outputs = _run(demo_model, digit, tmp_path, *TARGETS[where])
    (got,) = outputs.values()
    np.testing.assert_allclose(got[0], _onnxruntime(digit), atol=1e-5, rtol=0)
    assert "largest difference" in stdout and stdout.count("top-5") == 2
    _check_measured(stdout, where.startswith("cortex-m"))


@pytest.mark.parametrize("where", sorted(TARGETS))
def test_quantized_lenet_is_exact(demo_model, digit, quantize_table, tmp_path, where):
    stdout, outputs = _run(demo_model, digit, tmp_path, *TARGETS[where], "--dtype", "quantized",
                           "--model-quantize", quantize_table)
    integer = lower_model(serialize.load(*demo_model), str(quantize_table)).graph
    expected = interpreter.run(integer, {integer.inputs[0]: np.load(digit)})
    (name,) = outputs
    np.testing.assert_array_equal(outputs[name][0], expected[name])
    assert re.search(r"largest difference 0$", stdout, re.M), stdout
    _check_measured(stdout, where.startswith("cortex-m"))


def test_kept_bundle_is_reused(demo_model, digit, tmp_path):
    stdout, first = _run(demo_model, digit, tmp_path / "a", *TARGETS["cortex-m7"], "--keep-build", tmp_path / "b")
    assert (tmp_path / "b" / "program" / "prog.elf").is_file()
    stdout, again = _run(demo_model, digit, tmp_path / "c", *TARGETS["cortex-m7"], "--bundle",
                         tmp_path / "b" / "bundle")
    np.testing.assert_array_equal(first["softmax"], again["softmax"])


def test_missing_qemu_is_one_line(demo_model, digit, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    os.symlink(shutil.which("arm-none-eabi-gcc"), tools / "arm-none-eabi-gcc")   # the compiler, but no qemu
    model, data = demo_model

    proc = subprocess.run([sys.executable, "-m", "pegasus", "run", "--model", model, "--model-data", data,
                           "--input", digit, "--target", "arm", "--mcpu", "cortex-m7"],
                          capture_output=True, text=True, env={**os.environ, "PATH": str(tools)}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "pegasus: error: qemu-system-arm not found: install the Debian package(s) qemu-system-arm "
        "(apt-get install, or run scripts/install_toolchains.sh)"]


def test_target_without_an_emulator_is_refused(demo_model, digit, tmp_path):
    model, data = demo_model
    result = run_cli("run", "--model", model, "--model-data", data, "--input", digit, "--target", "i386")
    assert result.code == 2 and "cannot run --target i386 here" in result.stderr
    assert "Traceback" not in result.stderr


def test_other_models_bundle_is_a_mismatch(demo_model, digit, tmp_path):
    """A bundle of another model (``--bundle``: here LeNet with its last layer's weights negated) runs, prints
    what it printed, and exits 1 with one line per differing output on stderr; the right bundle exits 0."""
    model, data = demo_model
    graph = serialize.load(model, data)
    weight = next(name for name in reversed([n.inputs[1] for n in graph.nodes if len(n.inputs) > 1])
                  if graph.tensors[name].is_constant)
    graph.tensors[weight].data = -graph.tensors[weight].data
    serialize.save(graph, tmp_path / "other.json", tmp_path / "other.data")
    result = run_cli("export", "glow", "--model", tmp_path / "other.json", "--model-data", tmp_path / "other.data",
                     "--target", "arm", "--mcpu", "cortex-m7", "--output-path", tmp_path / "other")
    assert result.code == 0, result.stderr
    result = run_cli("run", "--model", model, "--model-data", data, "--input", digit, *TARGETS["cortex-m7"],
                     "--bundle", tmp_path / "other")
    assert result.code == 1, result.stderr
    assert "largest difference" in result.stdout and "instructions per inference" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        r"pegasus run: output '\w+' on the target differs from pegasus inference \(largest difference [\d.e-]+\)",
        lines[0]), result.stderr
