"""The boards and MCUs ``--board`` knows: core, FPU, clock, flash and each on-chip RAM region, so that an
export can say whether a bundle fits before anyone flashes it. Figures are the vendors' (datasheet or
reference manual named per row); flash that is outside the chip (i.MX RT, RP2040/RP2350) is the size on the
vendor's evaluation board, and said so. ``pegasus boards`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from pegasus.errors import PegasusError

KB = 1024


@dataclass(frozen=True)
class Board:
    name: str
    core: str                      # as the vendor names it
    mcpu: str                      # pegasus --mcpu that builds for it
    fpu: str                       # "none", "SP" or "DP" (single/double-precision FPv5/FPv4)
    clock_mhz: int
    flash: int                     # bytes available for code + weights
    flash_note: str                # where that flash is
    ram: tuple[tuple[str, int], ...]   # (region, bytes) of on-chip RAM the application can use
    source: str                    # the document the figures come from

    @property
    def float_abi(self) -> str:
        return "soft" if self.fpu == "none" else "hard"

    @property
    def target(self) -> str:
        return "arm"


def _b(name, core, mcpu, fpu, mhz, flash_kb, flash_note, ram, source) -> Board:
    return Board(name, core, mcpu, fpu, mhz, flash_kb * KB, flash_note,
                 tuple((region, size * KB) for region, size in ram), source)


BOARDS: dict[str, Board] = {board.name.lower(): board for board in (
    _b("iMXRT1010", "Cortex-M7", "cortex-m7", "DP", 500, 16 * KB, "external QSPI (16 MB on MIMXRT1010-EVK)",
       [("FlexRAM (ITCM/DTCM/OCRAM, default DTCM 32 KB + OCRAM 64 KB + ITCM 32 KB)", 128)],
       "NXP i.MX RT1010 Crossover Processors Data Sheet (IMXRT1010CEC); i.MX RT1010 Reference Manual"),
    _b("iMXRT1050", "Cortex-M7", "cortex-m7", "DP", 600, 64 * KB, "external HyperFlash (64 MB on MIMXRT1050-EVKB)",
       [("DTCM (FlexRAM default)", 128), ("OCRAM (FlexRAM default)", 256), ("ITCM (FlexRAM default)", 128)],
       "NXP i.MX RT1050 Crossover Processors Data Sheet (IMXRT1050CEC); i.MX RT1050 Reference Manual"),
    _b("iMXRT1060", "Cortex-M7", "cortex-m7", "DP", 600, 8 * KB, "external QSPI (8 MB on MIMXRT1060-EVK)",
       [("DTCM (FlexRAM default)", 128), ("OCRAM (FlexRAM default)", 256), ("OCRAM2", 512),
        ("ITCM (FlexRAM default)", 128)],
       "NXP i.MX RT1060 Crossover Processors Data Sheet (IMXRT1060CEC); i.MX RT1060 Reference Manual"),
    _b("iMXRT1064", "Cortex-M7", "cortex-m7", "DP", 600, 4 * KB, "in-package flash (4 MB)",
       [("DTCM (FlexRAM default)", 128), ("OCRAM (FlexRAM default)", 256), ("OCRAM2", 512),
        ("ITCM (FlexRAM default)", 128)],
       "NXP i.MX RT1064 Crossover Processors Data Sheet (IMXRT1064CEC); i.MX RT1064 Reference Manual"),
    _b("iMXRT1170", "Cortex-M7 (+ Cortex-M4)", "cortex-m7", "DP", 1000, 16 * KB,
       "external QSPI (16 MB on MIMXRT1170-EVK)",
       [("DTCM (M7 FlexRAM, default)", 256), ("ITCM (M7 FlexRAM, default)", 256), ("OCRAM1", 512),
        ("OCRAM2", 512)],
       "NXP i.MX RT1170 Crossover Processors Data Sheet (IMXRT1170CEC); i.MX RT1170 Reference Manual"),
    _b("iMXRT685", "Cortex-M33 (+ HiFi4 DSP)", "cortex-m33", "SP", 300, 64 * KB,
       "external octal flash (64 MB on MIMXRT685-EVK)",
       [("shared SRAM (M33 side)", 4608)],
       "NXP i.MX RT600 Crossover MCU Data Sheet (IMXRT600CEC); i.MX RT600 User Manual"),
    _b("LPC55S69", "Cortex-M33 (dual)", "cortex-m33", "SP", 150, 640, "on-chip flash",
       [("SRAM0", 64), ("SRAM1", 64), ("SRAM2", 64), ("SRAM3", 64), ("SRAMX", 32), ("SRAM4", 16)],
       "NXP LPC55S6x Data Sheet; UM11126 LPC55S6x/LPC55S2x/LPC552x User Manual"),
    _b("STM32F401", "Cortex-M4", "cortex-m4", "SP", 84, 512, "on-chip flash (STM32F401xE)",
       [("SRAM", 96)],
       "ST DS10086 STM32F401xD/xE datasheet; RM0368 reference manual"),
    _b("STM32F746", "Cortex-M7", "cortex-m7", "SP", 216, 1024, "on-chip flash (STM32F746xG)",
       [("SRAM1", 240), ("DTCM", 64), ("SRAM2", 16), ("ITCM", 16)],
       "ST DS10916 STM32F745xx/STM32F746xx datasheet; RM0385 reference manual"),
    _b("STM32H743", "Cortex-M7", "cortex-m7", "DP", 480, 2048, "on-chip flash (STM32H743xI)",
       [("AXI SRAM", 512), ("DTCM", 128), ("SRAM1", 128), ("SRAM2", 128), ("ITCM", 64), ("SRAM4", 64),
        ("SRAM3", 32)],
       "ST DS12110 STM32H742xI/G STM32H743xI/G datasheet; RM0433 reference manual"),
    _b("STM32H7A3", "Cortex-M7", "cortex-m7", "DP", 280, 2048, "on-chip flash (STM32H7A3xI)",
       [("AXI SRAM1", 256), ("AXI SRAM2", 384), ("AXI SRAM3", 384), ("DTCM", 128), ("ITCM", 64),
        ("AHB SRAM1", 64), ("AHB SRAM2", 64), ("SRD SRAM", 32)],
       "ST DS13195 STM32H7A3xI/G datasheet; RM0455 reference manual"),
    _b("STM32L4R5", "Cortex-M4", "cortex-m4", "SP", 120, 2048, "on-chip flash (STM32L4R5xI)",
       [("SRAM3", 384), ("SRAM1", 192), ("SRAM2", 64)],
       "ST DS12023 STM32L4R5xx/STM32L4R7xx/STM32L4S5xx datasheet; RM0432 reference manual"),
    _b("STM32U585", "Cortex-M33", "cortex-m33", "SP", 160, 2048, "on-chip flash (STM32U585xI)",
       [("SRAM3", 512), ("SRAM1", 192), ("SRAM2", 64), ("SRAM4", 16)],
       "ST DS13086 STM32U585xx datasheet; RM0456 reference manual"),
    _b("nRF52840", "Cortex-M4", "cortex-m4", "SP", 64, 1024, "on-chip flash",
       [("RAM", 256)],
       "Nordic nRF52840 Product Specification v1.7"),
    _b("RP2040", "Cortex-M0+ (dual)", "cortex-m0", "none", 133, 2 * KB, "external QSPI (2 MB on Raspberry Pi Pico)",
       [("SRAM0-3 (striped)", 256), ("SRAM4", 4), ("SRAM5", 4)],
       "Raspberry Pi RP2040 Datasheet"),
    _b("RP2350", "Cortex-M33 (dual)", "cortex-m33", "SP", 150, 4 * KB,
       "external QSPI (4 MB on Raspberry Pi Pico 2)",
       [("SRAM0-7 (striped)", 512), ("SRAM8", 4), ("SRAM9", 4)],
       "Raspberry Pi RP2350 Datasheet"),
    _b("MPS2-AN385", "Cortex-M3 (runs Cortex-M0 code)", "cortex-m0", "none", 25, 4 * KB, "ZBT SSRAM1 (as flash)",
       [("ZBT SSRAM2+3", 4 * KB)],
       "Arm AN385 Cortex-M3 SMM on V2M-MPS2 application note; QEMU hw/arm/mps2.c (qemu -M mps2-an385)"),
    _b("MPS2-AN386", "Cortex-M4", "cortex-m4", "SP", 25, 4 * KB, "ZBT SSRAM1 (as flash)",
       [("ZBT SSRAM2+3", 4 * KB)],
       "Arm AN386 Cortex-M4 SMM on V2M-MPS2 application note; QEMU hw/arm/mps2.c (qemu -M mps2-an386)"),
    _b("MPS2-AN500", "Cortex-M7", "cortex-m7", "DP", 25, 4 * KB, "ZBT SSRAM1 (as flash)",
       [("ZBT SSRAM2+3", 4 * KB)],
       "Arm AN500 Cortex-M7 SMM on V2M-MPS2 application note; QEMU hw/arm/mps2.c (qemu -M mps2-an500)"),
    _b("MPS2-AN505", "Cortex-M33", "cortex-m33", "SP", 20, 4 * KB, "ZBT SSRAM1 (as flash)",
       [("ZBT SSRAM2+3", 4 * KB)],
       "Arm AN505 Cortex-M33 IoT kit on V2M-MPS2 application note; QEMU hw/arm/mps2-tz.c (qemu -M mps2-an505)"),
    _b("MPS3-AN547", "Cortex-M55", "cortex-m55", "DP", 32, 512, "ITCM (as flash)",
       [("DTCM", 512)],
       "Arm AN547 Cortex-M55 SSE-300 on MPS3 application note; QEMU hw/arm/mps2-tz.c (qemu -M mps3-an547)"),
)}


def board_named(name: str) -> Board:
    board = BOARDS.get(name.lower())
    if board is None:
        raise PegasusError(f"unknown --board '{name}' (valid: {', '.join(b.name for b in BOARDS.values())}; "
                           "pegasus boards lists them)")
    return board


def _size(size: int) -> str:
    return f"{size // (KB * KB)} MB" if size % (KB * KB) == 0 else f"{size // KB} KB"


def table() -> str:
    """The boards as text: one line per board, then its RAM regions and source."""
    lines = []
    for board in BOARDS.values():
        lines.append(f"{board.name:<11} {board.core:<32} --mcpu {board.mcpu:<10} FPU {board.fpu:<4} "
                     f"{board.clock_mhz:>4} MHz  flash {_size(board.flash)} ({board.flash_note})")
        lines.append("            RAM: " + ", ".join(f"{region} {_size(size)}" for region, size in board.ram))
        lines.append(f"            source: {board.source}")
    return "\n".join(lines) + "\n"


def apply_board(args) -> Board | None:
    """--board NAME sets --target/--mcpu/--float-abi (refusing contradictory ones); None without --board."""
    if not getattr(args, "board", None):
        return None
    board = board_named(args.board)
    for flag, attribute, value in (("--target", "target", board.target), ("--mcpu", "mcpu", board.mcpu),
                                   ("--float-abi", "float_abi", board.float_abi)):
        given = getattr(args, attribute)
        if given not in (None, value):
            raise PegasusError(f"{flag} {given} contradicts --board {board.name} ({flag} {value})")
        setattr(args, attribute, value)
    return board

