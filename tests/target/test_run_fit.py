"""``pegasus run`` of a bundle too big for the emulated board (issue 35, defect 2): one line on stderr, before
anything is linked, with what the bundle needs (flash; RAM with the harness's stack), what the board has and
what to try — not the linker's "region `FLASH' overflowed" and "collect2: error: ld returned 1 exit status".
The board it suggests runs the same bundle, as onnxruntime computes it; and when the allowance for the harness
falls short the linker's overflow is still that one line."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow.run import emulated_fit, toolchains
from tests.conftest import run_cli

RNG = np.random.default_rng(35)
MPS2 = 4 * 1024 * 1024   # FLASH and RAM of the mps2 boards' linker script (harness/mps2.ld)


def _gemm(folder, name: str, inputs: int, outputs: int):
    """An ONNX Gemm with float32 weights [inputs, outputs], imported: (json, data, onnx path, sample path)."""
    weights = (RNG.standard_normal((inputs, outputs)) * 0.01).astype(np.float32)
    bias = RNG.standard_normal(outputs).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "W", "B"], ["y"])], name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, inputs])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outputs])],
                              [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")])
    return _imported(folder, name, graph, RNG.standard_normal((1, inputs)).astype(np.float32))


def _imported(folder, name: str, graph, sample: np.ndarray):
    path = folder / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    np.save(folder / f"{name}_x.npy", sample)
    model, data = folder / f"{name}.json", folder / f"{name}.data"
    result = run_cli("import", "onnx", "--model", path, "--output-model", model, "--output-data", data)
    assert result.code == 0, result.stderr
    return model, data, path, folder / f"{name}_x.npy"


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    """4.8 MB of float32 weights: more than the 4 MB of flash of the mps2 boards, less than the 32 MB of the
    mps3-an547 (Cortex-M55)."""
    return _gemm(tmp_path_factory.mktemp("heavy"), "heavy", 1200, 1000)


def _figures(line: str, what: str) -> tuple[int, str, int]:
    found = re.search(rf"{what} ([\d,]+) B needed \([^)]*\) (>|<=) ([\d,]+) B", line)
    assert found, line
    return int(found.group(1).replace(",", "")), found.group(2), int(found.group(3).replace(",", ""))


def _assert_one_line_before_linking(result) -> str:
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for linker_word in ("collect2", "ld returned", "arm-none-eabi", "overflowed", "Traceback"):
        assert linker_word not in result.stderr
    assert "ran " not in result.stdout
    return lines[0]


def test_weights_beyond_the_flash_are_one_line_with_the_figures(heavy):
    model, data, _, sample = heavy
    result = run_cli("run", "--model", model, "--model-data", data, "--input", sample, "--target", "arm",
                     "--mcpu", "cortex-m7")
    line = _assert_one_line_before_linking(result)
    assert "bundle 'heavy' does not fit the emulated mps2-an500 board (cortex-m7)" in line, line
    flash, relation, has = _figures(line, "flash")
    assert (relation, has) == (">", MPS2) and flash > 1200 * 1000 * 4 + 1000 * 4 + 1200 * 4, line
    ram, relation, has = _figures(line, "RAM")
    assert (relation, has) == ("<=", MPS2) and ram >= 64 * 1024, line
    assert "the harness's stack 65,536" in line, line
    for hint in ("--dtype quantized", "--mcpu cortex-m55 (mps3-an547: 32 MB flash, 32 MB RAM)", "--target x86_64"):
        assert hint in line, line


def test_activations_beyond_the_ram_are_one_line_with_the_figures(tmp_path):
    repeats = 1100   # y: 1024 x 1100 floats, 4.4 MB in the mutable buffer, more than the board's 4 MB of RAM
    graph = helper.make_graph([helper.make_node("Tile", ["x", "repeats"], ["y"])], "wide",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024 * repeats])],
                              [numpy_helper.from_array(np.array([1, repeats], np.int64), "repeats")])
    model, data, _, sample = _imported(tmp_path, "wide", graph, RNG.standard_normal((1, 1024)).astype(np.float32))
    result = run_cli("run", "--model", model, "--model-data", data, "--input", sample, "--target", "arm",
                     "--mcpu", "cortex-m4")
    line = _assert_one_line_before_linking(result)
    assert "the emulated mps2-an386 board (cortex-m4)" in line, line
    assert _figures(line, "flash")[1:] == ("<=", MPS2), line
    ram, relation, has = _figures(line, "RAM")
    assert (relation, has) == (">", MPS2) and ram > 1024 * repeats * 4 + 64 * 1024, line


def test_the_suggested_board_runs_the_bundle_as_onnxruntime_does(heavy, tmp_path):
    model, data, path, sample = heavy
    result = run_cli("run", "--model", model, "--model-data", data, "--input", sample, "--target", "arm",
                     "--mcpu", "cortex-m55", "--output-dir", tmp_path)
    assert result.code == 0, result.stderr
    assert "on qemu-system-arm -M mps3-an547" in result.stdout, result.stdout
    (got,) = dict(np.load(tmp_path / "outputs.npz")).values()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": np.load(sample)})[0]
    np.testing.assert_allclose(got[0], expected, atol=1e-4, rtol=1e-4)   # got: one row per sample


def test_a_quantized_bundle_is_not_told_to_quantize():
    board = toolchains.board_for("cortex-m7")
    needs = emulated_fit.Needs("net", weights=MPS2, code=100, inputs=10, buffers=100)
    memory = toolchains.board_memory(board)
    assert (memory.flash, memory.ram, memory.stack) == (MPS2, MPS2, 64 * 1024)
    float_line = emulated_fit.fit_message(needs, board, memory, [], "x86_64")
    quantized_line = emulated_fit.fit_message(needs, board, memory, [], "x86_64", quantized=True)
    assert "--dtype quantized" in float_line and "--dtype quantized" not in quantized_line
    assert quantized_line.endswith("try --target x86_64 (this machine)"), quantized_line


def test_an_overflow_the_allowance_missed_is_still_one_line(tmp_path, monkeypatch):
    """Weights + code + inputs just under 4 MB: the harness and C library (about 14 KB) push the program over.
    With no allowance for them the check lets the link start, and the linker's overflow becomes the line."""
    model, data, _, sample = _gemm(tmp_path, "edge", 1022, 1022)
    bundle = tmp_path / "bundle"
    result = run_cli("export", "glow", "--model", model, "--model-data", data, "--output-path", bundle, "--target",
                     "arm", "--mcpu", "cortex-m7")
    assert result.code == 0, result.stderr
    monkeypatch.setattr(emulated_fit, "HARNESS_FLASH", 0)
    x = np.load(sample)
    needs = emulated_fit.bundle_needs(bundle, "edge", x.nbytes)
    assert needs.flash <= MPS2 < needs.flash + 8 * 1024   # the case this test is about
    with pytest.raises(emulated_fit.BoardTooSmallError) as raised:
        toolchains.build_cortex_m(bundle, "edge", "cortex-m7", {"x": x}, {"y": ((1, 1022), np.float32)},
                                  tmp_path)
    line = str(raised.value)
    assert "\n" not in line and "collect2" not in line, line
    assert "(the linker: region `FLASH' overflowed by" in line, line
    flash, relation, has = _figures(line, "flash")
    assert relation == ">" and has == MPS2 < flash, line
    assert not (tmp_path / "prog.elf").exists()
