"""Builds an exported Glow bundle (NAME.o + NAME.h + NAME.weights.bin) into a program with a real toolchain
and runs it: on the host (gcc), on Cortex-A (aarch64-linux-gnu-gcc -static, qemu-aarch64) and bare metal on
Cortex-M (arm-none-eabi-gcc + newlib semihosting, qemu-system-arm on an mps2 board). ``pegasus run`` and the
exporter tests use it to run a bundle the way a user's application calls it: through the header's macros,
with the three memory regions declared statically and the weights in flash.

The program is ``harness/harness.c`` plus a generated ``harness_config.h`` naming the bundle's entry,
region sizes and placeholder offset macros. Bare-metal outputs come back as hex bytes over semihosting, so
float bits survive exactly. Under ``qemu -icount shift=0`` each instruction takes 1 ns of virtual time, so
the SysTick ticks the harness reports around the entry call count instructions (40 per tick at 25 MHz).

The toolchains are installed by ``scripts/install_toolchains.sh`` (``make test`` runs it); a missing tool is
an error (naming the Debian packages to install), never a skip.

The program runs confined (pegasus/sandbox.py, bubblewrap): semihosting with ``target=native`` gives an
emulated program the host's files (SYS_OPEN/SYS_REMOVE/SYS_RENAME) and a shell (SYS_SYSTEM), and QEMU has no
finer switch, so QEMU itself runs with no network, a read-only view of its own binary and libraries (/usr/lib,
no /usr/bin: no shell for SYS_SYSTEM) and of the program, and a private empty tmpfs as its working directory:
whatever the program opens or writes stays there and vanishes with it. Host and qemu-aarch64 programs likewise
see only the system's files read-only, the weights read-only and their own build folder.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.exporters.glow.run import emulated_fit
from pegasus.exporters.glow.target import host_arch
from pegasus.sandbox import sandbox_argv

HARNESS_DIR = Path(__file__).resolve().parent / "harness"
# The Debian packages that provide each tool (the list scripts/install_toolchains.sh installs).
TOOL_PACKAGES = {
    "gcc": "gcc",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-readelf": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
    "qemu-aarch64": "qemu-user",
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
}
EMBED_ALIGN = 64      # NAME_MEM_ALIGN: alignment of the weights linked into flash
QEMU_TIMEOUT = 300    # seconds; a hung board (bad boot address, fault loop) must not hang the tests
# Not -nographic: it makes QEMU's stdout non-blocking, and semihosting output beyond the pipe's 64 KB is
# silently dropped whenever the reader lags. With no stdio chardev the writes block and nothing is lost.
QEMU_QUIET = ("-display", "none", "-serial", "none", "-monitor", "none",
              "-semihosting-config", "enable=on,target=native")

OutputSpec = Mapping[str, tuple[tuple[int, ...], object]]   # placeholder -> (shape, dtype)


class ToolchainError(PegasusError):
    """A toolchain is missing, or building or running the harness failed (the message has the log)."""


class MissingToolError(ToolchainError):
    """A compiler or emulator is not on PATH (``tool`` names it); the tests skip on it with the install hint."""

    def __init__(self, message: str, tool: str = ""):
        super().__init__(message)
        self.tool = tool


@dataclass(frozen=True)
class Board:
    """The QEMU board that runs a Cortex-M CPU's code, and how to compile for that CPU."""
    machine: str
    linker_script: str
    mcpu: str
    fpu: str | None       # None: no FPU (soft float only)
    clock_hz: int         # SysTick processor clock: instructions per tick = 1e9 / clock_hz under -icount 0

    @property
    def instructions_per_tick(self) -> int:
        return 1_000_000_000 // self.clock_hz

    def instructions(self, ticks: int) -> int:
        """Instructions in ``ticks`` SysTick ticks under -icount shift=0 (1 ns each; 31.25 per tick at 32 MHz)."""
        return ticks * 1_000_000_000 // self.clock_hz


BOARDS: dict[str, Board] = {
    "cortex-m0": Board("mps2-an385", "mps2.ld", "cortex-m0", None, 25_000_000),   # an385 is an M3: runs v6-M
    "cortex-m4": Board("mps2-an386", "mps2.ld", "cortex-m4", "fpv4-sp-d16", 25_000_000),
    "cortex-m7": Board("mps2-an500", "mps2.ld", "cortex-m7", "fpv5-d16", 25_000_000),
    "cortex-m33": Board("mps2-an505", "mps2_an505.ld", "cortex-m33", "fpv5-sp-d16", 20_000_000),
    "cortex-m55": Board("mps3-an547", "mps3_an547.ld", "cortex-m55", "auto", 32_000_000),
}


@dataclass
class BareMetalRun:
    outputs: dict[str, np.ndarray]
    ticks: int            # SysTick ticks spent in the entry call
    stdout: str
    stack: int = 0        # bytes of stack the entry call used (painted and scanned; 64 at least)
    probes: tuple[int, ...] = ()   # --profile: SysTick count at each probe (before each layer, after the last)
    calibration: int = 0           # ticks of PROBE_CALIBRATION_CALLS probe calls in a row


# ---------------------------------------------------------------------------------------------- tools

def require_tool(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        packages = TOOL_PACKAGES.get(tool, tool)
        raise MissingToolError(f"{tool} not found: install the Debian package(s) {packages} "
                               "(apt-get install, or run scripts/install_toolchains.sh)", tool)
    return path


def _run(command: list[str], what: str, timeout: float = QEMU_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        raise ToolchainError(f"{what} timed out after {timeout} s: {' '.join(command)}\n{error.stdout or ''}") \
            from error
    if proc.returncode != 0:
        raise ToolchainError(f"{what} failed (exit {proc.returncode}): {' '.join(command)}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def _confined(command: list[str], read_only: list, writable: list = (), system: bool = True) -> list[str]:
    """``command`` run in the sandbox: ``read_only`` and ``writable`` paths visible, the rest of the host not
    (``system``: all of /usr, for a dynamically linked host program)."""
    return sandbox_argv(command, read_only=read_only, writable=writable, system=system,
                        what="running a bundle's program")


def _qemu_system_confined(command: list[str], program: Path) -> list[str]:
    """QEMU (system mode, semihosting) seeing its binary, its libraries and ROMs and the program, read-only."""
    system_files = [p for p in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32", "/usr/share/qemu")
                    if Path(p).is_dir()]
    return _confined(command, [*system_files, command[0], str(program)], system=False)


# ------------------------------------------------------------------------------------ harness sources

def placeholder_macro(name: str, placeholder: str) -> str:
    """The header's offset macro of a placeholder: upper-cased bundle name + legalised placeholder name."""
    return f"{name.upper()}_{re.sub(r'[^0-9A-Za-z_]', '_', placeholder)}"


def _output_sizes(outputs: OutputSpec) -> dict[str, int]:
    return {key: int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            for key, (shape, dtype) in outputs.items()}


def _input_blob(inputs: Mapping[str, np.ndarray]) -> bytes:
    return b"".join(np.ascontiguousarray(array).tobytes() for array in inputs.values())


def write_config(folder: Path, name: str, inputs: Mapping[str, np.ndarray], outputs: OutputSpec,
                 probes: int = 0, extra: str = "") -> None:
    """harness_config.h: includes NAME.h and names the entry, region sizes and placeholders."""
    prefix = name.upper()
    input_slots = " ".join(f"X({placeholder_macro(name, key)}, {np.asarray(array).nbytes}u)"
                           for key, array in inputs.items())
    output_slots = " ".join(f"X({placeholder_macro(name, key)}, {size}u)"
                            for key, size in _output_sizes(outputs).items())
    (folder / "harness_config.h").write_text(
        f'/* Generated by pegasus/exporters/glow/run/toolchains.py for bundle "{name}". */\n'
        f'#include "{name}.h"\n'
        f"#define HARNESS_ENTRY {name}\n"
        f"#define HARNESS_CONSTANT_SIZE {prefix}_CONSTANT_MEM_SIZE\n"
        f"#define HARNESS_MUTABLE_SIZE {prefix}_MUTABLE_MEM_SIZE\n"
        f"#define HARNESS_ACTIVATIONS_SIZE {prefix}_ACTIVATIONS_MEM_SIZE\n"
        f"#define HARNESS_MEM_ALIGN {prefix}_MEM_ALIGN\n"
        f"#define HARNESS_INPUTS(X) {input_slots}\n"
        f"#define HARNESS_OUTPUTS(X) {output_slots}\n"
        + (f"#define HARNESS_PROBES {probes}\n" if probes else "") + extra)


def _gas_string(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_embedded_data(folder: Path, weights: Path, inputs_bin: Path) -> Path:
    """An assembler file that links the weights (in place, read-only) and the input bytes into flash."""
    source = folder / "harness_data.s"
    source.write_text(
        f'\t.section .rodata.harness_weights,"a",%progbits\n\t.balign {EMBED_ALIGN}\n'
        "\t.global harness_weights\n\t.global harness_weights_end\n"
        f"harness_weights:\n\t.incbin {_gas_string(weights)}\nharness_weights_end:\n"
        f'\t.section .rodata.harness_inputs,"a",%progbits\n\t.balign {EMBED_ALIGN}\n'
        f"\t.global harness_inputs\nharness_inputs:\n\t.incbin {_gas_string(inputs_bin)}\n\t.byte 0\n")
    return source


def _split_outputs(blob: bytes, outputs: OutputSpec) -> dict[str, np.ndarray]:
    result, position = {}, 0
    for key, size in _output_sizes(outputs).items():
        shape, dtype = outputs[key]
        chunk = blob[position:position + size]
        if len(chunk) != size:
            raise ToolchainError(f"output '{key}': got {len(chunk)} bytes, expected {size}")
        result[key] = np.frombuffer(chunk, dtype=dtype).reshape(shape).copy()
        position += size
    return result


# ------------------------------------------------------------------------------------ hosted programs

def build_folder(keep: Path | None, prefix: str) -> contextlib.AbstractContextManager:
    """A context giving the folder to build in: ``keep`` (created, left in place) or a temporary one."""
    if keep is None:
        return tempfile.TemporaryDirectory(prefix=prefix)
    Path(keep).mkdir(parents=True, exist_ok=True)
    return contextlib.nullcontext(str(keep))


def _run_hosted(bundle_dir: Path, name: str, inputs: Mapping[str, np.ndarray], outputs: OutputSpec,
                compiler: list[str], launcher: list[str], keep: Path | None = None) -> dict[str, np.ndarray]:
    bundle_dir = Path(bundle_dir)
    with build_folder(keep, "pegasus-harness-") as tmp:
        folder = Path(tmp)
        write_config(folder, name, inputs, outputs)
        program = folder / "harness"
        _run([*compiler, "-O2", "-std=c11", "-Wall", "-Werror", f"-I{folder}", f"-I{bundle_dir}",
              str(HARNESS_DIR / "harness.c"), str(bundle_dir / f"{name}.o"), "-o", str(program)], "linking")
        (folder / "inputs.bin").write_bytes(_input_blob(inputs))
        weights = bundle_dir / f"{name}.weights.bin"
        _run(_confined([*launcher, str(program), str(weights), str(folder / "inputs.bin"), str(folder / "outputs.bin")],
                       [*launcher, str(weights)], [str(folder.resolve())]), "running the harness")
        return _split_outputs((folder / "outputs.bin").read_bytes(), outputs)


def run_host(bundle_dir: Path, name: str, inputs: Mapping[str, np.ndarray],
             outputs: OutputSpec, keep: Path | None = None) -> dict[str, np.ndarray]:
    """Link the bundle with the host gcc (-O2, gcc's default program kind: PIE on Debian; host bundles are PIC)
    and run it once."""
    return _run_hosted(bundle_dir, name, inputs, outputs, [require_tool("gcc")], [], keep)


def run_aarch64(bundle_dir: Path, name: str, inputs: Mapping[str, np.ndarray],
                outputs: OutputSpec, keep: Path | None = None) -> dict[str, np.ndarray]:
    """Cross-link the bundle statically for aarch64 Linux and run it under qemu-aarch64 (user mode)."""
    return _run_hosted(bundle_dir, name, inputs, outputs, [require_tool("aarch64-linux-gnu-gcc"), "-static"],
                       [require_tool("qemu-aarch64")], keep)


# ------------------------------------------------------------------------------------------ Cortex-M

def board_for(cpu: str) -> Board:
    if cpu not in BOARDS:
        raise ToolchainError(f"no QEMU board for '{cpu}' (have: {', '.join(BOARDS)})")
    return BOARDS[cpu]


def board_memory(board: Board) -> emulated_fit.BoardMemory:
    """The flash, RAM and stack the board's linker script gives the program."""
    return emulated_fit.board_memory(HARNESS_DIR / board.linker_script)


def _other_boards() -> list[tuple[str, Board, emulated_fit.BoardMemory]]:
    return [(cpu, board, board_memory(board)) for cpu, board in BOARDS.items()]


def check_board_fit(bundle_dir: Path, name: str, cpu: str, input_bytes: int, *, extra_ram: int = 0,
                    quantized: bool = False) -> emulated_fit.Needs | None:
    """Refuse, before linking, a bundle that cannot fit the board of ``cpu`` (one line: its needs, the board's
    memory, what to try; ``quantized``: the bundle is already quantized, so that is not suggested)."""
    board = board_for(cpu)
    needs = emulated_fit.bundle_needs(Path(bundle_dir), name, input_bytes, extra_ram)
    emulated_fit.check_fits(needs, board, board_memory(board), _other_boards(), host_arch(), quantized)
    return needs


def object_uses_hard_float(obj: Path) -> bool:
    """Whether an ARM object passes floats in VFP registers (EABI attribute Tag_ABI_VFP_args)."""
    attributes = _run([require_tool("arm-none-eabi-readelf"), "-A", str(obj)], "reading ARM attributes").stdout
    return "Tag_ABI_VFP_args: VFP registers" in attributes


def float_flags(board: Board, hard: bool) -> list[str]:
    """gcc flags matching the object's float ABI; soft-ABI objects for FPU cores may still use the FPU."""
    if board.fpu is None:
        if hard:
            raise ToolchainError(f"{board.mcpu} has no FPU but the object uses the hard-float ABI")
        return ["-mfloat-abi=soft"]
    return [f"-mfloat-abi={'hard' if hard else 'softfp'}", f"-mfpu={board.fpu}"]


def build_cortex_m(bundle_dir: Path, name: str, cpu: str, inputs: Mapping[str, np.ndarray],
                   outputs: OutputSpec, folder: Path, probes: int = 0, extra: str = "") -> Path:
    """Link startup + harness + embedded weights/inputs + NAME.o into folder/prog.elf for the CPU's board."""
    bundle_dir = Path(bundle_dir)
    board = board_for(cpu)
    obj = bundle_dir / f"{name}.o"
    blob = _input_blob(inputs)
    needs = check_board_fit(bundle_dir, name, cpu, len(blob), extra_ram=8 * (probes + 1) if probes else 0)
    write_config(folder, name, inputs, outputs, probes, extra)
    (folder / "inputs.bin").write_bytes(blob)
    data = write_embedded_data(folder, bundle_dir / f"{name}.weights.bin", folder / "inputs.bin")
    program = folder / "prog.elf"
    try:
        _run([require_tool("arm-none-eabi-gcc"), f"-mcpu={board.mcpu}", "-mthumb",
              *float_flags(board, object_uses_hard_float(obj)), "-O2", "-std=c11", "-Wall", "-Werror",
              "-DHARNESS_BARE_METAL", "--specs=rdimon.specs", "-nostartfiles", f"-L{HARNESS_DIR}",
              f"-T{board.linker_script}", f"-I{folder}", f"-I{bundle_dir}", str(HARNESS_DIR / "startup.c"),
              str(HARNESS_DIR / "harness.c"), str(data), str(obj), "-o", str(program)], f"linking for {cpu}")
    except ToolchainError as error:   # the allowance for the harness fell short: still one line with the figures
        overflow = emulated_fit.linker_overflow(str(error), needs, board, board_memory(board), _other_boards(),
                                                host_arch())
        if overflow is None:
            raise
        raise overflow from None
    return program


def parse_semihosting(stdout: str, outputs: OutputSpec) -> tuple[dict[str, np.ndarray], int]:
    """Read the harness's '@out'/'@ticks' report back into arrays (exact bytes) and a tick count."""
    chunks: list[list[str]] = []
    ticks = None
    for line in stdout.splitlines():
        if line.startswith(("@error", "@fault")):
            raise ToolchainError(f"the harness reported: {line}\n{stdout}")
        if line.startswith("@out "):
            chunks.append([])
        elif line.startswith("@ticks "):
            ticks = int(line.split()[1], 16)
        elif chunks and re.fullmatch(r"[0-9a-f]+", line.strip()):
            chunks[-1].append(line.strip())
    if ticks is None or len(chunks) != len(outputs):
        raise ToolchainError(f"incomplete report from the board ({len(chunks)} of {len(outputs)} outputs):\n"
                             f"{stdout}")
    return _split_outputs(b"".join(bytes.fromhex("".join(chunk)) for chunk in chunks), outputs), ticks


def run_qemu_system(program: Path, board: Board, *, icount: bool = False,
                    timeout: float = QEMU_TIMEOUT) -> subprocess.CompletedProcess:
    """Run a bare-metal ELF on ``board`` under qemu-system-arm with semihosting, confined (see the module's
    docstring): its semihosting files live in a private scratch folder, SYS_SYSTEM finds no shell."""
    command = [require_tool("qemu-system-arm"), "-M", board.machine, *QEMU_QUIET, "-kernel", str(program)]
    if icount:
        command += ["-icount", "shift=0"]
    return _run(_qemu_system_confined(command, program), f"running on {board.machine}", timeout)


def run_cortex_m_detailed(bundle_dir: Path, name: str, cpu: str, inputs: Mapping[str, np.ndarray],
                          outputs: OutputSpec, *, icount: bool = False,
                          timeout: float = QEMU_TIMEOUT, keep: Path | None = None,
                          probes: int = 0, extra: str = "") -> BareMetalRun:
    """``probes``: the bundle calls pegasus_probe that many times (--profile); ``extra``: more harness_config.h
    lines (the layer dumps of --compare-layers). Builds for the CPU's board (in ``keep`` when given) and runs
    under qemu-system-arm with semihosting."""
    board = board_for(cpu)
    require_tool("qemu-system-arm")
    with build_folder(keep, "pegasus-cortex-m-") as tmp:
        program = build_cortex_m(bundle_dir, name, cpu, inputs, outputs, Path(tmp), probes, extra)
        proc = run_qemu_system(program, board, icount=icount, timeout=timeout)
    parsed, ticks = parse_semihosting(proc.stdout, outputs)
    stack = re.search(r"^@stack ([0-9a-f]+)$", proc.stdout, re.M)
    probe_ticks = tuple(int(value, 16) for value in re.findall(r"^@probe ([0-9a-f]+)$", proc.stdout, re.M))
    calibration = re.search(r"^@calibration ([0-9a-f]+)$", proc.stdout, re.M)
    if len(probe_ticks) != probes:
        raise ToolchainError(f"expected {probes} probe readings, got {len(probe_ticks)}:\n{proc.stdout}")
    return BareMetalRun(parsed, ticks, proc.stdout, int(stack.group(1), 16) if stack else 0, probe_ticks,
                        int(calibration.group(1), 16) if calibration else 0)


def run_cortex_m(bundle_dir: Path, name: str, cpu: str, inputs: Mapping[str, np.ndarray],
                 outputs: OutputSpec) -> dict[str, np.ndarray]:
    """Run the bundle once bare metal on the board of ``cpu`` (cortex-m0/m4/m7/m33); return its outputs."""
    return run_cortex_m_detailed(bundle_dir, name, cpu, inputs, outputs).outputs


def count_instructions_cortex_m(bundle_dir: Path, name: str, cpu: str, inputs: Mapping[str, np.ndarray],
                                outputs: OutputSpec | None = None) -> int:
    """Instructions executed by one call of the entry, to the SysTick resolution (40 on an385/386/500).

    Deterministic: QEMU's -icount shift=0 advances virtual time 1 ns per instruction, and SysTick counts
    that virtual time at the board's processor clock.
    """
    run = run_cortex_m_detailed(bundle_dir, name, cpu, inputs, outputs or {}, icount=True)
    return board_for(cpu).instructions(run.ticks)
