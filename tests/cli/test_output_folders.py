"""Every command that writes files creates a missing output folder (with its parents) and writes there; a path
that can never be written (a component is a regular file) is refused up front with one line, exit 2, and
nothing written anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pegasus.cli import main
from pegasus.fileio import AtomicFileSet
from tests.conftest import DEMO_DIR

DEMO_ONNX = DEMO_DIR / "lenet_mnist.onnx"
DEMO_DATASET = DEMO_DIR / "dataset.txt"


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    """The demo LeNet imported, its input meta and a uint8 table, in a folder of their own."""
    folder = tmp_path_factory.mktemp("prepared")
    files = {"json": folder / "lenet.json", "data": folder / "lenet.data", "meta": folder / "lenet_inputmeta.yml",
             "table": folder / "lenet.quantize"}
    assert main(["import", "onnx", "--model", str(DEMO_ONNX), "--output-model", str(files["json"])]) == 0
    assert main(["generate", "inputmeta", "--model", str(files["json"]), "--source-file", str(DEMO_DATASET),
                 "--channel-mean-value", "0 0.00392157"]) == 0
    assert main(["quantize", "--model", str(files["json"]), "--model-data", str(files["data"]),
                 "--with-input-meta", str(files["meta"])]) == 0
    return files


def model_args(prepared: dict[str, Path]) -> list[Path | str]:
    return ["--model", prepared["json"], "--model-data", prepared["data"]]


# Each case: (the command line with OUT for the folder under test, the flag that takes it, files it writes under
# OUT). OUT is a nested missing folder when the command must succeed, and a folder under a file when it must fail.
CASES = {
    "import": (lambda p, out: ["import", "onnx", "--model", DEMO_ONNX, "--output-model", out / "m.json",
                               "--output-data", out / "m.data"], "--output-model", ["m.json", "m.data"]),
    "import-data": (lambda p, out: ["import", "onnx", "--model", DEMO_ONNX, "--output-model",
                                    out.parent.parent.parent / "m.json", "--output-data", out / "m.data"],
                    "--output-data", ["m.data"]),
    "generate": (lambda p, out: ["generate", "inputmeta", "--model", p["json"], "--source-file", DEMO_DATASET,
                                 "--input-meta-output", out / "m.yml"], "--input-meta-output", ["m.yml"]),
    "quantize": (lambda p, out: ["quantize", *model_args(p), "--with-input-meta", p["meta"], "--model-quantize",
                                 out / "m.quantize"], "--model-quantize", ["m.quantize"]),
    "quantize-report": (lambda p, out: ["quantize", *model_args(p), "--with-input-meta", p["meta"], "--rebuild",
                                        "--model-quantize", out.parent.parent.parent / "m.quantize", "--report",
                                        out], "--report", ["compare.txt", "compare.csv", "compare.png"]),
    "compare": (lambda p, out: ["compare", *model_args(p), "--model-quantize", p["table"], "--with-input-meta",
                                p["meta"], "--iterations", "1", "--output-dir", out], "--output-dir",
                ["compare.txt", "compare.csv", "compare.png"]),
    "inference": (lambda p, out: ["inference", *model_args(p), "--with-input-meta", p["meta"], "--iterations", "1",
                                  "--postprocess", "dump_result", "--output-dir", out], "--output-dir",
                  ["outputs.npz", "attach_softmax_out0_0_1_10.tensor"]),
    "export": (lambda p, out: ["export", "glow", *model_args(p), "--output-path", out], "--output-path",
               ["lenet.o", "lenet.h", "lenet.weights.bin"]),
    "export-dot": (lambda p, out: ["export", "glow", *model_args(p), "--output-path", out.parent.parent.parent,
                                   "--dump-graph-DAG", out / "g.dot"], "--dump-graph-DAG", ["g.dot"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_missing_nested_folder_is_created(capsys, prepared, tmp_path, case):
    argv, _, written = CASES[case]
    out = tmp_path / "new" / "nested" / "folder"
    code, _, err = run(capsys, *argv(prepared, out))
    assert code == 0, err
    for name in written:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, (name, sorted(out.iterdir()))
    assert not [p for p in tmp_path.rglob(".*.tmp")]  # no temporary file left behind
    if case == "import":
        doc = json.loads((out / "m.json").read_text())
        assert doc["inputs"][0]["shape"] == [1, 1, 28, 28]
    if case == "inference":
        assert np.load(out / "outputs.npz")["softmax"].shape == (1, 1, 10)


@pytest.mark.parametrize("case", list(CASES))
def test_folder_under_a_file_is_refused(capsys, prepared, tmp_path, case):
    argv, flag, _ = CASES[case]
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file")
    before = {p.name: p.stat().st_mtime_ns for p in prepared["json"].parent.iterdir()}
    code, out, err = run(capsys, *argv(prepared, blocker / "sub" / "folder"))
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pegasus: error:"), err
    assert flag in lines[0] and f"{blocker} is a file, not a folder" in lines[0], lines[0]
    assert "Traceback" not in err
    assert [p.name for p in tmp_path.rglob("*")] == ["blocker"] and blocker.read_text() == "a regular file"
    assert {p.name: p.stat().st_mtime_ns for p in prepared["json"].parent.iterdir()} == before


def test_output_file_that_is_a_folder_is_refused(capsys, prepared, tmp_path):
    (tmp_path / "m.quantize").mkdir()
    code, _, err = run(capsys, "quantize", *model_args(prepared), "--with-input-meta", prepared["meta"],
                       "--model-quantize", tmp_path / "m.quantize")
    assert code == 2 and "--model-quantize" in err and "is a folder" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["m.quantize"] and not any((tmp_path / "m.quantize").iterdir())


def test_folder_that_is_not_writable_is_refused(capsys, prepared, tmp_path, monkeypatch):
    # Tests may run as root, for whom every folder is writable: os.access stands in for the permission bits.
    import pegasus.fileio

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = pegasus.fileio.os.access
    monkeypatch.setattr(pegasus.fileio.os, "access",
                        lambda path, mode: Path(path) != locked and real_access(path, mode))
    argv, flag, _ = CASES["inference"]
    code, _, err = run(capsys, *argv(prepared, locked / "new" / "dumps"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert flag in err and f"folder {locked} is not writable" in err, err
    assert list(locked.iterdir()) == []


def test_staged_chunks_are_written_in_order_and_nothing_is_left_when_they_fail(tmp_path):
    """Large outputs (a weights.txt of gigabytes) are staged a chunk at a time; a failure part way through
    leaves neither the target nor a temporary file."""
    with AtomicFileSet() as files:
        files.stage(tmp_path / "a.txt", (bytes([65 + i]) * 3 for i in range(4)))
    assert (tmp_path / "a.txt").read_bytes() == b"AAABBBCCCDDD"

    def broken():
        yield b"partial"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError), AtomicFileSet() as files:
        files.stage(tmp_path / "b.txt", broken())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
