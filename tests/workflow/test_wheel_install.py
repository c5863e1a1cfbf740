"""The project as a user installs it: a wheel built from the repository, installed into a fresh venv, used from
outside the repository. The data folders the code reads at run time (exporters/glow/templates, the bundle's
Makefile and example program; exporters/glow/run/harness, the C harness and linker scripts) must be in the
installed package, and building and installing must not warn that a folder is absent from ``packages``
(issue 35, defect 3). The fresh venv sees the project's dependencies through a .pth line naming .venv's
site-packages (nothing is downloaded) but not the editable install, whose finder that line does not run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from tests.workflow.helpers import DEMO, ROOT, digit, run_bundle

SOURCES = ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "pegasus", "importers", "quantizers",
           "exporters")
DATA_FOLDERS = {"exporters/glow/templates": "pegasus/exporters/glow/templates",
                "exporters/glow/run/harness": "pegasus/exporters/glow/run/harness"}
ABSENT = "absent from the `packages` configuration"


def _run(argv: list, cwd: Path, env: dict | None = None, timeout: float = 600) -> str:
    proc = subprocess.run([str(part) for part in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{output}"
    return output


def _site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, str]:
    """(the fresh venv, the output of building and installing the wheel)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"   # a copy: building writes build/ and *.egg-info beside setup.py
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.is_file():
            shutil.copy2(path, source / name)
    log = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", work / "dist", source], cwd=work)
    (wheel,) = (work / "dist").glob("pegasus_nn-*.whl")
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    python = venv / "bin" / "python"
    site = _site_packages(python)
    (site / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    log += _run([sys.executable, "-m", "pip", "--python", python, "install", "-v", "--no-deps", "--no-index",
                 wheel], cwd=work)
    return venv, log


def _env(venv: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def test_build_and_install_are_quiet_and_carry_the_data_folders(installed):
    venv, log = installed
    assert "Successfully installed pegasus-nn" in log, log
    assert ABSENT not in log and "would be ignored" not in log.lower(), log
    site = _site_packages(venv / "bin" / "python")
    for folder, package in DATA_FOLDERS.items():
        expected = sorted(path.name for path in (ROOT / folder).iterdir() if path.is_file())
        assert expected, folder
        for name in expected:
            installed_file = site / package / name
            assert installed_file.is_file(), f"{installed_file} missing from the installed package"
            assert installed_file.read_bytes() == (ROOT / folder / name).read_bytes(), name


def test_installed_pegasus_exports_and_runs_lenet_from_outside_the_repository(installed, tmp_path):
    venv, _ = installed
    env = _env(venv)
    where = _run([venv / "bin" / "python", "-c", "import pegasus; print(pegasus.__file__)"], tmp_path, env)
    assert Path(where.strip()).resolve().is_relative_to(venv.resolve()), where
    pegasus = venv / "bin" / "pegasus"
    model, data = tmp_path / "lenet.json", tmp_path / "lenet.data"
    _run([pegasus, "import", "onnx", "--model", DEMO / "lenet_mnist.onnx", "--output-model", model,
          "--output-data", data], tmp_path, env)
    _run([pegasus, "export", "glow", "--model", model, "--model-data", data, "--output-path", tmp_path / "bundle"],
         tmp_path, env)
    for name in ("lenet.o", "lenet.h", "lenet.weights.bin", "Makefile", "main.c"):
        assert (tmp_path / "bundle" / name).is_file(), f"export glow wrote no {name}"
    x = digit()
    session = onnxruntime.InferenceSession(str(DEMO / "lenet_mnist.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0].ravel()
    # the Makefile and main.c from templates/ build the bundle's example program, which gives onnxruntime's scores
    example = run_bundle(tmp_path / "bundle", "lenet", [x], np.float32, expected.size)
    np.testing.assert_allclose(example, expected, atol=1e-5, rtol=0)
    np.save(tmp_path / "x.npy", x)
    stdout = _run([pegasus, "run", "--model", model, "--model-data", data, "--input", tmp_path / "x.npy",
                   "--target", "x86_64", "--output-dir", tmp_path / "out"], tmp_path, env)
    (got,) = dict(np.load(tmp_path / "out" / "outputs.npz")).values()
    assert int(np.argmax(got)) == int(np.argmax(expected)), stdout
    np.testing.assert_allclose(got.ravel(), expected.ravel(), atol=1e-5, rtol=0)
    assert "ran lenet for x86_64" in stdout, stdout
