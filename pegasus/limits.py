"""Bounded work from bounded input: the size budget every reader checks before it allocates.

A model file is data from a stranger. A 133-byte GraphDef may declare a constant of 2^30 floats, a
136-byte ONNX ConstantOfShape a tensor of 2^28; a reader that allocates what a file declares lets a tiny
file take the machine's memory. Every reader (and constant folding, which computes new tensors from
declared shapes) therefore asks ``check_tensor`` before it allocates, and ``check_present`` before it
reads a declared number of bytes, so the declared size is compared with the bytes actually there.

The budget is one number, ``--max-tensor-bytes`` on the command line (accepted anywhere on it, like
``--verbose``), the ``PEGASUS_MAX_TENSOR_BYTES`` environment variable, or the default below: a single
tensor larger than it is refused with one line naming the tensor and the file. The largest weight
tensor in common trained models (VGG's first fully connected layer, 411 MB in float32) fits the default.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterable, Iterator

from pegasus.errors import PegasusError

DEFAULT_MAX_TENSOR_BYTES = 512 * 2**20
ENV_VAR = "PEGASUS_MAX_TENSOR_BYTES"
FLAG = "--max-tensor-bytes"
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)

_budget: int | None = None


def parse_size(text: str, what: str = FLAG) -> int:
    """'512M', '2G', '1000000' (bytes) as a number of bytes; a bad value is a one-line error."""
    match = _SIZE.fullmatch(str(text))
    if not match:
        raise PegasusError(f"{what}: '{text}' is not a size (bytes, or a number with K, M, G: '512M')")
    value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0:
        raise PegasusError(f"{what}: the size must be positive, not '{text}'")
    return value


def max_tensor_bytes() -> int:
    """The current budget for one tensor, in bytes (asked once per tensor: kept, not re-read from the
    environment each time)."""
    global _budget
    if _budget is None:
        env = os.environ.get(ENV_VAR)
        _budget = parse_size(env, ENV_VAR) if env else DEFAULT_MAX_TENSOR_BYTES
    return _budget


def set_max_tensor_bytes(value: int | None) -> None:
    """Set the budget for this process (None: back to the environment variable or the default, read at the
    next check)."""
    global _budget
    _budget = value


@contextlib.contextmanager
def tensor_budget(value: int) -> Iterator[None]:
    """The budget set to ``value`` for the duration of a ``with`` block (tests, batch jobs)."""
    global _budget
    before, _budget = _budget, value
    try:
        yield
    finally:
        _budget = before


def pop_flag(argv: list[str]) -> list[str]:
    """Take ``--max-tensor-bytes N`` / ``--max-tensor-bytes=N`` out of a command line (anywhere on it) and
    set the budget; returns the remaining arguments."""
    rest, index = [], 0
    while index < len(argv):
        arg = argv[index]
        if arg == FLAG:
            if index + 1 >= len(argv):
                raise PegasusError(f"{FLAG} needs a size, e.g. {FLAG} 512M")
            _set_from_flag(argv[index + 1])
            index += 2
            continue
        if arg.startswith(FLAG + "="):
            _set_from_flag(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        index += 1
    return rest


def _set_from_flag(text: str) -> None:
    """The flag's budget for this process and the processes it starts (sandboxed readers, batch jobs)."""
    value = parse_size(text)
    set_max_tensor_bytes(value)
    os.environ[ENV_VAR] = str(value)


def _describe(what: str, where: str | None) -> str:
    return f"{where}: {what}" if where else what


def element_count(shape: Iterable, what: str, where: str | None = None) -> int:
    """The number of elements of ``shape``, each dim checked to be a non-negative integer (Python ints:
    no wrap-around however large the dims)."""
    count = 1
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, (int,)) and not hasattr(dim, "__index__"):
            raise PegasusError(f"{_describe(what, where)} has a dimension that is not an integer: {dim!r}")
        dim = int(dim)
        if dim < 0:
            raise PegasusError(f"{_describe(what, where)} has a negative dimension ({dim})")
        dims.append(dim)
        count *= dim
    return count


def check_tensor(shape: Iterable, itemsize: int, what: str, where: str | None = None) -> int:
    """Refuse, before anything is allocated, a tensor of ``shape`` whose bytes exceed the budget; returns
    its size in bytes. ``what`` names the tensor (and op or layer), ``where`` the file."""
    shape = list(shape)
    nbytes = element_count(shape, what, where) * int(itemsize)
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise PegasusError(f"{_describe(what, where)}: a tensor of shape {shape} needs {_human(nbytes)}, more "
                           f"than the {_human(limit)} allowed for one tensor (raise it with {FLAG} if the "
                           "model really has one)")
    return nbytes


def check_count(count: int, itemsize: int, what: str, where: str | None = None) -> int:
    """``check_tensor`` for a flat number of elements."""
    return check_tensor([int(count)], itemsize, what, where)


def check_present(needed: int, available: int, what: str, where: str | None = None) -> None:
    """Refuse a declared size larger than the bytes actually in the file, before reading or allocating."""
    if needed < 0 or needed > available:
        raise PegasusError(f"{_describe(what, where)} declares {needed} bytes but only {available} are there "
                           "(truncated or damaged file)")


def _human(nbytes: int) -> str:
    if nbytes < 2**20:
        return f"{nbytes} bytes"
    if nbytes >= 2**1000:  # a float cannot hold it (dims multiplied from a crafted file)
        return f"about 2^{nbytes.bit_length() - 1} bytes"
    exponent = min(int(math.log(nbytes, 1024)), 4)
    return f"{nbytes / 1024 ** exponent:.1f} {' KMGT'[exponent]}iB".replace("  ", " ")
