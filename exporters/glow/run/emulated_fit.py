"""Whether a bundle fits the emulated board ``pegasus run`` links it for, asked before linking.

A bundle too big for the board (4 MB of flash and 4 MB of RAM on the mps2 boards) used to surface as the
linker's "region `FLASH' overflowed by N bytes" lines and "collect2: error: ld returned 1 exit status". Here
the board's memory is read from its linker script (harness/*.ld: the FLASH and RAM regions, the harness's
STACK_SIZE), the bundle's needs from its header (the three buffers) and its object (code, writable data), and
a bundle that cannot fit gets one line: what it needs, what the board has, and what to try instead. The
harness, startup code and C library take an allowance measured on the boards; the linker keeps the last
word, and an overflow it still finds is reported in the same line (``linker_overflow``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pegasus.errors import PegasusError

# The program's own share beside the bundle, measured on the demo LeNet: harness + startup + newlib + libgcc
# code and data image 14.2 KB (Cortex-M7/M33/M55) to 18.4 KB (Cortex-M0, soft float); newlib's data and bss
# 2.4 KB plus its stdio buffers on the heap. Alignment padding of the buffers (64 bytes each) fits in both.
HARNESS_FLASH = 24 * 1024
HARNESS_RAM = 4 * 1024

_REGION = re.compile(r"^\s*(\w+)\s*\([^)]*\)\s*:\s*ORIGIN\s*=\s*\w+\s*,\s*LENGTH\s*=\s*(\d+)\s*([KM]?)\s*$", re.M)
_STACK = re.compile(r"^\s*STACK_SIZE\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*;", re.M)
_UNITS = {"": 1, "K": 1024, "M": 1024 * 1024}
_OVERFLOW = re.compile(r"region `(\w+)' overflowed by (\d+) bytes|RAM overflow: [^\n]*")


class BoardTooSmallError(PegasusError):
    """The bundle (with the harness) needs more flash or RAM than the emulated board has."""


@dataclass(frozen=True)
class BoardMemory:
    flash: int    # bytes of the FLASH region: code, read-only data, the weights and the inputs
    ram: int      # bytes of the RAM region: the buffers, the C library's data, heap and the stack
    stack: int    # bytes the linker script keeps for the stack


@dataclass(frozen=True)
class Needs:
    name: str
    weights: int        # CONSTANT_MEM_SIZE, linked into flash in place
    code: int           # .text/.rodata of NAME.o (+ the initial values of its writable data)
    inputs: int         # the input bytes linked into flash
    buffers: int        # MUTABLE_MEM_SIZE + ACTIVATIONS_MEM_SIZE + NAME.o's writable data + harness tables

    @property
    def flash(self) -> int:
        return self.weights + self.code + self.inputs + HARNESS_FLASH

    def ram(self, stack: int) -> int:
        return self.buffers + stack + HARNESS_RAM


def board_memory(script: Path) -> BoardMemory:
    """The FLASH and RAM lengths of a board's linker script and the stack of the sections.ld it includes."""
    regions = {name: int(number) * _UNITS[unit] for name, number, unit in _REGION.findall(script.read_text())}
    stack = _STACK.search((script.parent / "sections.ld").read_text())
    if "FLASH" not in regions or "RAM" not in regions or stack is None:
        raise ValueError(f"{script}: no FLASH/RAM region or STACK_SIZE")   # a broken harness, not user input
    return BoardMemory(regions["FLASH"], regions["RAM"], int(stack.group(1), 0))


def _header_size(header: str, name: str, what: str) -> int | None:
    found = re.search(rf"^#define\s+{re.escape(name.upper())}_{what}_MEM_SIZE\s+(\d+)\s*$", header, re.M)
    return int(found.group(1)) if found else None


def bundle_needs(bundle_dir: Path, name: str, input_bytes: int, extra_ram: int = 0) -> Needs | None:
    """What the bundle in ``bundle_dir`` needs on a board; None when its header or object cannot be read (the
    harness's own build then says what is wrong)."""
    from pegasus.exporters.glow.memory.report import object_sizes

    header, obj = Path(bundle_dir) / f"{name}.h", Path(bundle_dir) / f"{name}.o"
    if not header.is_file() or not obj.is_file():
        return None
    text = header.read_text(errors="replace")
    sizes = [_header_size(text, name, what) for what in ("CONSTANT", "MUTABLE", "ACTIVATIONS")]
    if None in sizes:
        return None
    try:
        sections = object_sizes(obj.read_bytes())
    except Exception:   # not an ELF object: the link reports it
        return None
    constant, mutable, activations = sizes
    return Needs(name, constant, sections.code_size + sections.data_image_size, input_bytes + 1,
                 mutable + activations + sections.data_size + extra_ram)


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"


def _fits(needs: Needs, memory: BoardMemory) -> bool:
    return needs.flash <= memory.flash and needs.ram(memory.stack) <= memory.ram


def _alternatives(hints: list[str]) -> str:
    return hints[0] if len(hints) == 1 else ", ".join(hints[:-1]) + f" or {hints[-1]}"


def fit_message(needs: Needs, board, memory: BoardMemory, others: Iterable[tuple[str, object, BoardMemory]],
                host: str, quantized: bool = False, linker: tuple[str, int, int] | None = None) -> str:
    """The one line: the bundle's flash and RAM against the board's, then what to try (``others``: the other
    emulated boards as (cpu, board, memory), suggested where the bundle would fit). ``linker``: (its message,
    bytes over in FLASH, in RAM) when the linker found the overflow: its counts replace the estimates."""
    flash, ram = needs.flash, needs.ram(memory.stack)
    flash_over, ram_over, note = flash > memory.flash, ram > memory.ram, ""
    if linker is not None:
        message, flash_bytes, ram_bytes = linker
        flash = memory.flash + flash_bytes if flash_bytes else flash
        ram = memory.ram + ram_bytes + memory.stack if ram_bytes else ram   # the region holds no stack
        flash_over, ram_over = flash_over or bool(flash_bytes), ram_over or bool(ram_bytes) or "RAM" in message
        note = f" (the linker: {message})"
    hints = [] if quantized else ["--dtype quantized (8-bit weights and activations)"]
    hints += [f"--mcpu {cpu} ({other.machine}: {_megabytes(room.flash)} flash, {_megabytes(room.ram)} RAM)"
              for cpu, other, room in others if other.machine != board.machine and _fits(needs, room)]
    hints.append(f"--target {host} (this machine)")
    return (f"bundle '{needs.name}' does not fit the emulated {board.machine} board ({board.mcpu})"
            f"{note}: flash {flash:,} B needed (weights {needs.weights:,}, code {needs.code:,}, inputs "
            f"{needs.inputs:,}, harness and C library ~{HARNESS_FLASH:,}) {'>' if flash_over else '<='} "
            f"{memory.flash:,} B ({_megabytes(memory.flash)}) on the board; RAM {ram:,} B needed (buffers "
            f"{needs.buffers:,}, the harness's stack {memory.stack:,}, C library ~{HARNESS_RAM:,}) "
            f"{'>' if ram_over else '<='} {memory.ram:,} B ({_megabytes(memory.ram)}); try "
            + _alternatives(hints))


def check_fits(needs: Needs | None, board, memory: BoardMemory, others, host: str, quantized: bool = False) -> None:
    """Raise BoardTooSmallError (one line) when ``needs`` exceed the board's flash or RAM."""
    if needs is not None and not _fits(needs, memory):
        raise BoardTooSmallError(fit_message(needs, board, memory, others, host, quantized))


def linker_overflow(log: str, needs: Needs | None, board, memory: BoardMemory, others,
                    host: str) -> BoardTooSmallError | None:
    """The one-line error for a link that overflowed the board's memory (the allowance fell short), or None
    when ``log`` shows no overflow."""
    found = [match.group(0) for match in _OVERFLOW.finditer(log)]
    if not found:
        return None
    said = "; ".join(dict.fromkeys(found))
    if needs is None:
        return BoardTooSmallError(f"the program for {board.machine} does not fit its memory (the linker: {said}); "
                                  f"try --dtype quantized or --target {host} (this machine)")
    over = {region: int(count) for region, count in _OVERFLOW.findall(log) if region}
    return BoardTooSmallError(fit_message(needs, board, memory, others, host,
                                          linker=(said, over.get("FLASH", 0), over.get("RAM", 0))))
