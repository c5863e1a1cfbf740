"""Zip archives from strangers, opened one way for every zip-based model format (PyTorch ``.pt2``, TorchScript,
``torch.save`` files, ``.keras``).

A zip has two descriptions of each member: the central directory at the end, which Python's ``zipfile`` lists,
and the local header in front of the data, which other readers (torch's miniz) may trust instead. A crafted
archive makes them disagree, names a member ``/abs``, ``a/../b`` or ``a\\b``, lists it twice, puts a directory
entry where a reader takes its root folder from the first entry, overlaps members to multiply the bytes
(a zip bomb), or declares sizes far beyond its own. ``open_archive`` refuses all of these before anything is
read, with one line naming the member; ``Archive.read`` checks a member's declared size against the budget
(``pegasus.limits``) and reads exactly that many bytes (CRC checked). ``Archive.member`` is the one place a
member name built from data inside the archive (a JSON ``path_name``) is resolved: the archive's root folder
plus plain relative parts, nothing that could normalise elsewhere.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

from pegasus import limits
from pegasus.errors import PegasusError

#: more members than any model archive has (a ResNet .pt2 holds ~130)
MAX_MEMBERS = 100_000
#: the declared bytes of all members together may be this many times the one-tensor budget
TOTAL_FACTOR = 64
_LOCAL = struct.Struct("<4s5H3L2H")
_ALLOWED_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_ZIP64 = 0xFFFFFFFF


def _bad_part(part: str) -> bool:
    return part in ("", ".", "..") or "\\" in part or "\x00" in part


def check_name(name: str) -> str | None:
    """Why ``name`` is not a plain relative member path (None when it is)."""
    if not name:
        return "an empty name"
    if name.startswith("/"):
        return "an absolute path"
    if name.endswith("/"):
        return "a directory entry"
    if "\\" in name:
        return "a backslash"
    if "\x00" in name:
        return "a NUL character"
    if any(_bad_part(part) for part in name.split("/")):
        return "an empty, '.' or '..' path component"
    return None


class Archive:
    """A validated zip archive: ``names`` in order, ``root`` (the one top folder all members share, or '')."""

    def __init__(self, zf: zipfile.ZipFile, where: str):
        self._zip = zf
        self.where = where
        self._infos = {info.filename: info for info in zf.infolist()}
        self.names: tuple[str, ...] = tuple(self._infos)
        tops = {name.split("/", 1)[0] if "/" in name else "" for name in self.names}
        self.root = tops.pop() if len(tops) == 1 else ""
        self._read_total = 0

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def has(self, name: str) -> bool:
        return name in self._infos

    def size(self, name: str) -> int:
        """The declared uncompressed size of member ``name``."""
        return self._infos[name].file_size

    def relative(self, name: str) -> str:
        """``name`` below the root folder."""
        return name[len(self.root) + 1:] if self.root else name

    def member(self, *parts: str, what: str = "member") -> str:
        """The member at the root folder plus ``parts`` (each a relative path taken from the archive's own data):
        refused unless every component is plain (no '', '.', '..', backslash, leading '/') and the member exists."""
        pieces = []
        for part in parts:
            if not isinstance(part, str):
                raise PegasusError(f"{what}: path {part!r} is not a string", where=self.where)
            if part.startswith("/") or any(_bad_part(p) for p in part.split("/")):
                raise PegasusError(f"{what}: path {part!r} is not a plain relative path inside the archive (refused)",
                                   where=self.where)
            pieces.append(part)
        name = "/".join(([self.root] if self.root else []) + pieces)
        if name not in self._infos:
            raise PegasusError(f"{what}: the archive has no member {'/'.join(pieces)!r}", where=self.where)
        return name

    def read(self, name: str, what: str = "member") -> bytes:
        """The bytes of member ``name``: its declared size checked against the budget first, then exactly that
        many bytes read and checked against the CRC."""
        info = self._infos[name]
        budget = limits.max_tensor_bytes()
        if info.file_size > budget:
            raise PegasusError(f"{what} ({self.relative(name)}) declares {info.file_size} bytes, more than the "
                               f"{budget} allowed for one tensor (raise it with {limits.FLAG} if the model really "
                               "has one)", where=self.where)
        self._read_total += info.file_size
        if self._read_total > budget * TOTAL_FACTOR:
            raise PegasusError(f"reading {what} ({self.relative(name)}) would take more than {TOTAL_FACTOR} times the "
                               f"{limits.FLAG} budget from one archive", where=self.where)
        try:
            with self._zip.open(info) as stream:
                data = stream.read(info.file_size + 1)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, zlib.error) as exc:
            raise PegasusError(f"damaged zip archive: member {self.relative(name)} cannot be read ({exc})",
                               where=self.where) from None
        if len(data) != info.file_size:
            raise PegasusError(f"damaged zip archive: member {self.relative(name)} holds {len(data)} bytes, not the "
                               f"{info.file_size} it declares", where=self.where)
        return data


def open_archive(source: str | Path | bytes, where: str | None = None) -> Archive:
    """Open and validate a zip archive (a file, or the bytes of one nested in another); every member is
    checked before anything is read. ``where`` names it in errors (default: the path)."""
    where = where or str(source if not isinstance(source, bytes) else "zip archive")
    stream = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115 (Archive owns it)
    try:
        try:
            zf = zipfile.ZipFile(stream)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, struct.error) as exc:
            raise PegasusError(f"truncated or damaged zip archive ({exc}); save the model again", where=where) from None
        try:
            _validate(zf, stream, where)
        except BaseException:
            zf.close()
            raise
    except BaseException:
        stream.close()
        raise
    return Archive(zf, where)


def _validate(zf: zipfile.ZipFile, stream, where: str) -> None:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise PegasusError(f"zip archive with {len(infos)} members (more than {MAX_MEMBERS}): refused", where=where)
    seen: set[str] = set()
    total = 0
    spans = []
    for info in infos:
        name = info.orig_filename
        problem = check_name(name)
        if problem:
            raise PegasusError(f"zip member {name[:80]!r} has {problem}: refused", where=where)
        if name in seen:
            raise PegasusError(f"zip member {name[:80]!r} is listed twice: refused", where=where)
        seen.add(name)
        if info.flag_bits & 0x41:
            raise PegasusError(f"zip member {name[:80]!r} is encrypted: refused", where=where)
        if info.compress_type not in _ALLOWED_METHODS:
            raise PegasusError(f"zip member {name[:80]!r} uses compression method {info.compress_type} (only stored "
                               "and deflated are read)", where=where)
        total += info.file_size
        spans.append(_local_span(info, stream, where))
    budget = limits.max_tensor_bytes() * TOTAL_FACTOR
    if total > budget:
        raise PegasusError(f"zip archive declares {total} bytes in all, more than {TOTAL_FACTOR} times the "
                           f"{limits.FLAG} budget ({budget} bytes): refused", where=where)
    spans.sort()
    for (_, end, name), (next_start, _, other) in zip(spans, spans[1:]):
        if next_start < end:
            raise PegasusError(f"zip members {name[:60]!r} and {other[:60]!r} overlap: refused", where=where)
    if spans and spans[-1][1] > zf.start_dir:
        raise PegasusError(f"zip member {spans[-1][2][:80]!r} runs into the central directory: refused", where=where)


def _local_span(info: zipfile.ZipInfo, stream, where: str) -> tuple[int, int, str]:
    """Compare the member's local header with its central-directory entry; returns (header start, data end, name)."""
    name = info.orig_filename
    if info.header_offset < 0:  # zipfile derives it from the end record's offsets, which a damaged file gets wrong
        raise PegasusError(f"zip member {name[:80]!r}: its local header offset points before the start of the file "
                           "(damaged directory): refused", where=where)
    stream.seek(info.header_offset)
    head = stream.read(_LOCAL.size)
    if len(head) != _LOCAL.size:
        raise PegasusError(f"zip member {name[:80]!r}: local header past the end of the file (truncated)", where=where)
    sig, _, flags, method, _, _, crc, csize, usize, name_len, extra_len = _LOCAL.unpack(head)
    raw_name = stream.read(name_len)
    encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
    try:
        central_name = name.encode(encoding)
    except UnicodeEncodeError:
        central_name = name.encode("utf-8")
    if sig != b"PK\x03\x04" or raw_name != central_name:
        raise PegasusError(f"zip member {name[:80]!r}: the local header names {raw_name[:80]!r} (central directory "
                           "and local header disagree): refused", where=where)
    if method != info.compress_type or (flags & 0x41) != (info.flag_bits & 0x41):
        raise PegasusError(f"zip member {name[:80]!r}: compression or encryption differs between the central "
                           "directory and the local header: refused", where=where)
    if not flags & 0x08:  # sizes are in the local header (not in a data descriptor after the data)
        declared = (crc, csize if csize != _ZIP64 else info.compress_size, usize if usize != _ZIP64 else info.file_size)
        if declared != (info.CRC, info.compress_size, info.file_size):
            raise PegasusError(f"zip member {name[:80]!r}: sizes or CRC differ between the central directory and "
                               "the local header: refused", where=where)
    start = info.header_offset
    return start, start + _LOCAL.size + name_len + extra_len + info.compress_size, name
