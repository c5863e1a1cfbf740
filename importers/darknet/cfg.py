"""Read a Darknet ``.cfg`` file: ``[section]`` headers and ``key=value`` options, with line numbers kept.

Parsed as Darknet parses it: whitespace anywhere in a line is dropped, lines starting with ``#`` or ``;`` are
comments (so is the rest of a value after ``#``), section names have their short aliases (``[conv]``,
``[max]``...), and a key given twice keeps its first value. Values are read by the converters through
typed accessors (``section.int("filters", 1)``) that turn a bad value into one error naming the file, the
line, the section and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import require_file

#: Darknet's short section names
ALIASES = {"conv": "convolutional", "network": "net", "max": "maxpool", "avg": "avgpool", "soft": "softmax",
           "conn": "connected", "normalization": "lrn"}


@dataclass
class Option:
    value: str
    line: int


@dataclass
class Section:
    """One ``[kind]`` section: its options, where it starts, and its layer index (-1 for [net])."""

    kind: str
    line: int
    path: str
    index: int = -1
    options: dict[str, Option] = field(default_factory=dict)

    def describe(self) -> str:
        layer = f" (layer {self.index})" if self.index >= 0 else ""
        return f"[{self.kind}]{layer} at line {self.line}"

    def error(self, message: str, key: str | None = None) -> PegasusError:
        """An error about this section (and ``key``), naming the line of the key when it is given."""
        if key is not None and key in self.options:
            return PegasusError(f"line {self.options[key].line}, {self.describe()}: {key} = "
                                f"'{self.options[key].value}' {message}", where=self.path)
        subject = f"{key} " if key is not None else ""
        return PegasusError(f"{self.describe()}: {subject}{message}", where=self.path)

    def has(self, key: str) -> bool:
        return key in self.options

    def text(self, key: str, default: str | None = None) -> str:
        if key in self.options:
            return self.options[key].value
        if default is None:
            raise self.error("is missing", key)
        return default

    def int(self, key: str, default: int | None = None, minimum: int | None = None) -> int:
        value = self.text(key, None if default is None else str(default))
        try:
            number = int(value)
        except ValueError:
            raise self.error("is not an integer", key) from None
        if minimum is not None and number < minimum:
            raise self.error(f"must be at least {minimum}", key)
        return number

    def float(self, key: str, default: float | None = None) -> float:
        value = self.text(key, None if default is None else repr(default))
        try:
            return float(value)
        except ValueError:
            raise self.error("is not a number", key) from None

    def ints(self, key: str, default: list[int] | None = None) -> list[int]:
        if key not in self.options and default is not None:
            return list(default)
        items = [item for item in self.text(key).split(",") if item]
        try:
            return [int(item) for item in items]
        except ValueError:
            raise self.error("is not a comma-separated list of integers", key) from None


def read_cfg(path: str | Path) -> list[Section]:
    """The sections of a cfg file in order; layer sections are numbered from 0 after [net]."""
    path = require_file(path, "Darknet cfg")
    where = str(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise PegasusError("not a Darknet cfg (not text; the .weights file goes to --weights)", where=where) from None
    sections: list[Section] = []
    for number, raw in enumerate(lines, start=1):
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise PegasusError(f"line {number}: '{raw.strip()}' is not a [section] header", where=where)
            kind = line[1:-1].lower()
            sections.append(Section(ALIASES.get(kind, kind), number, where, len(sections) - 1))
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise PegasusError(f"line {number}: '{raw.strip()}' is not key=value", where=where)
        if not sections:
            raise PegasusError(f"line {number}: option '{key}' comes before the first [section]", where=where)
        sections[-1].options.setdefault(key, Option(value.split("#", 1)[0], number))
    if not sections or sections[0].kind != "net":
        raise PegasusError("a Darknet cfg starts with a [net] section", where=where)
    if len(sections) == 1:
        raise PegasusError("no layers after [net]", where=where)
    return sections
