"""Code the sandbox tests run inside pegasus.sandbox (bound read-only into the child): each function acts as a
compromised reader would and reports what it managed, as plain data."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np


def _attempt(action) -> str:
    try:
        result = action()
    except Exception as exc:  # noqa: BLE001 - the test wants to know what failed
        return f"refused: {type(exc).__name__}"
    return f"done: {str(result)[:200]}"


def network(model: Path, port: int) -> tuple[dict, list]:
    """Connect to the host's loopback listener, to the internet, and resolve a name."""
    def connect(host: str, to: int):
        with socket.create_connection((host, to), timeout=3):
            return "connected"
    return {"loopback": _attempt(lambda: connect("127.0.0.1", port)),
            "internet": _attempt(lambda: connect("1.1.1.1", 53)),
            "dns": _attempt(lambda: socket.getaddrinfo("example.com", 80))}, []


def write(model: Path, targets: list[str]) -> tuple[dict, list]:
    """Write each target path (outside the scratch folder), then a file in the scratch folder."""
    def put(path: str):
        with open(path, "wb") as stream:
            stream.write(b"PWNED")
        return path
    found = {target: _attempt(lambda t=target: put(t)) for target in targets}
    found["model"] = _attempt(lambda: put(str(model)))
    found["scratch"] = _attempt(lambda: put("scratch_file"))
    return found, []


def read(model: Path, targets: list[str]) -> tuple[dict, list]:
    """Read each target; list each folder of ``targets`` ending in '/'."""
    def get(path: str):
        return sorted(os.listdir(path)) if path.endswith("/") else Path(path).read_bytes()
    return {target: _attempt(lambda t=target: get(t)) for target in targets}, []


def allocate(model: Path, nbytes: int) -> tuple[dict, list]:
    block = bytearray(nbytes)
    return {"allocated": len(block)}, []


def spin(model: Path) -> tuple[dict, list]:
    while True:
        time.sleep(0.01)


def burn(model: Path) -> tuple[dict, list]:
    count = 0
    while True:
        count += 1


def crash(model: Path) -> tuple[dict, list]:
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)
    return {}, []


def noisy(model: Path) -> tuple[dict, list]:
    """Prints on stdout (as loaded code may) and returns arrays: the reply must not be disturbed."""
    print("@@ not a reply @@", flush=True)
    os.write(1, b"PGSB\xff\xff\xff\xff\xff\xff\xff\xff garbage")
    return {"budget": os.environ.get("PEGASUS_MAX_TENSOR_BYTES"), "size": model.stat().st_size,
            "home": os.environ.get("HOME"), "cwd": os.getcwd()}, \
        [np.arange(6, dtype=np.int16).reshape(2, 3), np.array([1.5, -2.0], np.float64), np.zeros((0, 4), np.float32),
         np.array(2.5, np.float32)]


def objects(model: Path) -> tuple[dict, list]:
    return {}, [np.array([object()], dtype=object)]
