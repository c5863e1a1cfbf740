"""``pegasus export glow`` refuses bad requests with one line, exit 2, and leaves DIR untouched."""

from __future__ import annotations

import pytest

from pegasus.cli import main
from pegasus.exporters.glow import codegen
from pegasus.exporters.glow.kernels import strategy
from tests.conftest import CliResult, run_cli
from tests.support.cli_errors import assert_one_line_error


def export(demo_model, out_dir, *extra):
    return run_cli("export", "glow", "--model", demo_model[0], "--model-data", demo_model[1], "--output-path",
                   out_dir, *extra)


@pytest.mark.parametrize("flags,fragments", [
    (["--target", "riscv"], ["--target", "riscv", "x86_64", "aarch64"]),
    (["--target", "arm", "--mcpu", "cortex-m99"], ["--mcpu", "cortex-m99", "cortex-m4", "cortex-m7"]),
    (["--mcpu", "cortex-m0", "--float-abi", "hard"], ["no FPU", "--float-abi soft"]),
    (["--relocation-model", "dynamic-no-pic"], ["--relocation-model"]),
    (["--bundle-api", "fancy"], ["--bundle-api"]),
])
def test_bad_target_flags(demo_model, tmp_path, flags, fragments):
    result = export(demo_model, tmp_path, *flags)
    assert_one_line_error(result, *fragments)
    assert list(tmp_path.iterdir()) == []


def test_output_dir_under_a_file(demo_model, tmp_path):
    (tmp_path / "blocker").write_text("a file")
    assert_one_line_error(export(demo_model, tmp_path / "blocker" / "out"), "--output-path", "blocker is a file")
    assert [p.name for p in tmp_path.iterdir()] == ["blocker"]


def test_op_without_emitter_is_named_with_its_layer(demo_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(codegen, "implementations_of",   # as if no implementation computed a Softmax
                        lambda kind: [] if kind == "Softmax" else strategy.implementations_of(kind))
    (tmp_path / "keep.txt").write_text("untouched")
    code = main(["export", "glow", "--model", str(demo_model[0]), "--model-data", str(demo_model[1]),
                 "--output-path", str(tmp_path)])
    captured = capsys.readouterr()
    assert_one_line_error(CliResult(code, captured.out, captured.err), "Softmax", "layer '/Softmax'")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
