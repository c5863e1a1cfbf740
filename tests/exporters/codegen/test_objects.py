"""The bundle object itself, for every supported CPU: an ELF for the right machine, no writable data (no
global mutable state: re-entrant), and no undefined symbols — nothing the bare target lacks (soft-float
Cortex-M0 may call libgcc's __aeabi_* float helpers, which arm-none-eabi-gcc always links; i386's
position-independent code names _GLOBAL_OFFSET_TABLE_, which every linker defines)."""

from __future__ import annotations

import io

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx

TARGETS = [("x86_64", None, "EM_X86_64"), ("i386", None, "EM_386"), ("arm", "cortex-m0", "EM_ARM"),
           ("arm", "cortex-m4", "EM_ARM"), ("arm", "cortex-m7", "EM_ARM"), ("arm", "cortex-m33", "EM_ARM"),
           ("arm", "cortex-m55", "EM_ARM"), ("aarch64", "cortex-a53", "EM_AARCH64"),
           ("aarch64", "cortex-a72", "EM_AARCH64")]


@pytest.fixture(scope="module")
def lenet(demo_onnx):
    return import_onnx(demo_onnx, name="lenet_mnist")


@pytest.mark.parametrize("arch,cpu,machine", TARGETS, ids=[f"{a}-{c}" for a, c, _ in TARGETS])
def test_object_is_self_contained(lenet, tmp_path, arch, cpu, machine):
    export_bundle(lenet, tmp_path, "lenet_mnist", resolve_target(arch, cpu))
    elf = ELFFile(io.BytesIO((tmp_path / "lenet_mnist.o").read_bytes()))
    assert elf["e_machine"] == machine
    writable = [s.name for s in elf.iter_sections()
                if s["sh_flags"] & SH_FLAGS.SHF_ALLOC and s["sh_flags"] & SH_FLAGS.SHF_WRITE and s["sh_size"]]
    assert writable == [], f"mutable global data: {writable}"
    symbols = elf.get_section_by_name(".symtab")
    undefined = sorted({s.name for s in symbols.iter_symbols() if s["st_shndx"] == "SHN_UNDEF" and s.name})
    allowed = [name for name in undefined if cpu == "cortex-m0" and name.startswith("__aeabi_")
               or arch == "i386" and name == "_GLOBAL_OFFSET_TABLE_"]   # i386 PIC: the linker-made GOT base
    assert undefined == allowed, f"calls outside the bundle: {undefined}"
    entry = [s for s in symbols.iter_symbols() if s.name == "lenet_mnist"]
    assert entry and entry[0]["st_info"]["bind"] == "STB_GLOBAL" and entry[0]["st_info"]["type"] == "STT_FUNC"
