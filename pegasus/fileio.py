"""Write outputs without ever leaving a half-written file behind.

Every file pegasus produces goes through ``atomic_write``/``AtomicFileSet``: data goes to a temporary
file in the destination folder and is renamed over the target only once complete, so an existing
file is either untouched or fully replaced.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pegasus.errors import PegasusError


def check_target(target: str | os.PathLike) -> Path:
    """Fail early, before any work, if ``target``'s folder does not exist or is not writable."""
    target = Path(target)
    _check_dir(target.parent if str(target.parent) else Path("."))
    return target


def _check_dir(folder: Path) -> None:
    if not folder.is_dir():
        raise PegasusError(f"output folder does not exist: {folder}")
    if not os.access(folder, os.W_OK):
        raise PegasusError(f"output folder is not writable: {folder}")


class AtomicFileSet:
    """Stage several files and publish them together: all renamed at commit, none on failure."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def stage(self, target: str | os.PathLike, data: bytes | str) -> None:
        target = Path(target)
        folder = target.parent if str(target.parent) else Path(".")
        _check_dir(folder)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data.encode() if isinstance(data, str) else data)
        except BaseException:
            os.unlink(tmp)
            raise
        self._staged.append((Path(tmp), target))

    def commit(self) -> None:
        for tmp, target in self._staged:
            os.replace(tmp, target)
        self._staged.clear()

    def discard(self) -> None:
        for tmp, _ in self._staged:
            tmp.unlink(missing_ok=True)
        self._staged.clear()

    def __enter__(self) -> AtomicFileSet:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def atomic_write(target: str | os.PathLike, data: bytes | str) -> None:
    """Write one file atomically (temporary file in the same folder, then rename)."""
    with AtomicFileSet() as files:
        files.stage(target, data)


@contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Give a temporary path for a library that writes files itself; renamed to target on success."""
    target = Path(target)
    folder = target.parent if str(target.parent) else Path(".")
    _check_dir(folder)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix or target.suffix, dir=folder)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def require_file(path: str | os.PathLike, what: str = "file") -> Path:
    """Return ``path`` as a Path, or raise a one-line error if it is not an existing file."""
    path = Path(path)
    if not path.exists():
        raise PegasusError(f"{what} not found: {path}")
    if not path.is_file():
        raise PegasusError(f"{what} is not a file: {path}")
    return path
