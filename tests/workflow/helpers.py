"""Helpers of the workflow tests: run the conversion scripts as a user does (pegasus on PATH), build a host
bundle with its Makefile and read what its example program writes with ``-o``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "conversion_scripts"
DEMO = SCRIPTS / "demo"


def script_env(**variables: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.update({key: str(value) for key, value in variables.items()})
    return env


def run_script(name: str, *args, cwd: Path, **variables) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(SCRIPTS / name), *map(str, args)], cwd=cwd, env=script_env(**variables),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def run_bundle(folder: Path, name: str, inputs: list[np.ndarray], dtype, size: int) -> np.ndarray:
    """Build the bundle's example program with its Makefile, run it on ``inputs`` and return its first output."""
    subprocess.run(["make", "-s", "-C", str(folder)], check=True, capture_output=True, timeout=600)
    files = []
    for index, value in enumerate(inputs):
        files.append(folder / f"input{index}.npy")
        np.save(files[-1], value)
    out = folder / "out.bin"
    subprocess.run([str(folder / f"{name}_run"), "-o", str(out), *map(str, files)], check=True,
                   capture_output=True, timeout=120)
    return np.frombuffer(out.read_bytes(), dtype=dtype)[:size]


def digit(index: int = 400, label: int = 4) -> np.ndarray:
    from PIL import Image

    pixels = np.asarray(Image.open(DEMO / "images" / f"digit_{index:03d}_{label}.png"), np.float32) / 255
    return pixels[None, None]


def lenet_onnxruntime(x: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(DEMO / "lenet_mnist.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0].ravel()
