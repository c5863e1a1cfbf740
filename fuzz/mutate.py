"""Deterministic mutations of a valid file: what truncated downloads, converter bugs and crafted files do to
model bytes (bit flips, truncation, duplicated, deleted and reordered slices, lengths and counts made huge or
negative, NaN/inf and deep nesting in text). A ``random.Random`` seeded per execution makes every mutant
reproducible from (target, seed, index)."""

from __future__ import annotations

import random
import re
import struct

#: values that break length and count fields: zero, sign bits, all ones, just past 2^31 and 2^32
INTERESTING_32 = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x10000]
INTERESTING_64 = [2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**40]
_NUMBER = re.compile(rb"-?\d+(\.\d+)?([eE][-+]?\d+)?")
TEXT_VALUES = [b"0", b"-1", b"-5", b"4294967296", b"9223372036854775808", b"1e308", b"nan", b".nan", b".inf",
               b"-.inf", b"NaN", b"Infinity", b"1e-45", b"268435456", b"99999999999999999999999"]


def _flip(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 8)):
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)


def _set_byte(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])


def _set_int(data: bytearray, rng: random.Random) -> None:
    if len(data) <= 8:
        return _flip(data, rng)
    pos = rng.randrange(len(data) - 8)
    if rng.random() < 0.7:
        value = rng.choice(INTERESTING_32)
        data[pos:pos + 4] = struct.pack(rng.choice("<>") + "I", value)
    else:
        data[pos:pos + 8] = struct.pack(rng.choice("<>") + "Q", rng.choice(INTERESTING_64))
    return None


def _varint(data: bytearray, rng: random.Random) -> None:
    """A protobuf-style varint of a huge value written over some bytes (lengths, dims, counts)."""
    pos = rng.randrange(len(data))
    value = rng.choice(INTERESTING_64 + INTERESTING_32)
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            break
    data[pos:pos + len(out)] = out


def _truncate(data: bytearray, rng: random.Random) -> None:
    del data[rng.randrange(len(data)):]


def _duplicate(data: bytearray, rng: random.Random) -> None:
    start = rng.randrange(len(data))
    end = min(len(data), start + rng.randint(1, max(1, len(data) // 8)))
    data[rng.randrange(len(data)):0] = data[start:end]


def _delete(data: bytearray, rng: random.Random) -> None:
    start = rng.randrange(len(data))
    del data[start:start + rng.randint(1, max(1, len(data) // 16))]


def _swap(data: bytearray, rng: random.Random) -> None:
    size = rng.randint(1, max(1, len(data) // 16))
    a, b = sorted(rng.randrange(max(1, len(data) - size)) for _ in range(2))
    if a + size <= b:
        data[a:a + size], data[b:b + size] = data[b:b + size], data[a:a + size]


def _text_number(data: bytearray, rng: random.Random) -> None:
    matches = list(_NUMBER.finditer(bytes(data)))
    if not matches:
        return _flip(data, rng)
    match = rng.choice(matches)
    data[match.start():match.end()] = rng.choice(TEXT_VALUES)
    return None


def _text_line(data: bytearray, rng: random.Random) -> None:
    lines = bytes(data).split(b"\n")
    index = rng.randrange(len(lines))
    action = rng.randrange(3)
    if action == 0:
        lines.insert(rng.randrange(len(lines)), lines[index])
    elif action == 1:
        del lines[index]
    else:
        lines[index] = lines[index][: rng.randrange(len(lines[index]) + 1)]
    data[:] = b"\n".join(lines)


def _text_nest(data: bytearray, rng: random.Random) -> None:
    pos = rng.randrange(len(data) + 1)
    depth = rng.choice([64, 1000, 100000])
    opener, closer = rng.choice([(b"[", b"]"), (b"{\"a\":", b"}"), (b"- ", b""), (b"{", b"}")])
    data[pos:pos] = opener * depth + closer * depth


BINARY = [_flip, _set_byte, _set_int, _varint, _truncate, _duplicate, _delete, _swap]
TEXT = [_text_number, _text_line, _text_nest, _flip, _truncate, _duplicate, _delete]


def mutate(seed_bytes: bytes, rng: random.Random, text: bool = False, rounds: int | None = None) -> bytes:
    """One mutant of ``seed_bytes``: 1–4 mutations drawn from the binary or text set."""
    data = bytearray(seed_bytes or b"\0")
    for _ in range(rounds or rng.randint(1, 4)):
        if not data:
            data = bytearray(b"\0")
        rng.choice(TEXT if text else BINARY)(data, rng)
    return bytes(data)
