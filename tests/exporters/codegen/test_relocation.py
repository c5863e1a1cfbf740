"""Host bundles link into the programs users build: ``gcc app.c NAME.o`` with the compiler's defaults (a PIE
program on Debian and most Linux distributions) and with ``-no-pie``, without telling pegasus which.

The float and the per-channel int8 LeNet are exported through the command line with the default relocation
model for x86-64 (this machine) and for AArch64 Linux, linked with the bundle's own example program (main.c)
by the real gcc / aarch64-linux-gnu-gcc, run (AArch64 under qemu-aarch64), and their outputs compared with
the reference interpreter: float within 1e-5, the integer bundle bit for bit. Before PIC was the hosted
default, the int8 bundle's absolute ``.rodata`` addresses (R_X86_64_32S) could not be linked into a PIE.
Cortex-M keeps static code (firmware is linked at fixed addresses).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from pegasus.exporters.glow.target import host_arch, resolve_target
from pegasus.ir import serialize
from pegasus.quantized.lower import lower_to_integer
from pegasus.quantizers.quantize_file import load_table
from pegasus.runtime import interpreter
from tests.conftest import DEMO_DIR, run_cli
from tests.support import toolchains

sys.path.insert(0, str(DEMO_DIR))
from heldout import heldout_digits  # noqa: E402

LINKERS = {"x86_64": "gcc", "aarch64": "aarch64-linux-gnu-gcc"}
SYSROOT = Path("/usr/aarch64-linux-gnu")     # the cross toolchain's libc, for qemu-aarch64 -L


@pytest.fixture(scope="module")
def lenet(demo_model, tmp_path_factory) -> dict[str, Path]:
    """The demo LeNet as a float model and with a per-channel int8 table: the paths the CLI needs."""
    folder = tmp_path_factory.mktemp("relocation")
    table = folder / "lenet_mnist.quantize"
    result = run_cli("quantize", "--model", demo_model[0], "--model-data", demo_model[1], "--with-input-meta",
                     DEMO_DIR / "lenet_mnist_inputmeta.yml", "--quantizer", "perchannel_symmetric_affine",
                     "--qtype", "int8", "--batch-size", "10", "--iterations", "2", "--model-quantize", table)
    assert result.code == 0, result.stderr
    return {"json": demo_model[0], "data": demo_model[1], "table": table}


@pytest.fixture(scope="module")
def digit(tmp_path_factory) -> tuple[np.ndarray, Path]:
    image = heldout_digits()[0][5][None]
    path = tmp_path_factory.mktemp("digit") / "digit.npy"
    np.save(path, image)
    return image, path


def expected(lenet: dict[str, Path], dtype: str, image: np.ndarray) -> np.ndarray:
    graph = serialize.load(lenet["json"], lenet["data"])
    if dtype == "quantized":
        graph = lower_to_integer(graph, load_table(lenet["table"], graph, serialize.graph_digest(graph))).graph
    return interpreter.run(graph, {"data": image})["softmax"]


def export(lenet: dict[str, Path], dtype: str, arch: str, folder: Path) -> Path:
    """``pegasus export glow`` with no --relocation-model: the default for ``arch``."""
    extra = ["--dtype", "quantized", "--model-quantize", lenet["table"]] if dtype == "quantized" else []
    result = run_cli("export", "glow", "--model", lenet["json"], "--model-data", lenet["data"], "--output-path",
                     folder, "--target", arch, *extra)
    assert result.code == 0, result.stderr
    return folder


def link_and_run(folder: Path, arch: str, flags: list[str], digit: Path) -> tuple[bool, np.ndarray]:
    """Link main.c + lenet_mnist.o as ``CC [flags] main.c lenet_mnist.o``; run it: (is a PIE, softmax)."""
    program = folder / ("run" + "".join(flags))
    subprocess.run([toolchains.require_tool(LINKERS[arch]), *flags, "-O2", "-o", str(program), "main.c",
                    "lenet_mnist.o"], cwd=folder, check=True, capture_output=True, text=True)
    launcher = [toolchains.require_tool("qemu-aarch64"), "-L", str(SYSROOT)] if arch != host_arch() else []
    out = folder / "out.bin"
    subprocess.run([*launcher, str(program), "-o", str(out), str(digit)], cwd=folder, check=True,
                   capture_output=True, text=True, timeout=120)
    with program.open("rb") as elf:
        pie = ELFFile(elf).header["e_type"] == "ET_DYN"
    return pie, np.fromfile(out, dtype=np.float32).reshape(1, 10)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("dtype", ["float32", "quantized"])
def test_host_bundle_links_into_pie_and_non_pie_programs(lenet, digit, dtype, arch, tmp_path):
    if arch == "x86_64" and host_arch() != "x86_64":
        pytest.skip("the x86-64 program runs on an x86-64 machine")
    folder = export(lenet, dtype, arch, tmp_path)
    want = expected(lenet, dtype, digit[0])
    kinds = {}
    for flags in ([], ["-no-pie"]):
        pie, got = link_and_run(folder, arch, flags, digit[1])
        kinds[pie] = flags
        if dtype == "quantized":
            assert got.tobytes() == want.tobytes(), (flags, got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=str(flags))
    assert set(kinds) == {True, False}, "the compiler's default and -no-pie should give one PIE and one not"


def test_relocation_defaults_follow_the_target():
    assert {arch: resolve_target(arch).relocation for arch in ("x86_64", "i386", "aarch64", "arm")} == {
        "x86_64": "pic", "i386": "pic", "aarch64": "pic", "arm": "static"}
    assert resolve_target("arm", "cortex-m0").relocation == "static"
    assert resolve_target("x86_64", None, None, "static").relocation == "static"
    assert resolve_target("arm", "cortex-m7", None, "pic").relocation == "pic"


def test_makefile_links_with_the_compilers_defaults(lenet, digit, tmp_path):
    """The example Makefile needs no -no-pie: `make` builds a PIE where the compiler does by default."""
    if host_arch() != "x86_64":
        pytest.skip("the example program is built for this x86-64 machine")
    folder = export(lenet, "quantized", "x86_64", tmp_path)
    flags = [line for line in (folder / "Makefile").read_text().splitlines() if line.startswith("LDFLAGS")]
    assert flags and not any("-no-pie" in line for line in flags), flags
    subprocess.run(["make"], cwd=folder, check=True, capture_output=True)
    run = subprocess.run(["./lenet_mnist_run", str(digit[1])], cwd=folder, capture_output=True, text=True,
                         check=True)
    lines = run.stdout.splitlines()
    first = lines[next(i for i, line in enumerate(lines) if "top-5" in line) + 1]
    assert int(first.split(":")[0]) == int(np.argmax(expected(lenet, "quantized", digit[0]))), run.stdout


def test_i386_bundle_needs_no_text_relocations(lenet, tmp_path):
    """No i386 C library here to run a program: binutils' ld links the object alone into a PIE with ``-z text``
    (refusing any relocation the loader would have to patch in the code); a static i386 object fails this."""
    if host_arch() != "x86_64":
        pytest.skip("needs the host binutils' elf_i386 emulation")
    folder = export(lenet, "quantized", "i386", tmp_path)
    subprocess.run([toolchains.require_tool("ld"), "-m", "elf_i386", "-pie", "-z", "text", "--no-dynamic-linker",
                    "-e", "lenet_mnist", "-o", str(folder / "linked"), str(folder / "lenet_mnist.o")],
                   check=True, capture_output=True, text=True)
