"""The test tiers' rules, checked by running pytest on tiny test files in a subprocess with the root conftest
loaded: a missing tool or framework skips with its install hint, and fails naming it under --require-all,
however it surfaces (asked for, raised by the bundle harness, a program not on PATH, an import at collection);
a real failure stays a failure either way; markers outside pyproject.toml's list are refused. And the tier table
(tests/support/tiers.py): what a few known tests are marked, that the slow list names tests that exist, and that
make check's expression leaves whole framework and kernel folders uncollected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import tiers

TOOL = "pegasus-no-such-tool"
FRAMEWORK = "pegasus_no_such_framework"

NEEDS = f'''
import subprocess

from pegasus.exporters.glow.run.toolchains import require_tool
from tests.support import requirements

requirements.TOOLS["{TOOL}"] = "pegasus-test-tools"


def test_asks_for_the_tool():
    requirements.need_tool("{TOOL}")


def test_harness_raises():
    require_tool("{TOOL}")


def test_runs_the_program():
    subprocess.run(["{TOOL}"], check=True)


def test_asks_for_the_framework():
    requirements.need_module("{FRAMEWORK}")


def test_real_failure():
    assert 1 + 1 == 3
'''

IMPORTS = f'''
from tests.support import requirements

requirements.FRAMEWORKS["{FRAMEWORK}"] = "pegasus-test-framework"
import {FRAMEWORK}  # noqa: E402


def test_never_runs():
    assert {FRAMEWORK}
'''


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--rootdir", str(folder), "-rsfE", *args, str(folder)],
                          capture_output=True, text=True, cwd=folder, env=env, timeout=300)


@pytest.fixture
def tiny(tmp_path) -> Path:
    (tmp_path / "test_needs.py").write_text(NEEDS)
    (tmp_path / "test_imports_missing.py").write_text(IMPORTS)
    return tmp_path


def test_missing_things_skip_with_the_install_hint(tiny):
    run = _pytest(tiny)
    out = run.stdout
    assert run.returncode == 1, out            # the real failure
    assert "1 failed, 5 skipped" in out, out
    assert out.count(f"{TOOL} not found (install with: make toolchains; Debian package pegasus-test-tools)") == 3
    assert f"{FRAMEWORK} not found (install with: make install" in out
    assert "pip package pegasus-test-framework" in out        # the module-level import, skipped at collection
    assert "FAILED test_needs.py::test_real_failure" in out


def test_require_all_fails_naming_what_is_missing(tiny):
    run = _pytest(tiny, "--require-all", "--continue-on-collection-errors")
    out = run.stdout
    assert run.returncode == 1, out
    assert "5 failed" in out and "1 error" in out and "skipped" not in out, out
    for test in ("test_asks_for_the_tool", "test_harness_raises", "test_runs_the_program",
                 "test_asks_for_the_framework", "test_real_failure"):
        assert f"FAILED test_needs.py::{test}" in out, out
    assert f"missing under --require-all: {TOOL} not found" in out
    assert f"{TOOL} not found: install the Debian package(s)" in out        # the harness's own message
    assert f"No such file or directory: '{TOOL}'" in out
    assert "ERROR test_imports_missing.py" in out and f"No module named '{FRAMEWORK}'" in out


def test_unknown_marker_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "test_marked.py").write_text("import pytest\n\n\n@pytest.mark.slw\ndef test_typo():\n    pass\n")
    run = _pytest(tmp_path)
    assert run.returncode != 0
    assert "'slw' not found in `markers` configuration option" in run.stdout + run.stderr


@pytest.mark.parametrize("nodeid, marks", [
    ("tests/test_registry.py::test_coverage_report", set()),
    ("tests/ops/test_conv.py::test_conv_matches_onnxruntime[x]", set()),
    ("tests/importers/tensorflow/test_errors.py::test_unsupported_ops_listed_at_once", {"framework", "slow"}),
    ("tests/exporters/kernels/reference/test_kernels_conv.py::test_bundle_matches_reference[host-lenet-conv1]",
     {"bundle"}),
    ("tests/exporters/e2e/test_bundles_e2e.py::test_single_op_on_cortex_m[Conv-cortex-m4]", {"bundle", "qemu"}),
    ("tests/exporters/schedule/test_fusion.py::test_lenet_activations_are_the_pooled_tensors", set()),
    ("tests/exporters/schedule/test_fusion.py::test_lenet_fused_on_cortex_m7", {"bundle", "qemu", "slow"}),
    ("tests/quantize/test_compare.py::test_report_files", {"slow"}),
])
def test_tier_of(nodeid, marks):
    assert tiers.marks_of(nodeid) == marks


def test_slow_list_names_existing_tests():
    """Every entry of slow_tests.txt is a file, or a test function defined in its file (a renamed test would
    otherwise silently join the fast tier)."""
    for entry in tiers.SLOW:
        path, _, test = entry.partition("::")
        assert (ROOT / path).is_file(), entry
        if test:
            assert f"def {test.split('[')[0]}(" in (ROOT / path).read_text(), entry


def test_fast_tier_expression_skips_whole_folders():
    fast = "not slow and not qemu and not bundle and not framework"
    assert tiers.left_out(ROOT / "tests/importers/tensorflow", ROOT, fast)
    assert tiers.left_out(ROOT / "tests/exporters/kernels/x86", ROOT, fast)
    assert not tiers.left_out(ROOT / "tests/exporters/schedule", ROOT, fast)
    assert not tiers.left_out(ROOT / "tests/importers/tensorflow", ROOT, "framework")   # only "not ..." lists
