"""``pegasus run --profile``: per-layer instructions from the probed build add up to the whole-inference count
of the unprobed bundle (within one SysTick tick per layer, the probe cost being subtracted)."""

from __future__ import annotations

import re

import numpy as np

from tests.conftest import run_cli


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def test_profile_sums_to_the_whole_inference(demo_model, tmp_path):
    model, data = demo_model
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(3).uniform(0, 1, (1, 1, 28, 28)).astype(np.float32))
    result = run_cli("run", "--model", model, "--model-data", data, "--input", x, "--target", "arm", "--mcpu",
                     "cortex-m7", "--profile")
    assert result.code == 0, result.stderr
    whole = _count(re.search(r"instructions per inference: ([\d,]+)", result.stdout).group(1))
    rows = re.findall(r"^\s+([\d,]+)\s+[\d.]+%\s+(\S.*)$", result.stdout, re.M)
    layers = {name: _count(cost) for cost, name in rows}
    assert len(layers) == 7, result.stdout                 # LeNet fused: conv+pool twice, fc1, relu, fc2, ...
    probe_cost = float(re.search(r"probe cost ([\d.]+) instructions", result.stdout).group(1))
    assert 5 < probe_cost < 200
    assert abs(sum(layers.values()) - whole) <= 40 * (len(layers) + 1), (sum(layers.values()), whole)
    assert max(layers, key=layers.get) == "/conv2/Conv + /pool2/MaxPool"   # the largest convolution


def test_profile_needs_a_cortex_m(demo_model, tmp_path):
    model, data = demo_model
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 28, 28), np.float32))
    result = run_cli("run", "--model", model, "--model-data", data, "--input", x, "--target", "x86_64", "--profile")
    assert result.code == 2 and "--profile needs a Cortex-M target" in result.stderr
