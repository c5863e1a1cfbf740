"""Which CPU a bundle is compiled for: the LLVM triple, CPU name and float ABI of each supported target.

The float ABI is decided by the triple's environment (``eabihf`` = hard, ``eabi`` = soft); it must be
the 4-part form (``thumbv7em-unknown-none-eabihf``), which is what links with ``arm-none-eabi-gcc
-mfloat-abi=hard`` (see DESIGN.md).

The relocation model defaults by where the bundle goes: position-independent code for hosted targets
(x86-64, i386, AArch64 Linux), where compilers build PIE programs by default and PIC links into those,
into non-PIE programs and into shared libraries alike; absolute addresses (``static``) for bare-metal
Cortex-M firmware, linked at fixed addresses.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import llvmlite.binding as llvm

from pegasus.errors import PegasusError

ARCHES = ("x86_64", "i386", "arm", "aarch64")


@dataclass(frozen=True)
class CpuInfo:
    arch: str
    triple_hard: str | None   # None: the CPU has no FPU (soft float only)
    triple_soft: str
    features: str = ""
    has_dsp: bool = False


CPUS: dict[str, CpuInfo] = {
    "cortex-m0": CpuInfo("arm", None, "thumbv6m-unknown-none-eabi"),
    "cortex-m4": CpuInfo("arm", "thumbv7em-unknown-none-eabihf", "thumbv7em-unknown-none-eabi", has_dsp=True),
    "cortex-m7": CpuInfo("arm", "thumbv7em-unknown-none-eabihf", "thumbv7em-unknown-none-eabi", has_dsp=True),
    "cortex-m33": CpuInfo("arm", "thumbv8m.main-unknown-none-eabihf", "thumbv8m.main-unknown-none-eabi",
                          has_dsp=True),
    "cortex-m55": CpuInfo("arm", "thumbv8.1m.main-unknown-none-eabihf", "thumbv8.1m.main-unknown-none-eabi",
                          has_dsp=True),
    "cortex-a53": CpuInfo("aarch64", "aarch64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"),
    "cortex-a72": CpuInfo("aarch64", "aarch64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"),
}
DEFAULT_CPU = {"arm": "cortex-m7", "aarch64": "cortex-a53"}
HOST_TRIPLES = {"x86_64": "x86_64-unknown-linux-gnu", "i386": "i386-unknown-linux-gnu"}


@dataclass(frozen=True)
class Target:
    arch: str
    cpu: str          # LLVM CPU name ('generic' for plain x86)
    triple: str
    float_abi: str    # hard | soft
    relocation: str   # static | pic
    features: str = ""
    byte_weights: bool = False  # --compact-weights: 8-bit weights stay bytes, never 16-bit pairs (half the flash)
    fused: bool = True          # False with --no-fuse: the packers lay weights for layers compiled on their own

    @property
    def is_cortex_m(self) -> bool:
        return self.triple.startswith("thumb")

    @property
    def address_bits(self) -> int:
        """Width of the CPU's addresses: 32 for Cortex-M and i386, 64 for x86-64 and AArch64."""
        return 32 if self.arch in ("arm", "i386") else 64

    def machine(self) -> llvm.TargetMachine:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=3,
                                            reloc=self.relocation, codemodel="default")


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine, machine)


def resolve_target(arch: str | None = None, mcpu: str | None = None, float_abi: str | None = None,
                   relocation: str | None = None) -> Target:
    """Check and combine --target/--mcpu/--float-abi/--relocation-model into a Target (relocation None: pic for
    hosted targets, static for Cortex-M)."""
    arch = arch or (CPUS[mcpu].arch if mcpu in CPUS else host_arch())
    if arch not in ARCHES:
        raise PegasusError(f"unknown --target '{arch}' (valid: {', '.join(ARCHES)})")
    if relocation not in (None, "static", "pic"):
        raise PegasusError(f"unknown --relocation-model '{relocation}' (valid: static, pic)")
    relocation = relocation or ("static" if arch == "arm" else "pic")   # --target arm is bare-metal Cortex-M
    if float_abi not in (None, "soft", "hard"):
        raise PegasusError(f"unknown --float-abi '{float_abi}' (valid: soft, hard)")
    if arch in HOST_TRIPLES:
        if mcpu not in (None, "native"):
            raise PegasusError(f"--mcpu {mcpu} is not an {arch} CPU (valid for {arch}: native)")
        if arch == host_arch() and mcpu in (None, "native"):  # for this machine, as Glow does by default
            return Target(arch, llvm.get_host_cpu_name(), HOST_TRIPLES[arch], "hard", relocation,
                          llvm.get_host_cpu_features().flatten())
        if mcpu == "native":
            raise PegasusError(f"--mcpu native needs --target {host_arch()} (this machine)")
        cpu = "x86-64" if arch == "x86_64" else "i686"
        return Target(arch, cpu, HOST_TRIPLES[arch], "hard", relocation)
    mcpu = mcpu or DEFAULT_CPU[arch]
    valid = [name for name, info in CPUS.items() if info.arch == arch]
    if mcpu == "native" and arch == host_arch():
        return Target(arch, llvm.get_host_cpu_name(), CPUS["cortex-a53"].triple_hard, "hard", relocation)
    if mcpu not in valid:
        raise PegasusError(f"unknown --mcpu '{mcpu}' for --target {arch} (valid: {', '.join(valid)})")
    info = CPUS[mcpu]
    abi = float_abi or ("hard" if info.triple_hard else "soft")
    if abi == "hard" and info.triple_hard is None:
        raise PegasusError(f"{mcpu} has no FPU: use --float-abi soft")
    triple = info.triple_hard if abi == "hard" else info.triple_soft
    return Target(arch, mcpu, triple, abi, relocation, info.features)
