"""Read a Darknet ``.weights`` file: a header, then every layer's float32 values in cfg order.

The header is major, minor and revision (int32 each), then ``seen`` (images seen in training): an int64 when
major * 10 + minor >= 2 and both are below 1000, else an int32 (files written before Darknet 0.2). A major or
minor above 1000 marks old files whose connected-layer weights are stored transposed.

Converters take their values in order with ``take``, which checks each layer's count against the floats left
in the file and against the tensor budget (pegasus.limits) before it allocates anything: a cfg declaring a
layer of 2^28 outputs over a 20-byte file is one line naming the layer, not gigabytes of zeros.
``check_complete`` then says how many floats were left over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.limits import check_count

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
    #: the cfg's name, for the message when the file is too short for it
    cfg: str = "the cfg"

    @property
    def transposed(self) -> bool:
        """Old files store connected weights as (inputs, outputs)."""
        return self.major > 1000 or self.minor > 1000

    def take(self, count: int, layer: str, line: int) -> np.ndarray:
        """The next ``count`` floats of layer ``layer`` (cfg line ``line``), once they are seen to be in the file
        and within the budget."""
        left = self.values.size - self.position
        if count > left:
            raise PegasusError(f"too short for {self.cfg}: its layers need {self.position + count:,} floats or more "
                               f"after the {self.header_bytes}-byte header, the file holds {self.values.size:,} "
                               f"(they run out in layer {layer}, line {line})", where=str(self.path))
        check_count(count, 4, f"layer {layer} (line {line}): {count:,} weights")   # the loader names the cfg
        start, self.position = self.position, self.position + count
        return self.values[start:self.position].astype(np.float32)

    def check_complete(self) -> int:
        """How many floats the layers left over."""
        return self.values.size - self.position


def read_weights(path: str | Path, cfg: str = "the cfg") -> WeightsFile:
    """The header and the float32 values of a .weights file (``cfg`` names the cfg in errors)."""
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
    offset = _HEADER.itemsize + seen_bytes
    if len(data) < offset:
        raise PegasusError(f"not a Darknet weights file ({len(data)} bytes, shorter than its {offset}-byte header)",
                           where=str(path))
    seen = int(np.frombuffer(data, "<i8" if wide else "<i4", count=1, offset=_HEADER.itemsize)[0])
    values = np.frombuffer(data, "<f4", count=(len(data) - offset) // 4, offset=offset)
    return WeightsFile(path, major, minor, revision, seen, offset, values, cfg=cfg)
