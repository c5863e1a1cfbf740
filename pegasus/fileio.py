"""Write outputs without ever leaving a half-written file behind.

Every file pegasus produces goes through ``atomic_write``/``AtomicFileSet``: data goes to a temporary
file in the destination folder and is renamed over the target only once complete, so an existing
file is either untouched or fully replaced. A missing destination folder is created (with its parents)
when the first file is written into it; commands call ``check_folder``/``check_target`` on every output
path before any work, so a path that can never be written (a component is a file, a folder is not
writable) fails at once with one line and nothing written.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from pegasus.errors import PegasusError


def check_folder(folder: str | os.PathLike, flag: str = "output folder") -> Path:
    """Fail early, before any work, unless ``folder`` is a writable folder or can be created as one.

    ``flag`` names the option in the error (``--output-dir``). A missing folder is not created here but
    when the first file is written into it, so a command that fails before writing leaves nothing behind.
    """
    folder = Path(folder)
    _check_creatable(folder, f"{flag} {folder}")
    return folder


def check_target(target: str | os.PathLike, flag: str = "output file") -> Path:
    """Fail early, before any work, unless ``target`` can be written: its folder exists and is writable,
    or can be created (``check_folder``), and it is not itself a folder."""
    target = Path(target)
    if target.is_dir():
        raise PegasusError(f"{flag} {target} is a folder; give a file name")
    _check_creatable(_folder_of(target), f"{flag} {target}")
    return target


def _folder_of(target: Path) -> Path:
    return target.parent if str(target.parent) else Path(".")


def _check_creatable(folder: Path, subject: str) -> None:
    """``folder`` is a writable folder, or its nearest existing ancestor is one (so it can be created)."""
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise PegasusError(f"{subject}: {existing} is a file, not a folder" if existing.is_file()
                           else f"{subject}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PegasusError(f"{subject}: folder {existing} is not writable")


def make_folder(folder: str | os.PathLike) -> Path:
    """Create ``folder`` and its missing parents for a file about to be written there."""
    folder = Path(folder)
    _check_creatable(folder, f"output folder {folder}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PegasusError(f"cannot create output folder {folder}: {exc.strerror or exc}") from exc
    return folder


class AtomicFileSet:
    """Stage several files and publish them together: all renamed at commit, none on failure."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def stage(self, target: str | os.PathLike, data: bytes | str | Iterable[bytes]) -> None:
        """Write ``data`` (or its chunks, one after another: a large file never whole in memory) to a
        temporary file beside ``target``."""
        target = Path(target)
        folder = _folder_of(target)
        make_folder(folder)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                if isinstance(data, (bytes, bytearray, memoryview, str)):
                    handle.write(data.encode() if isinstance(data, str) else data)
                else:
                    for chunk in data:
                        handle.write(chunk)
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
    folder = _folder_of(target)
    make_folder(folder)
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
    try:
        exists, is_file = path.exists(), path.is_file()
    except OSError as exc:  # a name too long for the file system, a loop of links...
        raise PegasusError(f"{what} cannot be looked up: {exc.strerror}: {str(path)[:200]}") from None
    if not exists:
        raise PegasusError(f"{what} not found: {path}")
    if not is_file:
        raise PegasusError(f"{what} is not a file: {path}")
    return path


def open_model_input(path: str | os.PathLike, what: str = "model file", given: bool = False) -> BinaryIO:
    """Open a file pegasus reads model bytes from (a model, its .data, external data) for reading in binary,
    refusing a symbolic link (a crafted model folder could point it at any file: its bytes would end up in the
    outputs) and anything but a regular file (a FIFO or device would hang or never end).

    ``given``: the path is the one the user named on the command line; a link there is the user's own choice
    (model caches such as Hugging Face's keep files as links into a blob store), so it is resolved once and
    its target must be a regular file. Files a reader finds by itself (a .data beside NAME.json, external
    data, checkpoint shards) are never followed."""
    path = Path(path)
    if given and os.path.islink(path):
        path = Path(os.path.realpath(path))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise PegasusError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise PegasusError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise PegasusError(f"{what} {path} is a symbolic link; pegasus reads model files only as regular files "
                           "(copy the file there instead)")
    if not stat.S_ISREG(info.st_mode):
        raise PegasusError(f"{what} {path} is not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)   # NOFOLLOW, NONBLOCK: a link or FIFO swapped in after the lstat fails here
    except OSError as exc:
        raise PegasusError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PegasusError(f"{what} {path} is not a regular file")
    return os.fdopen(fd, "rb")


def read_model_input(path: str | os.PathLike, what: str = "model file", given: bool = False) -> bytes:
    """The whole content of a model input file, opened as ``open_model_input`` does."""
    with open_model_input(path, what, given) as handle:
        return handle.read()
