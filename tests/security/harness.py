"""What every security test asserts about a crafted input: pegasus refuses it with exit 2 and one line on
stderr (no traceback), under an address-space limit and a timeout, and nothing it did reached outside the
paths it was given (no canary file a payload would create, no new file outside the output folder)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: address space for one pegasus process: TensorFlow and torch reserve a few GB of it when imported, so the
#: limit leaves room for them but not for a tensor of the sizes crafted files declare (tens of GB)
ADDRESS_SPACE = 12 * 2**30
TIMEOUT = 240


@dataclass
class Limited:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _limits(address_space: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return apply


def run_limited(*args, cwd: Path | None = None, address_space: int = ADDRESS_SPACE, timeout: int = TIMEOUT,
                env: dict | None = None) -> Limited:
    """``python -m pegasus ARGS`` under an address-space limit and a timeout."""
    proc = subprocess.run([sys.executable, "-m", "pegasus", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, preexec_fn=_limits(address_space),
                          env={**os.environ, **(env or {})})
    return Limited(proc.returncode, proc.stdout, proc.stderr)


def assert_refused(result: Limited, *words: str) -> None:
    """Exit 2, exactly one line on stderr starting 'pegasus: error:', containing each of ``words``."""
    assert result.code == 2, f"exit {result.code}: {result.stderr[-2000:]}"
    assert len(result.lines) == 1, result.stderr[-2000:]
    line = result.lines[0]
    assert line.startswith("pegasus: error:") and "Traceback" not in result.stderr, line
    for word in words:
        assert word.lower() in line.lower(), f"{word!r} not in {line!r}"


def snapshot(folder: Path) -> set[Path]:
    """Every path under ``folder`` (to compare before and after a run)."""
    return {p for p in Path(folder).rglob("*")}


def assert_no_canary(*folders: Path, prefix: str = "PWNED") -> None:
    """No file a payload would have created exists in ``folders`` (searched recursively)."""
    for folder in folders:
        found = [p for p in Path(folder).rglob(f"{prefix}*")]
        assert not found, f"payload ran: {found}"


_DRIVER = r"""
import contextlib, io, json, os, sys
from pegasus import cli, limits
results = []
for argv, cwd in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd or here)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(here)
        limits.set_max_tensor_bytes(None)
        os.environ.pop(limits.ENV_VAR, None)
    results.append([code, out.getvalue()[-20000:], err.getvalue()[-20000:]])
sys.__stdout__.write(json.dumps(results))
"""


def run_many(cases: list[list], cwd: Path | None = None, address_space: int = ADDRESS_SPACE,
             timeout: int = TIMEOUT) -> list[Limited]:
    """Several ``pegasus`` command lines in ONE process (the frameworks are imported once), under an
    address-space limit and a timeout for the whole batch; each gets its own exit code and output."""
    import json

    payload = json.dumps([[list(map(str, argv)), str(cwd) if cwd else None] for argv in cases])
    proc = subprocess.run([sys.executable, "-c", _DRIVER], input=payload, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limits(address_space), cwd=cwd)
    assert proc.returncode == 0, f"the batch process died (exit {proc.returncode}): {proc.stderr[-3000:]}"
    return [Limited(code, out, err) for code, out, err in json.loads(proc.stdout)]


def assert_each_refused(cases: dict, results: list[Limited]) -> None:
    """``assert_refused`` for each case of ``{name: (input, words)}`` against its result, in order; a failure
    names the case."""
    for (name, (_, words)), result in zip(cases.items(), results, strict=True):
        try:
            assert_refused(result, *words)
        except AssertionError as exc:
            raise AssertionError(f"case {name}: {exc}") from None
