"""Which tests are slow, run an emulator, compile bundles or need a heavy framework: the markers of the test
tiers (pyproject.toml registers them), given here in one table by folder, file and test name rather than in
~150 files, so a tier is one grep away and a new file in a marked folder is marked too.

``make check`` runs what none of the markers cover (the fast tier: registry, IR, ops reference, quantize rules,
importers of the light frameworks, exporter planning); ``make test`` runs everything. `slow` is measured: the tests
listed in slow_tests.txt took half a second or more alone (its header says how it was measured and how to redo it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# (regex matched at the start of the node id relative to the repository root, markers)
RULES: list[tuple[str, tuple[str, ...]]] = [
    # a heavy framework: the importers and readers it is compared with, models built with TensorFlow/TFLite
    (r"tests/importers/(tensorflow|pytorch|keras|tflite|caffe|darknet)/", ("framework",)),
    (r"tests/security/test_(tensorflow|torchscript|pt2|fuzz_finds_tf_pytorch|onnx_tflite|fuzz_finds_onnx_tflite)\.py",
     ("framework",)),
    (r"tests/fuzz/test_fuzz\.py::test_\w+\[(tf_|pt2|pytorch|tflite|keras)", ("framework",)),
    (r"tests/cli/test_acuity_guide\.py", ("framework",)),
    (r"tests/workflow/test_(batch|conversion_scripts|bench_tinyml)\.py", ("framework",)),
    (r"tests/exporters/e2e/test_tflite_", ("framework",)),
    (r"tests/exporters/memory/test_streaming_overlap\.py::test_mlperf", ("framework", "bundle")),
    (r"tests/target/test_profile\.py", ("framework", "bundle", "qemu")),
    # compiled bundles: every kernel, codegen and end-to-end test; elsewhere the tests named after running one
    (r"tests/exporters/(kernels/(reference|integer|fused|x86|cortex_m)|codegen|e2e)/", ("bundle",)),
    (r"tests/exporters/(schedule|memory|passes)/\w+\.py::test_\w*(match|bit_exact|on_the_host|on_host|on_cortex|"
     r"cortex_m7|header_sizes|cli_|example_program|stays_exact|wrong_bytes|overwrites|built_in_one|are_copied)",
     ("bundle",)),
    (r"tests/target/test_run", ("bundle", "qemu")),
    (r"tests/target/test_boards\.py::test_run_", ("bundle", "qemu")),
    (r"tests/workflow/test_(glow_cli|wheel_install|bench_tinyml)\.py", ("bundle",)),
    (r"tests/workflow/test_batch\.py::test_bundles", ("bundle",)),
    (r"tests/security/test_generated_names\.py::test_payload_names_stay_data_through_build_and_run", ("bundle",)),
    (r"tests/security/test_sandbox\.py::test_semihosting", ("bundle", "qemu")),
    (r"tests/quantize/test_names\.py::test_quantized_inference_and_bundle", ("bundle",)),
    (r"tests/importers/tflite/test_\w+\.py::test_\w*bundle", ("bundle",)),
    (r"tests/importers/tflite/test_(quantized|compare_layers_int8)\.py::test_\w*(pooled_pair|compared)", ("bundle",)),
]

# a test for a Cortex-M or aarch64 CPU: its name or parameters name one (runs under qemu when it runs a bundle)
EMULATED = re.compile(r"cortex[-_]m|aarch64|_cross\b|cross_targets|bare_metal|qemu")

_COMPILED = [(re.compile(pattern), marks) for pattern, marks in RULES]
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
SLOW = frozenset(line.strip() for line in SLOW_LIST.read_text().splitlines()
                 if line.strip() and not line.startswith("#"))


def marks_of(nodeid: str) -> set[str]:
    """The tier markers of a test, from its node id (``tests/.../test_x.py::test_name[params]``)."""
    found = {mark for pattern, marks in _COMPILED if pattern.match(nodeid) for mark in marks}
    if nodeid in SLOW or nodeid.split("[", 1)[0] in SLOW or nodeid.split("::", 1)[0] in SLOW:
        found.add("slow")
    if "bundle" in found and EMULATED.search(nodeid.split("::", 1)[-1]):
        found.add("qemu")
    return found


def excluded_by(markexpr: str) -> frozenset[str]:
    """The markers a ``-m "not a and not b"`` expression leaves out (empty for any other expression)."""
    if not re.fullmatch(r"\s*not\s+\w+(\s+and\s+not\s+\w+)*\s*", markexpr or ""):
        return frozenset()
    return frozenset(re.findall(r"not\s+(\w+)", markexpr))


def left_out(path: Path, root: Path, markexpr: str) -> bool:
    """Whether every test under ``path`` (a folder or file) has a marker ``markexpr`` leaves out: then pytest need
    not import it (make check does not import TensorFlow or torch just to deselect their tests)."""
    excluded = excluded_by(markexpr)
    if not excluded:
        return False
    try:
        relative = path.resolve().relative_to(root).as_posix() + ("/" if path.is_dir() else "")
    except ValueError:
        return False
    whole = {mark for pattern, marks in _COMPILED if pattern.match(relative) for mark in marks}
    return bool(whole & excluded)


def mark(items: list[pytest.Item], root: Path) -> None:
    """Add the tier markers to collected items (pytest_collection_modifyitems)."""
    for item in items:
        try:
            nodeid = Path(item.path).resolve().relative_to(root).as_posix() + item.nodeid[item.nodeid.find("::"):]
        except ValueError:          # a test outside the repository (tests/test_tiers.py's tiny files)
            continue
        for name in sorted(marks_of(nodeid)):
            item.add_marker(getattr(pytest.mark, name))
