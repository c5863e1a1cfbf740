"""Which tests are slow, run an emulator, compile bundles or need a heavy framework: the markers of the test
tiers (pyproject.toml registers them), given here in one table by folder, file and test name rather than in
~150 files, so a tier is one grep away and a new file in a marked folder is marked too.

``make check`` runs what none of the markers cover (the fast tier: registry, IR, ops reference, quantize rules,
importers of the light frameworks, exporter planning); ``make test`` runs everything. `slow` is measured: a test
(or a file, when most of its tests are) that took a second or more in ``pytest --durations=0``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# (regex matched at the start of the node id relative to the repository root, markers)
RULES: list[tuple[str, tuple[str, ...]]] = [
]

# a test for a Cortex-M or aarch64 CPU: its name or parameters name one (runs under qemu when it runs a bundle)
EMULATED = re.compile(r"cortex[-_]m|aarch64|_cross\b|cross_targets|bare_metal|qemu")

_COMPILED = [(re.compile(pattern), marks) for pattern, marks in RULES]


def marks_of(nodeid: str) -> set[str]:
    """The tier markers of a test, from its node id (``tests/.../test_x.py::test_name[params]``)."""
    found = {mark for pattern, marks in _COMPILED if pattern.match(nodeid) for mark in marks}
    if "bundle" in found and EMULATED.search(nodeid.split("::", 1)[-1]):
        found.add("qemu")
    return found


def mark(items: list[pytest.Item], root: Path) -> None:
    """Add the tier markers to collected items (pytest_collection_modifyitems)."""
    for item in items:
        try:
            nodeid = Path(item.path).resolve().relative_to(root).as_posix() + item.nodeid[item.nodeid.find("::"):]
        except ValueError:          # a test outside the repository (tests/test_tiers.py's tiny files)
            continue
        for name in sorted(marks_of(nodeid)):
            item.add_marker(getattr(pytest.mark, name))
