"""A short, deterministic slice of every fuzz target (fuzz/, issue 35) and the replay of every input that once
broke a reader: each must be read or refused with pegasus's one-line error, in its own process under the fuzz
runner's address-space limit and a timeout. ``make fuzz`` runs the targets for longer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fuzz.targets import load_all
from tests.conftest import ROOT

TARGETS = sorted(load_all())
SLICE = 80


def _run(*args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "fuzz", "--json", "--no-keep", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", TARGETS)
def test_seeded_slice(name):
    [summary] = _run("--target", name, "--runs", str(SLICE), "--seed", "2026")
    assert summary["executions"] == SLICE
    assert summary["broken"] == []


@pytest.mark.parametrize("name", TARGETS)
def test_regressions_replayed(name):
    [summary] = _run("--target", name, "--replay")
    assert summary["broken"] == []
