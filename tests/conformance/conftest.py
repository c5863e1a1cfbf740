"""Collects the conformance outcomes per op and prints them at the end of the run."""

from __future__ import annotations

from collections import defaultdict

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
