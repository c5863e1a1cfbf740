"""CRC32C (Castagnoli), as TensorFlow's checkpoints use it, in NumPy: the checkpoint reader (checkpoint.py) checks
every block of a ``variables.index`` and every tensor it reads from a data shard against the checksum stored
beside it, so a damaged or mismatched shard is refused instead of imported.

TensorFlow's C++ reader is not used on model bytes (a crafted index aborts or crashes it), and no CRC32C package is
a dependency, so the checksum is computed here. A byte-at-a-time loop in Python would take minutes for a 100 MB
tensor; instead the data is cut into equal chunks whose checksums advance together, one NumPy step per byte
position, and the chunks' results are combined with the linear map "append L zero bytes" (a CRC is linear over
GF(2)), computed in the same loop from the 32 unit states.

``masked`` is LevelDB's and TensorFlow's stored form of a checksum.
"""

from __future__ import annotations

import numpy as np

_POLY = 0x82F63B78


def _table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _table()
_TABLE_LIST = [int(v) for v in _TABLE]
_UNITS = np.array([1 << k for k in range(32)], dtype=np.uint32)
_COLUMNS = 256            # byte positions transposed at a time (keeps the working copy small)


def _raw(state: int, data) -> int:
    """The register after ``data`` (bytes), starting from ``state``: a plain loop, for short inputs."""
    table = _TABLE_LIST
    for byte in data:
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state


def _shift_tables(images: np.ndarray) -> list[list[int]]:
    """Per byte of a 32-bit state, the image of each of its 256 values under the linear map whose images of the
    unit vectors are ``images``."""
    tables = []
    for byte in range(4):
        table = [0] * 256
        for value in range(256):
            image = 0
            for bit in range(8):
                if value >> bit & 1:
                    image ^= int(images[byte * 8 + bit])
            table[value] = image
        tables.append(table)
    return tables


def crc32c(data: bytes | memoryview) -> int:
    """The CRC32C of ``data``."""
    view = np.frombuffer(data, dtype=np.uint8)
    size = view.size
    chunk = max(64, int(size ** 0.5))
    count = size // chunk
    state = 0xFFFFFFFF
    if count >= 2:
        blocks = view[:count * chunk].reshape(count, chunk)
        states = np.zeros(count + 32, dtype=np.uint32)
        states[count:] = _UNITS                 # the unit states, fed zero bytes: "append ``chunk`` zeros"
        column = np.zeros(count + 32, dtype=np.uint32)
        for start in range(0, chunk, _COLUMNS):
            part = np.ascontiguousarray(blocks[:, start:start + _COLUMNS].T)
            for row in part:
                column[:count] = row
                states = _TABLE[(states ^ column) & 0xFF] ^ (states >> 8)
        tables = _shift_tables(states[count:])
        for value in states[:count].tolist():
            state = (tables[0][state & 0xFF] ^ tables[1][state >> 8 & 0xFF] ^ tables[2][state >> 16 & 0xFF]
                     ^ tables[3][state >> 24]) ^ value
        view = view[count * chunk:]
    return _raw(state, view.tobytes()) ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    """A checksum in the form LevelDB and TensorFlow store it (rotated and offset)."""
    return ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF
