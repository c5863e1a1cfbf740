"""The fuzz targets: one per reader of untrusted bytes, registered with ``target``.

A target reads one input (a mutated copy of a corpus item: a file, or a folder of which one file was mutated)
with pegasus's own reader, in-process, writing only into the scratch folder it is given. Modules in this
package register their targets when ``load_all`` imports them."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[Path, Path], None]
    text: bool = False
    #: for a corpus item that is a folder: the glob of the files in it that may be mutated
    mutable: str = "*"
    #: a structure-aware mutator (parse, change one field: a dim, a length, an attribute; serialise), used for
    #: half the mutants; ``fn(data, rng) -> bytes``
    structured: Callable | None = None

    @property
    def corpus(self) -> Path:
        return CORPUS / self.name

    def items(self) -> list[Path]:
        """The corpus items (files or folders), in a stable order."""
        folder = self.corpus
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


TARGETS: dict[str, Target] = {}


def target(name: str, *, text: bool = False, mutable: str = "*", structured: Callable | None = None) -> Callable:
    """Register ``fn(input_path, scratch_dir)`` as the fuzz target ``name``."""
    def register(fn: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
        if name in TARGETS:
            raise ValueError(f"fuzz target {name} registered twice")
        TARGETS[name] = Target(name, fn, text, mutable, structured)
        return fn
    return register


def load_all() -> dict[str, Target]:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return TARGETS
