"""Every lookup and every array the Keras reader takes from an HDF5 file, kept inside that file and its size.

HDF5 lets an object live elsewhere: a dataset's bytes in other files (external storage,
``external=[("/etc/passwd", 0, 48)]``), a member that is a link to another file (``h5py.ExternalLink``) or to
another place (``SoftLink``), a virtual dataset mapping other files' datasets. h5py follows all of them
silently, so a crafted weights file would copy another file's bytes into the imported weights. It also lets a
dataset declare any shape: a chunked dataset never written, or one compressed, takes no room in the file but
reads as gigabytes. Keras writes none of these: plain groups and datasets held in the file.

So the reader resolves names only through ``H5Reader.child`` (one path component at a time, hard links only,
checked with the link's own information before h5py dereferences anything) and reads arrays only through
``H5Reader.array``, which refuses external storage, virtual datasets, filters other than HDF5's built-in
ones and non-numeric types, and checks the declared size against the tensor budget (pegasus.limits) and,
together with every array read before it, against what the file can hold: its size (uncompressed weights)
plus one tensor budget (room for compressed or shared data) — before any byte is read.

A damaged file makes h5py raise what HDF5 said (``RuntimeError: Can't get deprecated info for object (bad
local heap signature)``, ``OSError``, ``KeyError``...) from any call: every h5py call on the file goes through
an ``H5Reader`` method (``attr`` and ``count`` too) that turns such an error into one line naming the file and
the object being read. Before h5py sees the file at all, h5heap.py refuses global heaps that would hang HDF5.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pegasus.errors import PegasusError
from pegasus.limits import check_tensor, max_tensor_bytes

#: HDF5's own filters (deflate, shuffle, fletcher32, szip, nbit, scaleoffset) and h5py's lzf; any other id would
#: make HDF5 look for a plugin library
_BUILTIN_FILTERS = {1, 2, 3, 4, 5, 6, 32000}
_NUMERIC = "fiub"
_LINKS = {h5py.h5l.TYPE_SOFT: "a soft link", h5py.h5l.TYPE_EXTERNAL: "an external link"}
#: what h5py raises on a damaged file (HDF5's error stack, mapped to Python exceptions)
H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, UnicodeError)


def h5_name(node: Any) -> str:
    """``node.name``, or '?' when the damaged file cannot say it."""
    try:
        return str(node.name)
    except H5_ERRORS:
        return "?"


def _target(group: Any, key: bytes, kind: int) -> str:
    """' to FILE:/path' or ' to /path': where a soft or external link points (read from the link, not followed)."""
    try:
        value = group.id.links.get_val(key)
    except (KeyError, ValueError, TypeError):   # a user-defined link has no value h5py can show
        return ""
    if kind == h5py.h5l.TYPE_EXTERNAL:
        file, inside = (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in value)
        return f" to {file}:{inside}"
    return f" to {value.decode('utf-8', 'replace') if isinstance(value, bytes) else value}"


class H5Reader:
    """Lookups and reads in one HDF5 file (``size``: its bytes), refusing whatever would leave it."""

    def __init__(self, file: Path, size: int, what: str = ""):
        self.file = file
        self.size = size
        self.what = what   # "model.weights.h5 in the archive" for a .keras zip: said in the errors
        self.read_bytes = 0
        self._seen: set[tuple[int, int]] = set()

    def _refuse(self, message: str) -> PegasusError:
        return PegasusError(f"{message}{self._inside()}: pegasus reads only what is stored in the model file itself",
                            where=str(self.file))

    def _inside(self) -> str:
        return f" ({self.what})" if self.what else ""

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """h5py's errors inside become one line naming the file and ``what`` was being read."""
        try:
            yield
        except PegasusError:
            raise
        except H5_ERRORS as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise PegasusError(f"cannot read {what}{self._inside()}: {detail} (the HDF5 file is damaged or "
                               "truncated)", where=str(self.file)) from None

    def attr(self, node: Any, name: str, default: Any = None) -> Any:
        """The attribute ``name`` of ``node``, or ``default`` when it has none."""
        with self.reading(f"attribute '{name}' of '{h5_name(node)}'"):
            return node.attrs[name] if name in node.attrs else default

    def count(self, group: Any) -> int:
        """How many members ``group`` has."""
        with self.reading(f"the members of '{h5_name(group)}'"):
            return len(group)

    def child(self, group: Any, name: str) -> Any:
        """``group[name]`` (``name`` may have several '/'-separated parts), or None when it does not exist;
        a soft, external or user-defined link on the way is refused by name, before it is followed."""
        parts = str(name).split("/")
        if any(part in ("", ".") for part in parts):
            raise self._refuse(f"member name '{name}' under '{group.name}' is not a plain relative path")
        node = group
        for part in parts:
            if not isinstance(node, h5py.Group):
                return None
            member = f"{h5_name(node).rstrip('/')}/{part}"
            with self.reading(f"'{member}'"):
                key = part.encode("utf-8")
                if not node.id.links.exists(key):
                    return None
                kind = node.id.links.get_info(key).type
                if kind != h5py.h5l.TYPE_HARD:
                    raise self._refuse(f"'{member}' is {_LINKS.get(kind, f'a user-defined link (type {kind})')}"
                                       f"{_target(node, key, kind)}")
                node = node[part]
        return node

    def groups(self, group: Any) -> list[str]:
        """The names of ``group``'s members that are groups (links refused as in ``child``)."""
        with self.reading(f"the members of '{h5_name(group)}'"):
            names = list(group)
        return [name for name in names if isinstance(self.child(group, name), h5py.Group)]

    def first_visit(self, group: Any) -> bool:
        """False when ``group`` was walked before (hard links can make a group its own member)."""
        with self.reading(f"'{h5_name(group)}'"):
            info = h5py.h5o.get_info(group.id)
            key = (info.fileno, info.addr)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def array(self, group: Any, name: str) -> np.ndarray:
        """The dataset ``group/name`` as an array, after the checks above (the module docstring)."""
        dataset = self.child(group, name)
        path = f"{h5_name(group).rstrip('/')}/{name}"
        if not isinstance(dataset, h5py.Dataset):
            raise self._refuse(f"weight '{path}' is not a dataset") if dataset is not None else \
                PegasusError(f"weight '{path}' is missing (is the file truncated?)", where=str(self.file))
        return self.read(dataset, path)

    def read(self, dataset: Any, path: str) -> np.ndarray:
        with self.reading(f"weight '{path}'"):
            return self._read(dataset, path)

    def _read(self, dataset: Any, path: str) -> np.ndarray:
        where, label = str(self.file), f"weight '{path}'{self._inside()}"
        if dataset.is_virtual:
            raise self._refuse(f"weight '{path}' is a virtual dataset (its data is mapped from other datasets or "
                               "files)")
        if dataset.external:
            files = ", ".join(str(entry[0]) for entry in dataset.external)
            raise self._refuse(f"weight '{path}' keeps its data in external file(s) {files}")
        plist = dataset.id.get_create_plist()
        for index in range(plist.get_nfilters()):
            code = plist.get_filter(index)[0]
            if code not in _BUILTIN_FILTERS:
                raise PegasusError(f"{label} is stored with HDF5 filter {code}, which is not one of HDF5's built-in "
                                   "filters", where=where)
        dtype = dataset.dtype
        if dtype.kind not in _NUMERIC or dtype.fields is not None or dtype.subdtype is not None:
            raise PegasusError(f"{label} has type {dtype}, not numbers", where=where)
        shape = dataset.shape if dataset.shape is not None else ()
        nbytes = check_tensor(shape, dtype.itemsize, label, where)
        allowed = self.size + max_tensor_bytes()
        if self.read_bytes + nbytes > allowed:
            raise PegasusError(f"{label} of shape {list(shape)} brings the weights read to "
                               f"{self.read_bytes + nbytes:,} bytes, more than a {self.size:,}-byte file holds "
                               f"(plus {max_tensor_bytes():,} bytes for compressed data): a compressed, unwritten "
                               "or repeated dataset", where=where)
        self.read_bytes += nbytes
        return np.asarray(dataset[()])
