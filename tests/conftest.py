"""Shared fixtures (the demo model, a runner for the ``pegasus`` command line), the test tiers (markers by
folder, tests/support/tiers.py), the rule for a missing toolchain or framework (a skip with the install hint, a
failure under ``--require-all``: tests/support/requirements.py) and the per-op summary of the ONNX conformance run
(kept here, in the root conftest, so pytest-xdist's controller sees it)."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import requirements, tiers

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "conversion_scripts" / "demo"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None) -> CliResult:
    """Run ``python -m pegasus ARGS`` as a user would; returns exit code and output."""
    proc = subprocess.run([sys.executable, "-m", "pegasus", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def demo_onnx() -> Path:
    return DEMO_DIR / "lenet_mnist.onnx"


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory, demo_onnx) -> tuple[Path, Path]:
    """The demo LeNet imported once per session through the CLI: (json, data)."""
    folder = tmp_path_factory.mktemp("demo")
    result = run_cli("import", "onnx", "--model", demo_onnx, "--output-model", folder / "lenet_mnist.json",
                     "--output-data", folder / "lenet_mnist.data")
    assert result.code == 0, result.stderr
    return folder / "lenet_mnist.json", folder / "lenet_mnist.data"


def pytest_addoption(parser):
    parser.addoption("--require-all", action="store_true",
                     help="fail (instead of skip) a test whose toolchain or framework is missing (make test, CI)")


def pytest_configure(config):
    requirements.set_require_all(config.getoption("--require-all"))


def pytest_ignore_collect(collection_path, config):
    if tiers.left_out(collection_path, config.rootpath, config.getoption("markexpr")):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    tiers.mark(items, config.rootpath)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A test module importing a framework that is not installed: skipped with the hint (unless --require-all)."""
    report = (yield).get_result()
    if report.failed and not requirements.require_all():
        reason = requirements.missing_in_text(str(report.longrepr))
        if reason:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), None, f"Skipped: {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A missing tool or framework surfacing while the test runs (the bundle harness's MissingToolError, a
    program not on PATH, a framework import): skipped with the hint, unless --require-all."""
    report = (yield).get_result()
    if call.excinfo is None:
        return
    line = (item.location[1] or 0) + 1
    if report.skipped and any(entry.path == Path(requirements.__file__) for entry in call.excinfo.traceback):
        report.longrepr = (str(item.path), line, report.longrepr[2])     # need_tool's caller, not need_tool
    elif report.failed and not requirements.require_all():
        reason = requirements.missing_of(call.excinfo.value)
        if reason:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), line, f"Skipped: {reason}")


_OUTCOMES: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))


def pytest_runtest_logreport(report):
    if "test_node_case[" not in report.nodeid:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome == "skipped"):
        op = report.nodeid.split("[", 1)[1].split(":", 1)[0]
        _OUTCOMES[op][report.outcome] += 1


def pytest_terminal_summary(terminalreporter):
    if not _OUTCOMES:
        return
    write = terminalreporter.write_line
    write("")
    write("ONNX node conformance per op (passed / failed / excluded):")
    totals = defaultdict(int)
    for op in sorted(_OUTCOMES):
        counts = _OUTCOMES[op]
        for key, value in counts.items():
            totals[key] += value
        write(f"  {op:28s} {counts['passed']:4d} / {counts['failed']:3d} / {counts['skipped']:3d}")
    write(f"  {'TOTAL':28s} {totals['passed']:4d} / {totals['failed']:3d} / {totals['skipped']:3d}")
