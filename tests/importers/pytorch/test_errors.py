"""What ``pegasus import pytorch`` refuses, each with one line on stderr and exit code 2, nothing written and
nothing in the file run: pickles (a state_dict, a whole module, a checkpoint, one whose payload would create a
file, also inside a torch.save zip or a .pt2), empty and truncated files, a TorchScript model without
--input-size-list, an op without a converter (named with its module path), a bad .pt2 shape expression."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from pegasus.importers.pytorch.archive import pickle_globals
from pegasus.importers.pytorch.pt2_json import plain_expression
from tests.conftest import run_cli
from tests.importers.pytorch.harness import FORMATS

pytestmark = pytest.mark.xdist_group("pytorch")


class _Payload:
    """Unpickling this runs ``os.system('touch MARKER')``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


class _Cumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), _CumsumLeaf())

    def forward(self, x):
        return torch.fft.rfft(self.body(x)).real


class _CumsumLeaf(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1)


def _refused(tmp_path: Path, model: Path, *flags: str) -> str:
    out = tmp_path / "out" / "m.json"
    result = run_cli("import", "pytorch", "--model", model, "--output-model", out, *flags)
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert not out.exists() and not out.with_suffix(".data").exists()
    return lines[0]


def test_state_dict_whole_module_and_checkpoint(tmp_path):
    model = _Small()
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    torch.save(model, tmp_path / "whole.pt")
    torch.save({"epoch": 3, "model_state_dict": model.state_dict()}, tmp_path / "ckpt.pt")
    torch.save(model.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    line = _refused(tmp_path, tmp_path / "sd.pt", "--input-size-list", "4")
    assert "a state_dict of 2 tensors, not a model" in line and "torch.jit.save" in line and "torch.export" in line
    assert "whole module pickled with torch.save(model) (class tests.importers.pytorch.test_errors._Small" in \
        _refused(tmp_path, tmp_path / "whole.pt")
    assert "a checkpoint dict (keys: epoch, model_state_dict)" in _refused(tmp_path, tmp_path / "ckpt.pt")
    assert "a state_dict of 2 tensors" in _refused(tmp_path, tmp_path / "legacy.pt")


@pytest.mark.parametrize("wrapping", ["pickle", "torch.save", "pt2 sample inputs", "pt2 protocol 0"])
def test_malicious_pickle_is_not_run(tmp_path, torch_model, wrapping):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    if wrapping == "pickle":
        path.write_bytes(pickle.dumps(_Payload(marker)))
    elif wrapping == "torch.save":
        torch.save({"weight": torch.zeros(2), "x": _Payload(marker)}, path)
    else:  # a genuine .pt2 whose sample inputs (read with weights_only=False on failure) carry the payload
        payload = pickle.dumps(_Payload(marker), protocol=0 if "protocol 0" in wrapping else 2)
        path = _rewrite(torch_model("resnet18") / FORMATS["exported"], tmp_path / "evil.pt2",
                        lambda name: "sample_inputs" in name, payload)
    if wrapping.startswith("pt2"):  # pegasus never reads a .pt2's sample inputs: the import works, nothing runs
        assert run_cli("import", "pytorch", "--model", path, "--output-model", tmp_path / "out" / "m.json").code == 0
    else:
        line = _refused(tmp_path, path, "--input-size-list", "3,32,32")
        assert "would call posix.system" in line and "nothing in it was run" in line
    assert not marker.exists()
    if wrapping.startswith("pt2"):  # torch.export.load itself runs it: reading the archive as data is what stops it
        with contextlib.suppress(Exception):
            torch.export.load(path)
    else:
        pickle.loads(pickle.dumps(_Payload(marker)))  # the payload does work when unpickled
    assert marker.exists()


def _rewrite(source: Path, target: Path, pick, data: bytes) -> Path:
    """``source`` (a zip) with every member ``pick`` selects replaced by ``data``."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            new.writestr(info, data if pick(info.filename) else old.read(info.filename))
    return target


def test_pt2_shape_expression_that_is_code(tmp_path, torch_model):
    source = torch_model("resnet18") / FORMATS["exported"]
    with zipfile.ZipFile(source) as archive:
        name = next(n for n in archive.namelist() if n.endswith("models/model.json"))
        text = archive.read(name).decode()
    program = json.loads(text)  # the input's batch size, which torch.export.load would hand to sympy
    sizes = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"]
    sizes[0] = {"as_expr": {"expr_str": "open('x', 'w')", "hint": None}}
    evil = json.dumps(program)
    assert evil != text
    path = _rewrite(source, tmp_path / "evil.pt2", lambda n: n == name, evil.encode())
    assert "is not plain arithmetic" in _refused(tmp_path, path)


def test_torchscript_setstate_is_refused(tmp_path):
    class Stateful(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

        @torch.jit.export
        def __getstate__(self):
            return (self.scale, self.training)

        @torch.jit.export
        def __setstate__(self, state: tuple[float, bool]):
            self.scale = state[0]
            self.training = state[1]

    torch.jit.save(torch.jit.script(Stateful()), tmp_path / "stateful.pt")
    assert "defines __setstate__" in _refused(tmp_path, tmp_path / "stateful.pt", "--input-size-list", "4")


def test_empty_truncated_and_foreign_files(tmp_path, torch_model):
    (tmp_path / "empty.pt").write_bytes(b"")
    assert "empty file (0 bytes)" in _refused(tmp_path, tmp_path / "empty.pt")
    for fmt in ("traced", "exported"):
        data = (torch_model("resnet18") / FORMATS[fmt]).read_bytes()
        (tmp_path / f"cut_{fmt}").write_bytes(data[: len(data) * 2 // 3])
        assert "truncated or damaged zip archive" in _refused(tmp_path, tmp_path / f"cut_{fmt}")
    (tmp_path / "m.onnx").write_bytes(b"\x08\x07\x12\x04onnx")
    assert "not a PyTorch model" in _refused(tmp_path, tmp_path / "m.onnx")


def test_torchscript_needs_input_size_list(tmp_path, torch_model):
    line = _refused(tmp_path, torch_model("resnet18") / FORMATS["traced"])
    assert "--input-size-list is required" in line and "input 'x'" in line


def test_unsupported_ops_are_listed_with_module_paths(tmp_path):
    model = _Cumsum().eval()
    torch.jit.save(torch.jit.trace(model, torch.randn(1, 4)), tmp_path / "m.pt")
    line = _refused(tmp_path, tmp_path / "m.pt", "--input-size-list", "4")
    assert "unsupported operators (3)" in line
    assert "aten::cumsum at body.1;" in line and "aten::fft_rfft" in line
    torch.export.save(torch.export.export(model, (torch.randn(1, 4),)), tmp_path / "m.pt2")
    line = _refused(tmp_path, tmp_path / "m.pt2")
    assert "unsupported operators (3)" in line and "aten::cumsum at node 'body.1/cumsum', body.1" in line


def test_errors_while_converting_name_the_file(tmp_path):
    """A shape conflict (sizes that do not fit the model) and an unsupported op of a .pt2 name the model file."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).eval()
    torch.jit.save(torch.jit.trace(model, torch.randn(1, 3, 8, 8)), tmp_path / "m.pt")
    line = _refused(tmp_path, tmp_path / "m.pt", "--input-size-list", "3,9,9")
    assert line.startswith(f"pegasus: error: {tmp_path / 'm.pt'}: shape conflict at layer '2' (Gemm)"), line
    torch.export.save(torch.export.export(_Cumsum().eval(), (torch.randn(1, 4),)), tmp_path / "c.pt2")
    line = _refused(tmp_path, tmp_path / "c.pt2")
    assert line.startswith(f"pegasus: error: {tmp_path / 'c.pt2'}: unsupported operators (3)"), line


def test_guard_helpers():
    assert pickle_globals(pickle.dumps(_Payload(Path("x")))) == ["posix.system"]
    assert pickle_globals(b"cos\nsystem\n(S'true'\ntR.") == ["os.system"]
    # STACK_GLOBAL of memoised strings, with allowed names pushed, tupled and popped in between as decoys
    decoys = (b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94\x8c\x0ctorch._utils\x94\x8c\x12_rebuild_tensor_v2\x94"
              b"\x860\x93\x8c\x04true\x85R.")
    assert pickle_globals(decoys) == ["posix.system"]
    memo = b"\x80\x04\x8c\x05posix\x94\x8c\x06system\x94" + b"00\x8c\x0ctorch._utils" + b"h\x01\x93."
    assert pickle_globals(memo) == ["torch._utils.system"]
    assert plain_expression("s0*2 + Max(s1, 4) - FloorDiv(s77, 2)")
    assert plain_expression("Symbol('s77', positive=True, integer=True)")
    for bad in ("open('x')", "__import__('os')", "s0.__class__", "exec(s0)", "[s0]", "Symbol('os', real=True)"):
        assert not plain_expression(bad), bad
