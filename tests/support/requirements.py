"""What a test needs beyond pegasus itself, and what happens when it is missing.

Compilers and emulators come from ``make toolchains``, frameworks (TensorFlow, torch, onnxruntime, OpenCV...) from
``make install``. A test whose tool or framework is missing SKIPS with that install hint, so a partial machine
still runs everything else; under ``--require-all`` (``make test``, CI) it FAILS naming what is missing, so a
complete run can never pass by skipping. Tests ask explicitly with ``need_tool`` / ``need_module``; the root
conftest applies the same rule to what surfaces on its own (``missing_of``: the bundle harness's
MissingToolError, a subprocess whose program is not on PATH, a framework import failing at collection).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
from types import ModuleType

import pytest

from pegasus.exporters.glow.run.toolchains import TOOL_PACKAGES, MissingToolError

TOOLCHAINS_HINT = "install with: make toolchains"
INSTALL_HINT = "install with: make install"

# program -> Debian package(s) `make toolchains` installs (scripts/install_toolchains.sh), beyond the harness's own
TOOLS: dict[str, str] = {
    **TOOL_PACKAGES,
    "g++": "g++",
    "cc": "gcc",
    "ld": "binutils",
    "objdump": "binutils",
    "make": "make",
    "cmake": "cmake",
    "bwrap": "bubblewrap",
    "arm-none-eabi-objdump": "binutils-arm-none-eabi",
    "arm-none-eabi-nm": "binutils-arm-none-eabi",
    "arm-none-eabi-size": "binutils-arm-none-eabi",
    "x86_64-linux-gnu-objdump": "binutils-x86-64-linux-gnu",
}

# import name -> the pip package `make install` puts in .venv (pyproject.toml's "test" extra)
FRAMEWORKS: dict[str, str] = {
    "tensorflow": "tensorflow",
    "tf_keras": "tf-keras",
    "keras": "tensorflow (keras)",
    "torch": "torch",
    "torchvision": "torchvision",
    "onnxruntime": "onnxruntime",
    "cv2": "opencv-python-headless",
    "tflite": "tflite",
    "tflite_micro": "tflite-micro",
    "ai_edge_litert": "ai-edge-litert",
    "h5py": "h5py",
    "dask": "dask[distributed]",
    "distributed": "dask[distributed]",
    "mlxtend": "mlxtend",
    "hypothesis": "hypothesis",
    "mediapipe": "mediapipe",
}

_state = {"require_all": False}
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def set_require_all(value: bool) -> None:
    """Called once per process by the root conftest with ``--require-all``."""
    _state["require_all"] = bool(value)


def require_all() -> bool:
    return _state["require_all"]


def tool_reason(tool: str) -> str:
    return f"{tool} not found ({TOOLCHAINS_HINT}; Debian package {TOOLS.get(tool, tool)})"


def module_reason(name: str) -> str:
    root = name.split(".")[0]
    return f"Python module {root} not found ({INSTALL_HINT}; pip package {FRAMEWORKS.get(root, root)})"


def missing(reason: str):
    """Skip the test with ``reason``, or fail it under --require-all."""
    if require_all():
        pytest.fail(f"missing under --require-all: {reason}", pytrace=False)
    pytest.skip(reason)


def need_tool(tool: str) -> str:
    """The path of ``tool`` on PATH; skips (fails under --require-all) when it is not there."""
    path = shutil.which(tool)
    if path is None:
        missing(tool_reason(tool))
    return path


def need_module(name: str) -> ModuleType:
    """``import name``; skips (fails under --require-all) when it is not installed. Replaces importorskip."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != name.split(".")[0]:
            raise       # the framework is there but something it needs is broken: a real failure
        missing(module_reason(name))


def missing_of(error: BaseException) -> str | None:
    """The skip reason when ``error`` says a known tool or framework is missing, else None (a real failure)."""
    if isinstance(error, MissingToolError):
        return tool_reason(error.tool)
    if isinstance(error, FileNotFoundError) and error.filename and str(error.filename) in TOOLS:
        return tool_reason(str(error.filename))
    if isinstance(error, ModuleNotFoundError) and error.name and _absent(error.name):
        return module_reason(error.name)
    return None


def _absent(name: str) -> bool:
    """A known framework that is not installed at all (a broken install is a real failure, not a skip)."""
    root = name.split(".")[0]
    return root in FRAMEWORKS and importlib.util.find_spec(root) is None


def missing_in_text(text: str) -> str | None:
    """The same for a collection error, of which pytest keeps only the text."""
    found = _NO_MODULE.search(text)
    if found and _absent(found.group(1)):
        return module_reason(found.group(1))
    return None
