"""The sandbox readers run in (pegasus/sandbox.py): a child acting as compromised code reaches no network, writes
nothing outside its scratch folder, reads nothing but Python's files and the model, and is stopped, with one
line, when it allocates past its limit, loops, burns CPU or crashes; the parent accepts only well-formed plain
data from it."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pegasus import limits, sandbox
from pegasus.errors import PegasusError
from tests.security.harness import assert_no_canary, snapshot

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _run(model: Path, function: str, *args, bounds: sandbox.Limits | None = None) -> sandbox.Reply:
    """``sandbox_child.function`` in the sandbox (this folder alone is added, read-only)."""
    return sandbox.run_sandboxed("sandbox_child", function, model, args, what="the test child", bounds=bounds,
                                 import_paths=[HERE])


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "model.bin"
    path.write_bytes(b"MODEL-BYTES")
    return path


def _one_line(exc: PegasusError, *words: str) -> str:
    text = str(exc)
    assert "\n" not in text and len(text) < 800, text
    for word in words:
        assert word.lower() in text.lower(), text
    return text


def test_no_network(model):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        found = _run(model, "network", listener.getsockname()[1]).data
    assert all(v.startswith("refused") for v in found.values()), found


def test_writes_stay_in_scratch(model, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = [str(outside / "PWNED_abs"), str(ROOT / "PWNED_tree"), "/tmp/PWNED_sandbox_tmp", "/usr/PWNED",
               str(Path.home() / "PWNED_home"), "/PWNED_root"]
    found = _run(model, "write", targets).data
    assert found.pop("scratch").startswith("done"), found
    assert all(v.startswith("refused") for v in found.values()), found
    for target in targets:
        assert not Path(target).exists(), target
    assert model.read_bytes() == b"MODEL-BYTES"


def test_reads_see_only_python_and_the_model(model, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-MARKER-31337")
    home = Path.home()
    targets = ["/etc/hostname", "/etc/passwd", str(secret), str(tmp_path) + "/", str(home) + "/",
               str(sandbox.MODEL_PATH)]
    found = _run(model, "read", targets).data
    assert found.pop(sandbox.MODEL_PATH) == "done: b'MODEL-BYTES'"
    listed_home = found.pop(str(home) + "/")
    for value in found.values():
        assert value.startswith("refused"), found
    # the home folder shows at most the folders leading to bound paths (the interpreter under ~/.pyenv)
    if listed_home.startswith("done"):
        real = set(os.listdir(home))
        shown = set(ast.literal_eval(listed_home[len("done: "):]))  # a list of names the child printed
        assert shown <= real and len(shown) <= 2, shown
        assert not any(name.startswith(".bash") or name == ".ssh" for name in shown), shown


def test_memory_limit(model):
    with pytest.raises(PegasusError) as caught:
        _run(model, "allocate", 3 * 2**30, bounds=sandbox.Limits(memory=2 * 2**30))
    _one_line(caught.value, "out of memory", str(model))


def test_wall_clock_and_cpu_limits(model):
    with pytest.raises(PegasusError) as caught:
        _run(model, "spin", bounds=sandbox.Limits(wall_seconds=4))
    _one_line(caught.value, "longer than 4 s", str(model))
    with pytest.raises(PegasusError) as caught:
        _run(model, "burn", bounds=sandbox.Limits(cpu_seconds=2, wall_seconds=60))
    _one_line(caught.value, "2 s of cpu", str(model))


def test_crash_is_one_line(model):
    with pytest.raises(PegasusError) as caught:
        _run(model, "crash")
    _one_line(caught.value, "crashed", "SIGSEGV", str(model))


def test_plain_data_round_trip_and_budget_passed_on(model):
    with limits.tensor_budget(123456):
        reply = _run(model, "noisy")
    assert reply.data == {"budget": "123456", "size": len(b"MODEL-BYTES"), "home": "/scratch", "cwd": "/scratch"}
    np.testing.assert_array_equal(reply.arrays[0], np.arange(6, dtype=np.int16).reshape(2, 3))
    np.testing.assert_array_equal(reply.arrays[1], [1.5, -2.0])
    assert reply.arrays[1].dtype == np.float64 and reply.arrays[2].shape == (0, 4)
    assert reply.arrays[3].shape == () and reply.arrays[3] == 2.5
    with pytest.raises(PegasusError) as caught:
        _run(model, "objects")
    _one_line(caught.value, "dtype object")


def _reply(header: dict, blob: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return sandbox.MAGIC + len(text).to_bytes(8, "little") + text + blob


@pytest.mark.parametrize(("raw", "words"), [
    (_reply({"ok": True, "data": 1, "arrays": [{"dtype": "float32", "shape": [2**40]}]}), ["needs"]),
    (_reply({"ok": True, "data": 1, "arrays": [{"dtype": "float32", "shape": [4]}]}, b"\0" * 15), ["declares 16"]),
    (_reply({"ok": True, "data": 1, "arrays": [{"dtype": "float32", "shape": [1]}]}, b"\0" * 5), ["beyond"]),
    (_reply({"ok": True, "data": 1, "arrays": [{"dtype": "object", "shape": [1]}]}, b"\0" * 8), ["dtype"]),
    (_reply({"ok": True, "data": 1, "arrays": [{"dtype": "int8", "shape": [-1]}]}), ["negative"]),
    (_reply({"ok": True, "data": 1, "arrays": [{"dtype": "int8", "shape": [1.5]}]}), ["shape"]),
    (_reply({"ok": False, "error": "bad\nthing\x1b[31m" + "x" * 5000}), ["bad thing"]),
    (sandbox.MAGIC + (2**62).to_bytes(8, "little"), ["header"]),
    (sandbox.MAGIC + (5).to_bytes(8, "little") + b"\x80(lp0", ["json"]),
    (sandbox.MAGIC + (20000).to_bytes(8, "little") + b"[" * 20000, ["json"]),
])
def test_malformed_replies_are_one_line(raw, words):
    with pytest.raises(PegasusError) as caught:
        sandbox.parse_reply(raw, "the test child", "m.pt")
    text = _one_line(caught.value, "m.pt", *words)
    assert "\x1b" not in text


def test_refuses_without_bwrap(model, monkeypatch):
    monkeypatch.setenv("PATH", str(model.parent))
    with pytest.raises(PegasusError) as caught:
        _run(model, "noisy")
    _one_line(caught.value, "apt-get install bubblewrap")


def test_refuses_when_bwrap_cannot_create_a_sandbox(model, monkeypatch):
    monkeypatch.setattr(sandbox, "_WORKING", set())
    monkeypatch.setattr(sandbox, "_isolation", lambda: ["--unshare-all", "--no-such-option"])
    with pytest.raises(PegasusError) as caught:
        _run(model, "noisy")
    _one_line(caught.value, "bubblewrap cannot create one here")


def test_symlink_and_fifo_models_are_refused(model, tmp_path):
    link = tmp_path / "link.bin"
    link.symlink_to(model)
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    for path in (link, fifo):
        with pytest.raises(PegasusError) as caught:
            _run(path, "noisy", bounds=sandbox.Limits(wall_seconds=20))
        _one_line(caught.value, str(path))


# ---------------------------------------------------------------------------------- QEMU semihosting

_FIRMWARE = r"""
#include <stdio.h>
#include <string.h>
#include <stdint.h>

static int sh(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return (int)r0;
}

static int sh_open(const char *name, int mode)
{
    uint32_t args[3] = {(uint32_t)name, (uint32_t)mode, (uint32_t)strlen(name)};
    return sh(0x01, args);
}

static void sh_write_file(const char *name)
{
    int fd = sh_open(name, 4);   /* "w" */
    if (fd >= 0) {
        uint32_t args[3] = {(uint32_t)fd, (uint32_t)"PWNED", 5};
        sh(0x05, args);
        sh(0x02, &fd);
    }
    printf("@open-w %s %d\n", name, fd);
}

int main(void)
{
    sh_write_file(ABS_CANARY);
    sh_write_file("PWNED_relative");
    int fd = sh_open(SECRET, 0);  /* "r" */
    printf("@open-r %d\n", fd);
    if (fd >= 0) {
        static char buffer[64];
        uint32_t args[3] = {(uint32_t)fd, (uint32_t)buffer, 48};
        sh(0x06, args);
        printf("@secret %s\n", buffer);
    }
    uint32_t remove_args[2] = {(uint32_t)VICTIM, strlen(VICTIM)};
    printf("@remove %d\n", sh(0x0E, remove_args));
    uint32_t system_args[2] = {(uint32_t)COMMAND, strlen(COMMAND)};
    printf("@system %d\n", sh(0x12, system_args));
    printf("@done\n");
    return 0;
}
"""


def test_semihosting_program_stays_in_its_scratch_folder(tmp_path):
    """A firmware that opens, writes, reads and removes host files through semihosting, and runs a command
    with SYS_SYSTEM, runs as `pegasus run` runs a bundle: nothing outside the scratch folder changes."""
    from pegasus.exporters.glow.run import toolchains

    outside = tmp_path / "outside"
    outside.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-MARKER-31337")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    defines = {"ABS_CANARY": outside / "PWNED_open", "SECRET": secret, "VICTIM": victim,
               "COMMAND": f"touch {outside / 'PWNED_system'}; touch PWNED_system_relative"}
    source = tmp_path / "attack.c"
    source.write_text(_FIRMWARE)
    board = toolchains.board_for("cortex-m4")
    program = tmp_path / "attack.elf"
    harness = toolchains.HARNESS_DIR
    subprocess.run([toolchains.require_tool("arm-none-eabi-gcc"), f"-mcpu={board.mcpu}", "-mthumb",
                    *toolchains.float_flags(board, False), "-O1", "--specs=rdimon.specs", "-nostartfiles",
                    f"-L{harness}", f"-T{board.linker_script}",
                    *[f'-D{key}="{value}"' for key, value in defines.items()],
                    str(harness / "startup.c"), str(source), "-o", str(program)], check=True, cwd=tmp_path)
    before = snapshot(tmp_path)
    proc = toolchains.run_qemu_system(program, board, timeout=120)
    assert "@done" in proc.stdout, proc.stdout
    assert "SECRET-MARKER" not in proc.stdout and "@open-r -1" in proc.stdout, proc.stdout
    assert snapshot(tmp_path) == before
    assert victim.read_text() == "keep me"
    assert_no_canary(tmp_path, Path.cwd())
