"""Run a fuzz target: seeded mutants of its corpus, each read in-process under a per-input time limit, the
outcome classified (read, refused with a PegasusError, or broken: any other exception, a NumPy warning from
pegasus, a hang). A broken input is saved to fuzz/regressions/<target>/ so it is replayed from then on."""

from __future__ import annotations

import hashlib
import random
import shutil
import signal
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from fuzz.mutate import mutate
from fuzz.targets import Target
from pegasus.cli import one_line
from pegasus.errors import PegasusError

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
PER_INPUT_SECONDS = 30


class Hang(Exception):
    """An input took longer than PER_INPUT_SECONDS."""


@dataclass
class Summary:
    target: str
    executions: int = 0
    read: int = 0
    refused: int = 0
    broken: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"target": self.target, "executions": self.executions, "read": self.read, "refused": self.refused,
                "broken": self.broken, "seconds": round(self.seconds, 1)}


def _alarm(signum, frame):
    raise Hang(f"no answer within {PER_INPUT_SECONDS} s")


def check_one(target: Target, path: Path, scratch: Path) -> str | None:
    """Read one input; None when it was read or refused cleanly, else what broke (one line)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_INPUT_SECONDS)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", category=RuntimeWarning, module="pegasus")
            target.run(path, scratch)
        return None
    except PegasusError as exc:  # printed through cli.one_line: one line whatever names the file puts in it
        if "\n" in one_line(exc):
            return f"PegasusError of several lines: {str(exc)[:300]!r}"
        raise
    except Hang as exc:
        return f"hang: {exc}"
    except RecursionError:
        return "RecursionError"
    except Exception as exc:  # noqa: BLE001 — anything else is what the fuzzer looks for
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return f"{type(exc).__name__}: {str(exc)[:200]} ({Path(frame.filename).name}:{frame.lineno})"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _classify(target: Target, path: Path, scratch: Path, summary: Summary) -> str | None:
    try:
        problem = check_one(target, path, scratch)
    except PegasusError:
        summary.refused += 1
        return None
    if problem is None:
        summary.read += 1
    return problem


def _mutated(target: Target, data: bytes, rng: random.Random) -> bytes:
    if target.structured is not None and rng.random() < 0.5:
        try:
            return target.structured(data, rng)
        except Exception:  # noqa: BLE001 — a seed the structured mutator cannot parse: mutate the bytes
            pass
    return mutate(data, rng, target.text)


def _mutant(target: Target, rng: random.Random, work: Path) -> Path:
    """A mutated copy of one corpus item in ``work``."""
    item = rng.choice(target.items())
    if item.is_dir():
        copy = work / item.name
        shutil.copytree(item, copy, symlinks=True)
        files = sorted(p for p in copy.rglob(target.mutable) if p.is_file() and not p.is_symlink())
        victim = rng.choice(files)
        victim.write_bytes(_mutated(target, victim.read_bytes(), rng))
        return copy
    copy = work / item.name
    copy.write_bytes(_mutated(target, item.read_bytes(), rng))
    return copy


def save_regression(target: Target, path: Path) -> Path:
    """Keep an input that broke the target (a file or a folder) under fuzz/regressions/<target>/."""
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())
                          if path.is_dir() else path.read_bytes()).hexdigest()[:12]
    folder = REGRESSIONS / target.name
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"{digest}{''.join(path.suffixes) if path.is_file() else ''}"
    if path.is_dir():
        dest = folder / f"{digest}_{path.name}"
        if not dest.exists():
            shutil.copytree(path, dest, symlinks=True)
    else:
        shutil.copyfile(path, dest)
    return dest


def fuzz(target: Target, runs: int, seed: int, seconds: float | None = None, keep: bool = True) -> Summary:
    """``runs`` mutants (or as many as fit in ``seconds``) of the target's corpus, reproducible from ``seed``."""
    summary = Summary(target.name)
    if not target.items():
        summary.broken.append(f"no corpus in {target.corpus}")
        return summary
    start = time.monotonic()
    for index in range(runs):
        if seconds is not None and time.monotonic() - start > seconds:
            break
        rng = random.Random(f"{target.name}:{seed}:{index}")
        with tempfile.TemporaryDirectory(prefix="pegasus-fuzz-") as tmp:
            work = Path(tmp) / "in"
            scratch = Path(tmp) / "out"
            work.mkdir()
            scratch.mkdir()
            path = _mutant(target, rng, work)
            summary.executions += 1
            problem = _classify(target, path, scratch, summary)
            if problem:
                where = save_regression(target, path) if keep else path
                summary.broken.append(f"seed {seed} #{index}: {problem} -> {where}")
    summary.seconds = time.monotonic() - start
    return summary


def replay(target: Target) -> Summary:
    """Every saved regression input of the target: each must now be read or refused cleanly."""
    summary = Summary(target.name)
    folder = REGRESSIONS / target.name
    start = time.monotonic()
    for item in sorted(folder.iterdir()) if folder.is_dir() else []:
        with tempfile.TemporaryDirectory(prefix="pegasus-fuzz-") as tmp:
            work = Path(tmp) / item.name
            if item.is_dir():
                shutil.copytree(item, work, symlinks=True)
            else:
                shutil.copyfile(item, work)
            scratch = Path(tmp) / "out"
            scratch.mkdir()
            summary.executions += 1
            problem = _classify(target, work, scratch, summary)
            if problem:
                summary.broken.append(f"{item.name}: {problem}")
    summary.seconds = time.monotonic() - start
    return summary
