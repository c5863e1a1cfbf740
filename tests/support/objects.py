"""Reading compiled bundle objects: the undefined symbols of an ELF object (what a target must provide)."""

from __future__ import annotations

import io

from elftools.elf.elffile import ELFFile


def undefined_symbols(obj: bytes) -> set[str]:
    symbols = ELFFile(io.BytesIO(obj)).get_section_by_name(".symtab")
    return {s.name for s in symbols.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"}
