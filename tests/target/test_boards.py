"""``--board``: the board table sets the target, and the memory report says whether a bundle fits the board's
flash and RAM regions (one region, split across regions, or refused with exit 2)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pegasus.boards import BOARDS
from tests.conftest import run_cli

KB = 1024


def _two_convs(folder, channels: int, height: int, width: int):
    """x -> conv 3x3 -> conv 3x3 -> y, float32: input, middle and output each channels*height*width*4 bytes."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(channels, channels, 3, 3)).astype(np.float32), f"w{i}")
               for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["mid"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["mid", "w1"], ["y"], pads=[1, 1, 1, 1])]
    shape = [1, channels, height, width]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], weights)
    path = folder / "convs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    assert run_cli("import", "onnx", "--model", path, "--output-model", folder / "convs.json",
                   "--output-data", folder / "convs.data").code == 0
    return folder / "convs.json", folder / "convs.data"


def _export(model, data, out, board, *extra):
    return run_cli("export", "glow", "--model", model, "--model-data", data, "--output-path", out, "--board", board,
                   *extra)


def test_table_has_the_boards_and_a_source_per_row():
    for name in ("imxrt1010", "imxrt1050", "imxrt1060", "imxrt1064", "imxrt1170", "imxrt685", "lpc55s69",
                 "stm32f401", "stm32f746", "stm32h743", "stm32h7a3", "stm32l4r5", "stm32u585", "nrf52840",
                 "rp2040", "rp2350", "mps2-an385", "mps2-an386", "mps2-an500", "mps2-an505"):
        board = BOARDS[name]
        assert board.ram and board.flash and board.source
    # ST's datasheets' totals: F746 320 KB of SRAM incl. 64 KB DTCM (+ 16 KB ITCM); H743 192 KB of TCM and
    # 864 KB of user SRAM
    assert sum(size for _, size in BOARDS["stm32f746"].ram) == (320 + 16) * KB
    h743 = dict(BOARDS["stm32h743"].ram)
    assert h743["DTCM"] + h743["ITCM"] == 192 * KB and sum(h743.values()) - 192 * KB == 864 * KB
    listing = run_cli("boards")
    assert listing.code == 0 and "STM32F746" in listing.stdout and "DS10916" in listing.stdout


def test_float_lenet_fits_rp2040_flash_but_not_stm32f401(demo_model, tmp_path):
    model, data = demo_model
    fits = _export(model, data, tmp_path / "rp", "RP2040")
    assert fits.code == 0, fits.stderr
    assert "Fit on RP2040" in fits.stdout and "in SRAM0-3 (striped)" in fits.stdout
    assert "Fit on RP2040" in (tmp_path / "rp" / "lenet_mnist.memory.txt").read_text()
    assert "thumbv6m" in fits.stdout   # --board RP2040 set --mcpu cortex-m0 (soft float)
    refused = _export(model, data, tmp_path / "f4", "STM32F401")
    assert refused.code == 2 and "Traceback" not in refused.stderr
    assert "of flash" in refused.stderr and "STM32F401 has 512.0 KB" in refused.stderr
    assert not (tmp_path / "f4").exists() or not any((tmp_path / "f4").iterdir())   # refused before writing


def test_ram_refused_when_a_buffer_exceeds_every_region(tmp_path):
    model, data = _two_convs(tmp_path, 8, 64, 64)            # input + output = 256 KB of mutable memory
    refused = _export(model, data, tmp_path / "f7", "STM32F746")
    assert refused.code == 2, refused.stdout
    assert "the largest region of STM32F746 has 240.0 KB (SRAM1)" in refused.stderr
    assert "try --dtype quantized or --quantized-io" in refused.stderr
    assert not (tmp_path / "f7").exists() or not any((tmp_path / "f7").iterdir())   # refused before writing
    fits = _export(model, data, tmp_path / "h7", "STM32H743")
    assert fits.code == 0 and "in AXI SRAM (524,288 bytes)" in fits.stdout, fits.stdout + fits.stderr


def test_ram_split_across_regions(tmp_path):
    model, data = _two_convs(tmp_path, 8, 40, 64)            # 80 KB per tensor: 160 KB mutable + 80 KB
    result = _export(model, data, tmp_path / "f7", "STM32F746")
    assert result.code == 0, result.stderr
    assert "split across regions" in result.stdout and "in SRAM1" in result.stdout and "DTCM" in result.stdout


def test_board_contradicting_mcpu_is_refused(demo_model, tmp_path):
    model, data = demo_model
    result = _export(model, data, tmp_path, "STM32F746", "--mcpu", "cortex-m4")
    assert result.code == 2 and "--mcpu cortex-m4 contradicts --board STM32F746" in result.stderr


@pytest.mark.parametrize("board", ["STM32H743"])
def test_run_reports_fit_with_the_measured_stack(demo_model, tmp_path, board):
    model, data = demo_model
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 28, 28), np.float32))
    result = run_cli("run", "--model", model, "--model-data", data, "--input", x, "--board", board)
    assert result.code == 0, result.stderr
    assert "(measured)" in result.stdout and f"Fit on {board}" in result.stdout
