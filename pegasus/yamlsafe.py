"""The one way pegasus reads YAML a user hands it (.quantize tables, input meta, batch manifests, Glow profiles).

ruamel.yaml shares an aliased node between every place that names it, but whatever walks the loaded document
(a manifest's option list turned into a command line, the comment-keeping rewrite of a .quantize) sees each
use separately: a few hundred bytes of nested ``&a [*b, *b, ...]`` become gigabytes (the "billion laughs").
None of pegasus's files needs an alias, so the composer refuses the first anchor or alias it meets, and any
tag beyond YAML's plain core types (``!!python/object/apply:...`` would construct nothing in round-trip mode,
but a refused tag is one clear line instead of a value of a strange type further on). Nesting is bounded too
(ruamel composes recursively), and so is the file's size.

Round-trip mode (comments and key order kept) stays where pegasus rewrites a user's file; ``safe`` mode reads
plain data. Both use the pure-Python parser, since libyaml's C parser would bypass the composer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent

from pegasus.errors import PegasusError
from pegasus.fileio import require_file

#: a YAML file pegasus reads is a few MB at most (per-channel tables of a large model); this bounds the parse
MAX_YAML_BYTES = 64 * 2**20
#: nesting depth: pegasus's files nest 6 levels; ruamel composes recursively
MAX_DEPTH = 64
#: the only explicit tags accepted (``!!str 007`` and the like): YAML's core schema
CORE_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq",
                                                                  "map"))


class YamlRefused(YAMLError):
    """An anchor, alias or tag the composer will not build (raised with the place it stands)."""

    def __init__(self, mark: Any, problem: str):
        super().__init__(problem)
        self.problem_mark, self.problem = mark, problem


class _PlainComposer(Composer):
    """ruamel's composer, refusing anchors, aliases and non-core tags before they make a node."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        if isinstance(event, AliasEvent):
            raise YamlRefused(event.start_mark, f"YAML aliases (*{event.anchor}) are not accepted")
        if getattr(event, "anchor", None) is not None:
            raise YamlRefused(event.start_mark, f"YAML anchors (&{event.anchor}) are not accepted")
        if isinstance(event, (ScalarEvent, CollectionStartEvent)):
            tag = event.tag
            if tag is not None and tag != "!" and tag not in CORE_TAGS:
                raise YamlRefused(event.start_mark, f"YAML tag {_short(tag)} is not accepted")
        return super().compose_node(parent, index)


def _short(tag: str) -> str:
    text = tag.replace("tag:yaml.org,2002:", "!!")
    return text if len(text) <= 80 else text[:77] + "..."


def make_yaml(round_trip: bool = True) -> YAML:
    """A ruamel.yaml instance with the refusing composer (round trip: comments and key order kept)."""
    yaml = YAML(typ="rt" if round_trip else "safe", pure=True)
    yaml.Composer = _PlainComposer
    yaml.max_depth = MAX_DEPTH
    yaml.representer.ignore_aliases = lambda data: True  # what pegasus writes it must be able to read back
    if round_trip:
        yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def parse(text: str, where: str, yaml: YAML | None = None) -> Any:
    """The document in ``text``; any YAML problem is a PegasusError 'WHERE: line N: problem'."""
    yaml = yaml or make_yaml()
    try:
        return yaml.load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) if isinstance(exc, (MarkedYAMLError, YamlRefused)) else None
        problem = problem or (str(exc).strip().splitlines() or ["not valid YAML"])[0]
        prefix = "" if isinstance(exc, YamlRefused) else "YAML syntax error: "
        if isinstance(exc, MaxDepthExceededError):
            prefix, problem = "", f"YAML nested more than {MAX_DEPTH} levels deep"
        raise PegasusError(f"{line}{prefix}{problem}"[:300], where=where) from None
    except RecursionError:
        raise PegasusError(f"YAML nested more than {MAX_DEPTH} levels deep", where=where) from None


def read_text(path: str | os.PathLike, what: str = "YAML file") -> str:
    """The text of a YAML file pegasus was given, refused when it is not a text file or too large to be one."""
    path = require_file(path, what)
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise PegasusError(f"{what} is {size:,} bytes; pegasus reads YAML files up to {MAX_YAML_BYTES:,}",
                           where=str(path))
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise PegasusError(f"{what} is not a text file", where=str(path)) from None
    except OSError as exc:
        raise PegasusError(f"cannot read {what}: {exc.strerror}", where=str(path)) from None


def load(path: str | os.PathLike, what: str = "YAML file", round_trip: bool = True) -> Any:
    """Read and parse the YAML file at ``path`` (round trip by default, plain data with ``round_trip=False``)."""
    return parse(read_text(path, what), str(Path(path)), make_yaml(round_trip))
