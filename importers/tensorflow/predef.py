"""``--predef-file``: an .npz of values by name (Acuity's predef file) that fix placeholders at import time (a
training flag, a dropout rate); an entry ``map`` ({alias: name}) renames entries.

The file comes with the model, so it is read as data: each member's header is parsed, its declared size checked
against the size budget (pegasus.limits) and the bytes actually there before anything is allocated, and only the
``map`` entry may be an object array, unpickled by ``ArraysOnly``, which allows NumPy's array reconstruction and
builtin containers and nothing that could run code.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.limits import check_present, check_tensor

#: the dtype kinds a value may have: bool, integers, floats, complex
NUMERIC_KINDS = "biufc"


class ArraysOnly(pickle.Unpickler):
    """Unpickles the ``map`` entry of a predef file (a dict of names in a 0-d object array) and nothing that
    could run code: only NumPy's array reconstruction and builtin containers are allowed."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("builtins", "dict"), ("builtins", "list")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a predef file")
        return super().find_class(module, name)


def _read_npy(member, info: zipfile.ZipInfo, name: str, where: str) -> np.ndarray:
    """One .npy member: a numeric array, or (the ``map`` entry only) an object array through ``ArraysOnly``."""
    what = f"--predef-file entry '{name}'"
    version = np.lib.format.read_magic(member)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = header(member)
    if dtype.hasobject:
        if name != "map":
            raise PegasusError(f"{what} is an object array; values must be numeric arrays", where=where)
        check_tensor([info.file_size], 1, what, where)
        try:
            return np.asarray(ArraysOnly(member).load())
        except Exception as exc:    # a damaged or hostile pickle: whatever the unpickler raises
            raise PegasusError(f"{what} is not a dict {{alias: name}} ({type(exc).__name__})", where=where) from None
    if dtype.kind not in NUMERIC_KINDS:
        raise PegasusError(f"{what} has dtype {dtype}; values must be numeric arrays", where=where)
    nbytes = check_tensor(shape, dtype.itemsize, what, where)
    check_present(nbytes, info.file_size, what, where)
    data = member.read(nbytes)
    check_present(nbytes, len(data), what, where)
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def load_predef(path: str | Path) -> dict[str, np.ndarray]:
    """The values of a predef file by name, renamed by its ``map`` entry."""
    path = require_file(path, "--predef-file")
    values = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with archive.open(info) as member:
                    values[name] = _read_npy(member, info, name, str(path))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise PegasusError(f"--predef-file: not a NumPy .npz file ({exc})", where=str(path)) from None
    aliases = values.pop("map", None)
    if aliases is not None:
        aliases = aliases.item() if aliases.dtype.hasobject and aliases.size == 1 else None
        if not isinstance(aliases, dict):
            raise PegasusError("--predef-file: its 'map' entry is not a dict {alias: name}", where=str(path))
        values = {str(aliases.get(key, key)): value for key, value in values.items()}
    return values
