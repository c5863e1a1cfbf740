"""A LevelDB-format table (SSTable) read as data: the format of a TensorFlow checkpoint's ``.index`` file.

TensorFlow's own reader is C++ that trusts the file (a crafted index aborts or crashes the process), so the
checkpoint reader (checkpoint.py) parses the table here and every offset, length and count is checked against the
bytes present before it is used.

Layout (leveldb/doc/table_format.md): data blocks, a metaindex block, an index block, then a 48-byte footer (the
metaindex and index block handles as varint offset/size pairs, zero padding, the magic number). A block is a run
of entries — varint shared-prefix length, varint unshared length, varint value length, the key's unshared bytes,
the value — then a uint32 restart offset per restart point and their count; after a block come its compression
type (one byte) and the masked CRC32C of block + type byte. TensorFlow writes its index tables uncompressed;
compressed blocks are refused. The index block maps each data block's last key to its handle.
"""

from __future__ import annotations

import struct

from pegasus.errors import PegasusError
from pegasus.importers.tensorflow.crc32c import crc32c, masked

MAGIC = 0xDB4775248B80FB57
FOOTER = 48
TRAILER = 5


class _Bytes:
    """A cursor over a block that refuses to read past its end (one-line error naming the table)."""

    def __init__(self, data: memoryview, where: str):
        self.data, self.pos, self.where = data, 0, where

    def fail(self, what: str) -> PegasusError:
        return PegasusError(f"not a valid checkpoint index: {what}", where=self.where)

    def varint(self, limit: int = 64) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= len(self.data) or shift >= limit:
                raise self.fail("a length runs past its block")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def take(self, count: int) -> bytes:
        if count > len(self.data) - self.pos:
            raise self.fail("an entry runs past its block")
        start, self.pos = self.pos, self.pos + count
        return bytes(self.data[start:self.pos])


def _handle(cursor: _Bytes) -> tuple[int, int]:
    return cursor.varint(), cursor.varint()


def _block(data: memoryview, handle: tuple[int, int], where: str) -> memoryview:
    """The contents of the block at ``handle`` after checking its bounds, compression type and checksum."""
    offset, size = handle
    if offset + size + TRAILER > len(data) - FOOTER:
        raise PegasusError("not a valid checkpoint index: a block lies outside the file", where=where)
    content = data[offset:offset + size + 1]
    if content[-1] != 0:
        raise PegasusError(f"checkpoint index: a block is compressed (type {content[-1]}); TensorFlow writes "
                           "them uncompressed and pegasus reads only those", where=where)
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    if masked(crc32c(content)) != stored:
        raise PegasusError("checkpoint index: a block fails its checksum (the file is damaged)", where=where)
    return content[:-1]


def _entries(block: memoryview, where: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) pairs of one block, keys rebuilt from their shared prefixes."""
    if len(block) < 4:
        raise PegasusError("not a valid checkpoint index: a block is too short", where=where)
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * restarts
    if restarts < 1 or end < 0:
        raise PegasusError("not a valid checkpoint index: a block's restart table is damaged", where=where)
    cursor = _Bytes(block[:end], where)
    entries, key = [], b""
    while cursor.pos < end:
        shared, unshared, length = cursor.varint(), cursor.varint(), cursor.varint()
        if shared > len(key):
            raise cursor.fail("a key shares more bytes than the key before it has")
        key = key[:shared] + cursor.take(unshared)
        entries.append((key, cursor.take(length)))
    return entries


def read_table(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of the table in ``data``, in file order. Each data block is read once, and the blocks
    may not overlap, so the work is linear in the file's size."""
    view = memoryview(data)
    if len(view) < FOOTER or struct.unpack_from("<Q", view, len(view) - 8)[0] != MAGIC:
        raise PegasusError("not a valid checkpoint index: it does not end with the table footer", where=where)
    footer = _Bytes(view[len(view) - FOOTER:len(view) - 8], where)
    _handle(footer)                                   # the metaindex: TensorFlow puts nothing there
    index = _block(view, _handle(footer), where)
    handles = sorted(_handle(_Bytes(memoryview(value), where)) for _, value in _entries(index, where))
    for (offset, size), (next_offset, _) in zip(handles, handles[1:]):
        if offset + size + TRAILER > next_offset:
            raise PegasusError("not a valid checkpoint index: its blocks overlap", where=where)
    entries = []
    for handle in handles:                            # file order is key order: the writer appends blocks
        entries.extend(_entries(_block(view, handle, where), where))
    return entries
