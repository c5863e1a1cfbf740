"""A TensorFlow checkpoint (tensor bundle: ``PREFIX.index`` + ``PREFIX.data-SSSSS-of-NNNNN``) read as data.

TensorFlow's checkpoint reader is C++ that trusts the file: a crafted index with a dimension of -5, dims whose
product overflows or an unknown dtype aborts the process, a string tensor of 2^30 elements crashes it, a shard
that is a symbolic link is followed (its bytes imported from outside the model), a FIFO shard hangs, and its
checksum errors print the checksum of the bytes it read (an oracle that recovers any file 4 bytes at a time).
This reader does the same job with every declared number checked first:

- the index is a LevelDB table (sstable.py) whose values are protobufs: key "" holds the BundleHeaderProto
  (number of shards, byte order), every other key a BundleEntryProto (dtype, shape, shard, offset, size, CRC32C);
- a tensor is read only when asked for, from its shard after checking: the dtype is a plain numeric one, the dims
  are non-negative and the tensor fits the size budget (pegasus.limits), size equals elements x item size, the
  shard id is below the number of shards, the shard is a regular file beside the index (no symbolic link, no
  FIFO: fileio.open_model_input) and offset + size lies inside it;
- its bytes must match the stored CRC32C; a mismatch is one line that names the tensor and prints no checksum.

String tensors and tensors saved in slices (TF1 partitioned variables) are refused when asked for: no graph
pegasus converts takes them from a checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import open_model_input, read_model_input
from pegasus.importers.tensorflow.crc32c import crc32c, masked
from pegasus.importers.tensorflow.dtypes import NUMERIC, dtype_name
from pegasus.importers.tensorflow.sstable import read_table
from pegasus.limits import check_tensor

MAX_SHARDS = 99999          # the shard number is written with 5 digits


def numpy_dtype(enum: int, what: str, where: str) -> np.dtype:
    """The NumPy dtype of a plain numeric TensorFlow dtype (bfloat16 through ml_dtypes, as TensorFlow does)."""
    if enum in NUMERIC:
        return np.dtype(NUMERIC[enum])
    if enum == 14:
        try:
            import ml_dtypes
        except ImportError:
            raise PegasusError(f"{what} is bfloat16, which needs the ml_dtypes package", where=where) from None
        return np.dtype(ml_dtypes.bfloat16)
    raise PegasusError(f"{what} has dtype {dtype_name(enum)}, which pegasus does not read from a checkpoint "
                       "(only numeric tensors)", where=where)


class Checkpoint:
    """The entries of ``PREFIX.index``; ``get_tensor(key)`` reads one tensor from its shard."""

    def __init__(self, api, prefix: str | Path):
        self.prefix = Path(prefix)
        self.where = f"{self.prefix}.index"
        entries = read_table(read_model_input(self.where, "checkpoint index"), self.where)
        header = [value for key, value in entries if key == b""]
        if len(header) != 1:
            raise PegasusError("not a TensorFlow checkpoint index: it has no header entry", where=self.where)
        self.header = self._parse(api.BundleHeaderProto, header[0], "its header")
        if not 1 <= self.header.num_shards <= MAX_SHARDS:
            raise PegasusError(f"checkpoint index: {self.header.num_shards} data shards is not a valid count",
                               where=self.where)
        if self.header.endianness != 0:
            raise PegasusError("checkpoint index: the tensors are stored big-endian, which pegasus does not read",
                               where=self.where)
        self.entries = {}
        for key, value in entries:
            if key:
                name = key.decode(errors="replace")
                self.entries[name] = self._parse(api.BundleEntryProto, value, f"entry '{name}'")

    def _parse(self, message_class, data: bytes, what: str):
        message = message_class()
        try:
            message.ParseFromString(data)
        except Exception:       # protobuf's DecodeError (and RecursionError on deep nesting)
            raise PegasusError(f"checkpoint index: {what} is not a valid protobuf message", where=self.where) from None
        return message

    def keys(self) -> set[str]:
        return set(self.entries)

    def shard_path(self, shard: int) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.data-{shard:05d}-of-{self.header.num_shards:05d}")

    def get_tensor(self, key: str) -> np.ndarray:
        entry = self.entries.get(key)
        what = f"checkpoint tensor '{key}'"
        if entry is None:
            raise PegasusError(f"{what} is not in the checkpoint", where=self.where)
        if entry.slices:
            raise PegasusError(f"{what} is saved in slices (a partitioned variable), which pegasus does not read",
                               where=self.where)
        dtype = numpy_dtype(entry.dtype, what, self.where)
        if entry.shape.unknown_rank:
            raise PegasusError(f"{what} has no shape", where=self.where)
        shape = [int(dim.size) for dim in entry.shape.dim]
        nbytes = check_tensor(shape, dtype.itemsize, what, self.where)
        if entry.size != nbytes:
            raise PegasusError(f"{what}: its entry declares {entry.size} bytes but shape {shape} of "
                               f"{dtype.name} holds {nbytes}", where=self.where)
        if entry.shard_id >= self.header.num_shards:
            raise PegasusError(f"{what} is in data shard {entry.shard_id} but the checkpoint has "
                               f"{self.header.num_shards}", where=self.where)
        data = self._read(self.shard_path(entry.shard_id), entry.offset, nbytes, what)
        if masked(crc32c(data)) != entry.crc32c:
            raise PegasusError(f"{what} fails its checksum: the data shard is damaged or does not belong to this "
                               "index", where=self.where)
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    @staticmethod
    def _read(path: Path, offset: int, size: int, what: str) -> bytearray:
        with open_model_input(path, "checkpoint data shard") as handle:
            available = os.fstat(handle.fileno()).st_size
            if offset < 0 or offset > available or size > available - offset:
                raise PegasusError(f"{what}: its entry points at bytes {offset}..{offset + size} but the data shard "
                                   f"has {available} (truncated or damaged)", where=str(path))
            handle.seek(offset)
            data = bytearray(size)
            done = handle.readinto(data) if size else 0
        if done != size:
            raise PegasusError(f"{what}: the data shard ends early (truncated or damaged)", where=str(path))
        return data
