"""TFLite Micro's RAM for a .tflite, the figure bundles' ACTIVATIONS + MUTABLE are held against: shared by the
TFLite bundle tests and benchmarks/bench_tinyml.py so both read the arena the same way."""

from __future__ import annotations

import os
import re
import sys
import tempfile


def tflm_arena_bytes(path) -> int:
    """TFLite Micro's arena total for the model: print_allocations() writes to C++ stderr, captured at fd 2."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_file(str(path), arena_size=4 << 20)
    with tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            interp.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode()
    return int(re.search(r"Arena allocation total (\d+) bytes", text).group(1))
