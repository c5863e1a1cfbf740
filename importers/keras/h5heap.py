"""Refuse an HDF5 file whose global heap would make the HDF5 library loop forever, before h5py reads it.

Variable-length strings (Keras's ``model_config``, ``keras_version``, a layer's ``name``) live in the file's
global heap: collections that start ``GCOL`` and hold objects, each a header (index, reference count, size)
and its bytes. When HDF5 (1.14.6, the version h5py ships) loads a collection it walks the objects by their
sizes; an object 0 (free space) of size 0, or a size that wraps the pointer arithmetic, leaves the walk where
it was, and the reading never returns (nor can Python's signals interrupt it). A damaged or crafted
``.h5`` is enough. So the collections are walked here first, the same way, and such a file is refused.

A ``GCOL`` inside weight bytes is walked too: it is refused only if it would loop as well, which real data
does with negligible odds.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from pegasus.errors import PegasusError

_SUPERBLOCK = b"\x89HDF\r\n\x1a\n"
_COLLECTION = b"GCOL"


def _length_size(data: bytes | mmap.mmap) -> int:
    """The file's "size of lengths" (superblock at 0 or at 512, 1024, ...; 8 when unreadable)."""
    base = 0
    while base + 16 <= len(data):
        if data[base:base + 8] == _SUPERBLOCK:
            version = data[base + 8]
            size = data[base + 14] if version < 2 else data[base + 10]
            return size if size in (2, 4, 8) else 8
        base = 512 if base == 0 else base * 2
    return 8


def _loops(data: bytes | mmap.mmap, start: int, length_size: int) -> str | None:
    """Why walking the collection at ``start`` would not end (or run past it), else None."""
    header = 8 + length_size
    object_header = 8 + length_size
    if start + header > len(data):
        return None
    size = int.from_bytes(data[start + 8:start + header], "little")
    end = start + size
    if end > len(data):
        return None   # HDF5 cannot read a collection past the end of the file: it fails by itself
    p, free_objects = start + header, 0
    while p < end:
        if p + object_header > end:
            break
        index = int.from_bytes(data[p:p + 2], "little")
        object_size = int.from_bytes(data[p + 8:p + object_header], "little")
        if index > 0:
            need = (object_header + ((object_size + 7) & ~7)) % 2**64
        else:
            need, free_objects = object_size, free_objects + 1
        if need == 0:
            return f"object {index} of size {object_size} (the walk would not move)"
        if p + need > end:
            return f"object {index} of {object_size:,} bytes runs past the collection's {size:,}"
        if free_objects > 1:
            return "two free-space objects"
        p += need
    return None


def check_global_heaps(data: bytes | mmap.mmap, file: Path, what: str = "") -> None:
    """Refuse ``data`` (the HDF5 file's bytes) if a global heap collection in it would hang HDF5."""
    length_size = _length_size(data)
    start = data.find(_COLLECTION)
    while start >= 0:
        problem = _loops(data, start, length_size)
        if problem:
            inside = f" ({what})" if what else ""
            raise PegasusError(f"the HDF5 global heap collection at byte {start:,}{inside} is damaged: {problem}",
                               where=str(file))
        start = data.find(_COLLECTION, start + 1)


def check_global_heaps_of(path: Path) -> None:
    """``check_global_heaps`` on a file, mapped rather than read."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            check_global_heaps(data, path)
