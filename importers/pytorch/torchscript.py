"""The TorchScript front end: a ``torch.jit.save`` archive (traced or scripted) as a ``SourceGraph``, read in a
sandbox.

TorchScript cannot reasonably be read as data: its ``code/`` is a program that only torch's compiler turns into a
graph, and getting the graph pegasus converts takes inlining, freezing and constant propagation, all of which
execute what the archive says (``__setstate__`` methods, ``aten::from_file``, ``aten::save``...). So
``torch.jit.load`` never runs in the pegasus process: ts_walk.py loads, checks, freezes and walks the archive in
a child process that pegasus/sandbox.py starts under bubblewrap (no network, a read-only view of the model file
alone and of Python's own files, a private empty scratch directory, memory/CPU/time/file-size limits). The
child sends back plain data (ts_wire.py: JSON for the graph, raw arrays for the constants), which this process
checks field by field before building the SourceGraph. Whatever the archive's code does, it does inside the
sandbox, to nothing that outlives it.
"""

from __future__ import annotations

from pathlib import Path

from pegasus.importers.pytorch.context import SourceGraph
from pegasus.importers.pytorch.ts_wire import decode
from pegasus.sandbox import run_sandboxed

WHAT = "the sandboxed TorchScript reader"


def read_torchscript(path: Path) -> SourceGraph:
    """Load, check, freeze and walk a TorchScript archive in the sandbox; the graph it sends back, checked."""
    reply = run_sandboxed("pegasus.importers.pytorch.ts_walk", "read_plain", path, what=WHAT)
    return decode(reply.data, reply.arrays, str(path))
