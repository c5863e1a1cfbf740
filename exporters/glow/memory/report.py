"""NAME.memory.txt/.json: how much Flash and RAM a bundle needs, as NXP's AN13001 tabulates it.

Rows: weights (CONSTANT_MEM_SIZE), input/output (MUTABLE_MEM_SIZE), activations
(ACTIVATIONS_MEM_SIZE, which holds the kernels' scratch too) and code — the ``.text*``, ``.rodata*`` and
``.data.rel.ro*`` (tables of addresses in position-independent code, read-only once relocated) sections of
NAME.o, read with pyelftools. Totals for weights kept in Flash (a ``const`` array) and
weights copied to RAM:
Flash = code + weights both ways; RAM = input/output + activations (+ weights when copied).
Writable sections of the object (normally none: a bundle has no global state) count in RAM, and the
initialised ones in Flash too; other allocated sections (unwind tables) are listed but not counted.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from pegasus.exporters.glow.memory.plan import MemoryPlan

CODE_PREFIXES = (".text", ".rodata", ".data.rel.ro")


@dataclass
class ObjectSizes:
    """Allocated section sizes of an object by section name, in three groups."""

    code: dict[str, int]     # .text*, .rodata*, .data.rel.ro*: Flash
    data: dict[str, int]     # writable: RAM (and Flash for the initial values of .data)
    other: dict[str, int]    # everything else that would be loaded (unwind tables): not counted

    @property
    def code_size(self) -> int:
        return sum(self.code.values())

    @property
    def data_size(self) -> int:
        return sum(self.data.values())

    @property
    def data_image_size(self) -> int:
        """Bytes of initial values of writable data kept in Flash (zero-filled .bss needs none)."""
        return sum(size for name, size in self.data.items() if not name.startswith((".bss", ".tbss")))


def object_sizes(object_bytes: bytes) -> ObjectSizes:
    sizes = ObjectSizes({}, {}, {})
    for section in ELFFile(io.BytesIO(object_bytes)).iter_sections():
        flags, name = section["sh_flags"], section.name
        if not flags & SH_FLAGS.SHF_ALLOC or not section["sh_size"]:
            continue
        if name.startswith(CODE_PREFIXES):
            group = sizes.code
        elif flags & SH_FLAGS.SHF_WRITE:
            group = sizes.data
        else:
            group = sizes.other
        group[name] = group.get(name, 0) + section["sh_size"]
    return sizes


def _totals(plan: MemoryPlan, sizes: ObjectSizes) -> dict[str, dict[str, int]]:
    flash = sizes.code_size + sizes.data_image_size + plan.constant_size
    ram = plan.mutable_size + plan.activations_size + sizes.data_size
    return {"weights_in_flash": {"flash": flash, "ram": ram},
            "weights_in_ram": {"flash": flash, "ram": ram + plan.constant_size}}


def _listing(sections: dict[str, int]) -> str:
    return ", ".join(f"{name} {size:,}" for name, size in sorted(sections.items())) or "none"


def _table(rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    """Rows as text columns as wide as their widest cell (columns in ``right`` right-aligned), two spaces apart."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(width) if column in right else cell.ljust(width)
                             for column, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]


def _text(name: str, plan: MemoryPlan, sizes: ObjectSizes, totals: dict[str, dict[str, int]]) -> str:
    mutable = "Input/Output + activations" if plan.reuses_inputs else "Input/Output"
    rows = [("Weights", "CONSTANT_MEM_SIZE", plan.constant_size, "Flash, or RAM when copied there"),
            (mutable, "MUTABLE_MEM_SIZE", plan.mutable_size, "RAM"),
            ("Activations", "ACTIVATIONS_MEM_SIZE", plan.activations_size, "RAM"),
            ("Code", f".text + .rodata of {name}.o", sizes.code_size, "Flash")]
    if sizes.data:
        rows.append(("Data", f"writable sections of {name}.o", sizes.data_size, "RAM (+ initial values in Flash)"))
    lines = [f'Memory report of bundle "{name}" (bytes)', ""]
    lines += _table([(kind, source, f"{size:,}", where) for kind, source, size, where in rows], right={2})
    lines += [""]
    lines += _table([("", "Flash", "RAM")] + [(label, f"{totals[key]['flash']:,}", f"{totals[key]['ram']:,}")
                                             for label, key in (("Weights in Flash", "weights_in_flash"),
                                                                ("Weights in RAM", "weights_in_ram"))], right={1, 2})
    lines += [
        "",
        "Flash = code + weights; RAM = input/output + activations, plus the weights when they are copied to RAM",
        "(weights in Flash: declare the constantWeight array const). The three buffers are the header's",
        "*_MEM_SIZE values, each allocated 64-byte aligned.",
        f"Code counts these sections of {name}.o: {_listing(sizes.code)}.",
        *(["--reuse-input-memory: every tensor lives in the mutable buffer and the inference OVERWRITES the "
           "inputs (write them again before each call)."] if plan.reuses_inputs else []),
        _workspace_line(plan),
        "Not counted: the application around the bundle (startup, C library, stack, I/O), alignment padding",
        f"added by the linker, and other sections of {name}.o: {_listing(sizes.other)}.",
    ]
    return "\n".join(lines) + "\n"


def _workspace_line(plan: MemoryPlan) -> str:
    """Where kernel scratch went: inside the activations (the stack holds registers only)."""
    workspaces = plan.workspaces()
    if not workspaces:
        return "Kernel scratch: none (the layers keep their state in registers)."
    layer, size = max(workspaces.items(), key=lambda item: item[1])
    where = "the mutable buffer" if plan.reuses_inputs else "the activations"
    return (f"Kernel scratch of {len(workspaces)} layers is planned inside {where}, the largest "
            f"{size:,} bytes ({layer}).")


def memory_report(name: str, plan: MemoryPlan, object_bytes: bytes) -> tuple[str, str]:
    """The AN13001 memory table of bundle ``name`` as (text, JSON text)."""
    sizes = object_sizes(object_bytes)
    totals = _totals(plan, sizes)
    report = {
        "bundle": name, "unit": "bytes",
        "weights": plan.constant_size, "input_output": plan.mutable_size, "activations": plan.activations_size,
        "code": sizes.code_size, "code_sections": dict(sorted(sizes.code.items())),
        "data": sizes.data_size, "data_sections": dict(sorted(sizes.data.items())),
        "not_counted_sections": dict(sorted(sizes.other.items())),
        "kernel_workspaces": plan.workspaces(), "inputs_overwritten": plan.reuses_inputs,
        **totals,
    }
    return _text(name, plan, sizes, totals), json.dumps(report, indent=2) + "\n"


# ------------------------------------------------------------------------------------------ board fit

STACK_ESTIMATE = 2048   # bytes assumed for the bundle call's stack when it was not measured (pegasus run does)


def _kb(size: int) -> str:
    return f"{size / 1024:,.1f} KB"


def _place(items: list[tuple[str, int]], regions: tuple[tuple[str, int], ...]) -> dict[str, str] | None:
    """First-fit decreasing of the RAM items into the regions: item -> region, or None when they do not fit."""
    free = dict(regions)
    placed = {}
    for item, size in sorted(items, key=lambda pair: -pair[1]):
        region = next((name for name, room in sorted(free.items(), key=lambda pair: -pair[1]) if room >= size), None)
        if region is None:
            return None
        free[region] -= size
        placed[item] = region
    return placed


def board_fit(board, report: dict, stack: int | None) -> str:
    """Whether a bundle (its memory.json ``report``) fits ``board`` (pegasus.boards.Board): the fit section
    as text, or a PegasusError saying what does not fit. ``stack`` None: an estimate is used and said."""
    from pegasus.errors import PegasusError

    stack_size = STACK_ESTIMATE if stack is None else stack
    stack_label = "measured" if stack is not None else "estimated; pegasus run measures it"
    flash = report["weights_in_flash"]["flash"]
    items = [("activations", report["activations"]), ("input/output", report["input_output"]),
             ("stack", stack_size)]
    if report.get("data"):
        items.append(("data", report["data"]))
    ram = sum(size for _, size in items)
    largest_name, largest = max(board.ram, key=lambda pair: pair[1])
    if flash > board.flash:
        raise PegasusError(f"needs {_kb(flash)} of flash (code + weights), {board.name} has "
                           f"{_kb(board.flash)} ({board.flash_note}); try --dtype quantized")
    lines = [f"Fit on {board.name} ({board.core}, {board.clock_mhz} MHz):",
             f"  flash: {flash:,} of {board.flash:,} bytes ({board.flash_note}), headroom "
             f"{board.flash - flash:,} bytes ({100 * (board.flash - flash) / board.flash:.1f}%)"]
    need = f"RAM: activations + input/output + stack {stack_size:,} ({stack_label}) = {ram:,} bytes"
    if ram <= largest:
        lines.append(f"  {need} in {largest_name} ({largest:,} bytes), headroom {largest - ram:,} bytes "
                     f"({100 * (largest - ram) / largest:.1f}%)")
    else:
        placed = _place(items, board.ram)
        if placed is None:
            raise PegasusError(f"needs {_kb(ram)} of RAM, the largest region of {board.name} has {_kb(largest)} "
                               f"({largest_name}) and the buffers cannot be split across its regions; try "
                               "--dtype quantized or --quantized-io")
        used = dict(board.ram)
        total = sum(used[region] for region in set(placed.values()))
        lines.append(f"  {need}, split across regions: "
                     + ", ".join(f"{item} in {region}" for item, region in placed.items())
                     + f"; headroom {total - ram:,} bytes ({100 * (total - ram) / total:.1f}%) of those regions")
    lines.append(f"  (figures from {board.source})")
    return "\n".join(lines) + "\n"
