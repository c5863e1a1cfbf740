"""Read a Darknet ``.weights`` file: a header, then every layer's float32 values in cfg order.

The header is major, minor and revision (int32 each), then ``seen`` (images seen in training): an int64 when
major * 10 + minor >= 2 and both are below 1000, else an int32 (files written before Darknet 0.2). A major or
minor above 1000 marks old files whose connected-layer weights are stored transposed.

Converters take their values in order with ``take``; it never fails, so the import can finish and then say
in one line how many floats the cfg needed and how many the file holds (``check_complete``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import require_file

_HEADER = np.dtype([("major", "<i4"), ("minor", "<i4"), ("revision", "<i4")])


@dataclass
class WeightsFile:
    path: Path
    major: int
    minor: int
    revision: int
    seen: int
    header_bytes: int
    values: np.ndarray
    position: int = 0
    #: where the values ran out: (layer name, line), or None
    short_at: tuple[str, int] | None = None

    @property
    def transposed(self) -> bool:
        """Old files store connected weights as (inputs, outputs)."""
        return self.major > 1000 or self.minor > 1000

    def take(self, count: int, layer: str, line: int) -> np.ndarray:
        """The next ``count`` floats (zeros past the end of the file, which ``check_complete`` reports)."""
        start, self.position = self.position, self.position + count
        chunk = self.values[start:self.position]
        if chunk.size < count:
            if self.short_at is None:
                self.short_at = (layer, line)
            chunk = np.concatenate([chunk, np.zeros(count - chunk.size, np.float32)])
        return chunk.astype(np.float32)

    def check_complete(self, cfg: str) -> int:
        """Raise when the layers needed more floats than the file holds; returns how many were left over."""
        if self.short_at is not None:
            layer, line = self.short_at
            raise PegasusError(f"too short for {cfg}: its layers need {self.position:,} floats after the "
                               f"{self.header_bytes}-byte header, the file holds {self.values.size:,} (they run out "
                               f"in layer {layer}, line {line})", where=str(self.path))
        return self.values.size - self.position


def read_weights(path: str | Path) -> WeightsFile:
    path = require_file(path, "Darknet weights")
    data = path.read_bytes()
    if len(data) < _HEADER.itemsize + 4:
        raise PegasusError(f"not a Darknet weights file ({len(data)} bytes, shorter than its header)", where=str(path))
    header = np.frombuffer(data, _HEADER, count=1)[0]
    major, minor, revision = (int(header[k]) for k in ("major", "minor", "revision"))
    if major < 0 or minor < 0:
        raise PegasusError(f"not a Darknet weights file (version {major}.{minor}.{revision})", where=str(path))
    wide = major * 10 + minor >= 2 and major < 1000 and minor < 1000
    seen_bytes = 8 if wide else 4
    seen = int(np.frombuffer(data, "<i8" if wide else "<i4", count=1, offset=_HEADER.itemsize)[0])
    offset = _HEADER.itemsize + seen_bytes
    if len(data) < offset:
        raise PegasusError(f"not a Darknet weights file ({len(data)} bytes, shorter than its {offset}-byte header)",
                           where=str(path))
    usable = (len(data) - offset) // 4 * 4
    values = np.frombuffer(data, "<f4", count=usable // 4, offset=offset)
    return WeightsFile(path, major, minor, revision, seen, offset, values)
