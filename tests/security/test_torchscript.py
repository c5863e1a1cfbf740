"""TorchScript archives whose code acts when torch loads or freezes them (issue 37, cases 6-9): ``__setstate__``
behind a line continuation, a directory entry first in the zip, ``if self.k is 1000:`` guarding
``aten::from_file`` that creates or reads a file, ``torch.save`` to a path. torch.jit.load only ever runs in the
sandbox (pegasus/sandbox.py), so whatever the code does reaches nothing outside it: no canary appears anywhere
(paths are absolute, outside the test's output folders), no file's bytes reach the outputs, and the import
exits 2 with one line or 0 with nothing escaping. The structural test imports a real model with every executing
loader of this process patched to fail, and compares pegasus's float inference with torch's."""

from __future__ import annotations

import importlib.util
import io
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Tuple  # noqa: UP035 - TorchScript needs typing.Tuple in annotations

import numpy as np
import pytest

from pegasus.errors import PegasusError
from tests.security.harness import assert_no_canary, assert_refused, run_many
from tests.support.requirements import need_module

torch = need_module("torch")
nn = torch.nn

MARKER = b"SECRET-MARKER-7f3a9c-SECRET-MARKER-7f3a9c-4567890"[:48]


def _script_bytes(module) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(module.eval()), buffer)
    return buffer.getvalue()


def _members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()
                if not info.filename.endswith(".debug_pkl")]


def _write(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name), data)
    return path


def _saver(canary: str):
    """A module whose __setstate__ (run by torch.jit.load) writes ``canary`` with torch.save."""
    class Saver(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.tag = 1

        def forward(self, x):
            return torch.relu(self.fc(x))

        @torch.jit.export
        def __getstate__(self) -> Tuple[int, bool]:  # noqa: UP006
            return (self.tag, self.training)

        @torch.jit.export
        def __setstate__(self, state: Tuple[int, bool]) -> None:  # noqa: UP006
            self.tag = state[0]
            self.training = state[1]
            torch.save(torch.zeros(1), "CANARY_PATH")

    return [(n, d.replace(b"CANARY_PATH", canary.encode())) for n, d in _members(_script_bytes(Saver()))]


_FROM_FILE = """
import torch
from torch import nn


class FromFile(nn.Module):
    def __init__(self, path: str, shared: bool):
        super().__init__()
        self.fc = nn.Linear(4, 48)
        self.k = 1000
        self.path = path
        self.shared = shared

    def forward(self, x):
        if self.k is 1000:
            s = torch.from_file(self.path, self.shared, 48, dtype=torch.uint8)
            return self.fc(x) * 0.0 + s.float()
        return self.fc(x)
"""


def _from_file(folder: Path, path: str, shared: bool):
    """``if self.k is 1000:`` (a static check computing Python's ``is`` skips it; freezing keeps it) around
    aten::from_file: ``shared`` True creates the file, False reads it into a constant. Written to a file (torch
    compiles from the source) and imported with the SyntaxWarning of ``is`` on a literal silenced."""
    source = folder / "from_file_payload.py"
    source.write_text(_FROM_FILE)
    spec = importlib.util.spec_from_file_location("from_file_payload", source)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        spec.loader.exec_module(module)
    return module.FromFile(path, shared)


def _crafted(folder: Path, outside: Path, secret: Path) -> dict[str, Path]:
    """The crafted archives of cases 6-9 (and a relative torch.save), each writing its own canary."""
    def canary(case: str) -> str:
        return str(outside / f"PWNED_{case}")

    files = {}
    plain = _saver(canary("plain"))
    files["plain"] = _write(folder / "plain.pt", plain)
    contin = [(n, d.replace(b"def __setstate__", b"def \\\n    __setstate__") if n.endswith(".py") else d)
              for n, d in _saver(canary("contin"))]
    files["contin"] = _write(folder / "contin.pt", contin)
    decoy = _members(_script_bytes(nn.Sequential(nn.Linear(4, 3), nn.ReLU())))
    real = [("evil/" + n.split("/", 1)[1], d) for n, d in _saver(canary("prefix"))]
    files["prefix"] = _write(folder / "prefix.pt", [("evil/", b""), *decoy, *real])
    files["is_create"] = folder / "is_create.pt"
    files["is_create"].write_bytes(_script_bytes(_from_file(folder, canary("is_create"), True)))
    files["is_read"] = folder / "is_read.pt"
    files["is_read"].write_bytes(_script_bytes(_from_file(folder, str(secret), False)))
    files["relative"] = _write(folder / "relative.pt", _saver("PWNED_relative"))
    return files


@pytest.fixture
def crafted(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = tmp_path / "secret" / "secret48.bin"
    secret.parent.mkdir()
    secret.write_bytes(MARKER)
    models = tmp_path / "models"
    models.mkdir()
    return tmp_path, _crafted(models, outside, secret)


def _assert_nothing_escaped(root: Path) -> None:
    assert_no_canary(root)
    marker_floats = np.frombuffer(MARKER, np.uint8).astype(np.float32).tobytes()
    for path in (root / "out").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert MARKER[:16] not in data and marker_floats[:64] not in data, path


def test_crafted_archives_through_the_command_line(crafted):
    root, files = crafted
    (root / "out").mkdir()
    cases = [["import", "pytorch", "--model", path, "--output-model", root / "out" / f"{case}.json",
              "--output-data", root / "out" / f"{case}.data", "--input-size-list", "4"]
             for case, path in files.items()]
    results = run_many(cases, cwd=root)
    for (case, _), result in zip(files.items(), results):
        assert_refused(result, str(files[case]))
    _assert_nothing_escaped(root)


def test_crafted_archives_in_the_sandbox_alone(crafted, monkeypatch):
    """read_torchscript without the archive guard in front: the sandbox alone contains each payload."""
    from pegasus.importers.pytorch.torchscript import read_torchscript

    root, files = crafted
    monkeypatch.chdir(root)
    outcomes = {}
    for case, path in files.items():
        try:
            read_torchscript(path)
            outcomes[case] = "read"
        except PegasusError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
            outcomes[case] = "refused"
    # the payloads ran (inside): their writes and reads outside the scratch folder failed there, so the archives
    # did not load (the relative write succeeds in the scratch folder, but that __setstate__ leaves 'fc' unset)
    assert set(outcomes.values()) == {"refused"}, outcomes
    _assert_nothing_escaped(root)


class _Legit(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 5)
        self.scale = 0.5

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        if self.training:
            y = torch.dropout(y, 0.1, True)
        y = nn.functional.max_pool2d(y, 2)
        return self.fc(torch.flatten(y, 1)) * self.scale


def _refuse(*_args, **_kwargs):
    raise AssertionError("an executing loader was called in the importing process")


class _NoUnpickler:
    def __init__(self, *_args, **_kwargs):
        _refuse()


def test_no_executing_loader_in_the_importing_process(tmp_path, monkeypatch):
    from pegasus import cli
    from pegasus.ir import serialize
    from pegasus.runtime.interpreter import run

    torch.manual_seed(0)
    model = _Legit().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    path = tmp_path / "legit.pt"
    path.write_bytes(_script_bytes(model))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()

    for owner, name in ((torch.jit, "load"), (torch, "load"), (torch.export, "load"), (pickle, "load"),
                        (pickle, "loads"), (torch._C, "import_ir_module"),
                        (torch._C, "import_ir_module_from_buffer")):
        monkeypatch.setattr(owner, name, _refuse)
    monkeypatch.setattr(pickle, "Unpickler", _NoUnpickler)
    out = tmp_path / "legit"
    code = cli.main(["import", "pytorch", "--model", str(path), "--output-model", str(out.with_suffix(".json")),
                     "--output-data", str(out.with_suffix(".data")), "--input-size-list", "3,8,8"])
    assert code == 0
    monkeypatch.undo()
    graph = serialize.load(out.with_suffix(".json"), out.with_suffix(".data"))
    got = run(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
