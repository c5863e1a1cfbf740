"""Shared fixtures: paths of the demo model and a runner for the ``pegasus`` command line."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "conversion_scripts" / "demo"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None) -> CliResult:
    """Run ``python -m pegasus ARGS`` as a user would; returns exit code and output."""
    proc = subprocess.run([sys.executable, "-m", "pegasus", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def demo_onnx() -> Path:
    return DEMO_DIR / "lenet_mnist.onnx"


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory, demo_onnx) -> tuple[Path, Path]:
    """The demo LeNet imported once per session through the CLI: (json, data)."""
    folder = tmp_path_factory.mktemp("demo")
    result = run_cli("import", "onnx", "--model", demo_onnx, "--output-model", folder / "lenet_mnist.json",
                     "--output-data", folder / "lenet_mnist.data")
    assert result.code == 0, result.stderr
    return folder / "lenet_mnist.json", folder / "lenet_mnist.data"
