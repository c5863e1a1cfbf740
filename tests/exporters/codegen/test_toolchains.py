"""The toolchain harness itself (tests/support/toolchains.py), checked without the exporter's kernels.

A tiny bundle is written by hand — an llvmlite entry ``int tiny(uint8_t*, uint8_t*, uint8_t*)`` computing
``out[i] = in[i] * w[i] + 1.0f``, a Glow-style header and weights.bin — and run on the host, on four
Cortex-M boards under qemu-system-arm and on aarch64 under qemu-aarch64. Results must equal numpy's float32
bit for bit. The instruction counter must be repeatable and grow with the work.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.target import Target, resolve_target
from tests.support import toolchains

ALIGN = 64
F32 = ir.FloatType()
I32 = ir.IntType(32)
BYTE_PTR = ir.IntType(8).as_pointer()


def _round_up(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def _tiny_module(count: int, out_offset: int) -> ir.Module:
    """tiny(w, mutable, act): for i < count: out[i] = in[i] * w[i] + 1 (in at 0, out at out_offset)."""
    module = ir.Module(name="tiny")
    entry = ir.Function(module, ir.FunctionType(I32, [BYTE_PTR] * 3), name="tiny")
    constant, mutable, _ = entry.args
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    weights = builder.bitcast(constant, F32.as_pointer())
    source = builder.bitcast(mutable, F32.as_pointer())
    dest = builder.bitcast(builder.gep(mutable, [I32(out_offset)]), F32.as_pointer())
    start = builder.block
    body = entry.append_basic_block("body")
    builder.branch(body)
    builder.position_at_end(body)
    index = builder.phi(I32)
    index.add_incoming(I32(0), start)
    product = builder.fmul(builder.load(builder.gep(source, [index])), builder.load(builder.gep(weights, [index])))
    builder.store(builder.fadd(product, ir.Constant(F32, 1.0)), builder.gep(dest, [index]))
    following = builder.add(index, I32(1))
    index.add_incoming(following, body)
    done = entry.append_basic_block("done")
    builder.cbranch(builder.icmp_unsigned("<", following, I32(count)), body, done)
    builder.position_at_end(done)
    builder.ret(I32(0))
    return module


def _tiny_header(count: int, out_offset: int) -> str:
    return f"""// Bundle API header written by hand in Glow's style for the toolchain tests.
#ifndef _GLOW_BUNDLE_TINY_H
#define _GLOW_BUNDLE_TINY_H

#include <stdint.h>

#ifndef _GLOW_BUNDLE_COMMON_DEFS
#define _GLOW_BUNDLE_COMMON_DEFS
#define GLOW_MEM_ALIGN(size) __attribute__((aligned(size)))
#define GLOW_GET_ADDR(mutableBaseAddr, placeholderOff) (((uint8_t*)(mutableBaseAddr)) + placeholderOff)
#endif

#define TINY_in 0
#define TINY_out {out_offset}
#define TINY_CONSTANT_MEM_SIZE {_round_up(4 * count)}
#define TINY_MUTABLE_MEM_SIZE {out_offset + _round_up(4 * count)}
#define TINY_ACTIVATIONS_MEM_SIZE 0
#define TINY_MEM_ALIGN {ALIGN}

#ifdef __cplusplus
extern "C" {{
#endif
int tiny(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);
#ifdef __cplusplus
}}
#endif
#endif
"""


def write_tiny_bundle(folder: Path, target: Target, weights: np.ndarray) -> Path:
    """tiny.o + tiny.h + tiny.weights.bin (padded to CONSTANT_MEM_SIZE) for ``target``."""
    count = weights.size
    out_offset = _round_up(4 * count)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.o").write_bytes(compile_object(_tiny_module(count, out_offset), target))
    (folder / "tiny.h").write_text(_tiny_header(count, out_offset))
    blob = weights.astype(np.float32).tobytes()
    (folder / "tiny.weights.bin").write_bytes(blob + bytes(_round_up(len(blob)) - len(blob)))
    return folder


def _data(count: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(count)
    # Awkward values: products that round, a subnormal-producing pair, signed zero, a big magnitude.
    x = rng.standard_normal(count).astype(np.float32) * np.float32(3.7)
    w = rng.standard_normal(count).astype(np.float32) / np.float32(1.3)
    x[:4] = np.array([1e-20, -0.0, 3.4e38, 0.1], dtype=np.float32)[:count]
    w[:4] = np.array([1e-20, 2.0, 0.5, 0.3], dtype=np.float32)[:count]
    return x, w


def _expected(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x * w + np.float32(1.0)


def _assert_bits_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32))


TARGETS = {
    "host": (None, None),
    "cortex-m7": ("arm", "cortex-m7"),
    "cortex-m4": ("arm", "cortex-m4"),
    "cortex-m33": ("arm", "cortex-m33"),
    "cortex-m0": ("arm", "cortex-m0"),
    "cortex-a53": ("aarch64", "cortex-a53"),
}


def _run(where: str, folder: Path, x: np.ndarray) -> np.ndarray:
    spec = {"out": (x.shape, np.float32)}
    if where == "host":
        return toolchains.run_host(folder, "tiny", {"in": x}, spec)["out"]
    if where == "cortex-a53":
        return toolchains.run_aarch64(folder, "tiny", {"in": x}, spec)["out"]
    return toolchains.run_cortex_m(folder, "tiny", where, {"in": x}, spec)["out"]


@pytest.mark.parametrize("where", TARGETS)
def test_tiny_bundle_bit_exact(tmp_path, where):
    x, w = _data(4)
    folder = write_tiny_bundle(tmp_path / where, resolve_target(*TARGETS[where]), w)
    _assert_bits_equal(_run(where, folder, x), _expected(x, w))


@pytest.mark.parametrize("where", ["host", "cortex-m7"])
def test_longer_bundle_bit_exact(tmp_path, where):
    x, w = _data(1000)
    folder = write_tiny_bundle(tmp_path / where, resolve_target(*TARGETS[where]), w)
    _assert_bits_equal(_run(where, folder, x), _expected(x, w))


def test_soft_float_abi_on_fpu_core(tmp_path):
    """A soft-ABI object for an FPU core links softfp and still runs (float ABI read from the object)."""
    x, w = _data(4)
    folder = write_tiny_bundle(tmp_path, resolve_target("arm", "cortex-m4", "soft"), w)
    assert not toolchains.object_uses_hard_float(folder / "tiny.o")
    _assert_bits_equal(_run("cortex-m4", folder, x), _expected(x, w))


def _count(folder: Path, count: int, cpu: str = "cortex-m7") -> int:
    x, _ = _data(count)
    return toolchains.count_instructions_cortex_m(folder, "tiny", cpu, {"in": x})


def test_instruction_count_repeatable_and_proportional(tmp_path):
    target = resolve_target("arm", "cortex-m7")
    counts = {}
    for count in (4, 400, 4000):
        folder = write_tiny_bundle(tmp_path / str(count), target, _data(count)[1])
        first, second = _count(folder, count), _count(folder, count)
        assert first == second, f"{count} elements: {first} then {second} instructions"
        counts[count] = first
    print(f"cortex-m7 instructions for 4/400/4000 elements: {counts}")
    assert counts[4] < counts[400] / 20
    per_element = (counts[4000] - counts[400]) / 3600
    assert 2 <= per_element <= 20          # loads, multiply, add, store, loop control
    assert abs((counts[400] - counts[4]) / 396 - per_element) <= 0.2 * per_element


LOOP_ITERATIONS = 100_000
COUNTED_LOOP = f"""\t.syntax unified
\t.thumb
\t.text
\t.global tiny
\t.type tiny, %function
\t.thumb_func
tiny:
\tldr r3, ={LOOP_ITERATIONS}
1:\tsubs r3, r3, #1
\tbne 1b
\tmovs r0, #0
\tbx lr
\t.ltorg
"""


def _assembled_bundle(folder: Path, cpu: str, assembly: str) -> Path:
    """The tiny bundle's header and weights with tiny.o replaced by hand-written Thumb assembly."""
    write_tiny_bundle(folder, resolve_target("arm", cpu), _data(4)[1])
    source = folder / "entry.s"
    source.write_text(assembly)
    subprocess.run([toolchains.require_tool("arm-none-eabi-gcc"), f"-mcpu={cpu}", "-mthumb", "-c", str(source),
                    "-o", str(folder / "tiny.o")], check=True, capture_output=True)
    return folder


@pytest.mark.parametrize("cpu", sorted(toolchains.BOARDS))
def test_instruction_count_exact_on_a_known_loop(tmp_path, cpu):
    """An entry that is a 2-instruction loop run 100,000 times: the counter must say 200,000 (to a tick)."""
    folder = _assembled_bundle(tmp_path, cpu, COUNTED_LOOP)
    count = toolchains.count_instructions_cortex_m(folder, "tiny", cpu, {"in": _data(4)[0]})
    tick = toolchains.board_for(cpu).instructions_per_tick
    assert 2 * LOOP_ITERATIONS <= count <= 2 * LOOP_ITERATIONS + 2 * tick, count


@pytest.mark.parametrize("cpu", ["cortex-m0", "cortex-m33"])
def test_fault_in_the_bundle_is_reported_not_hung(tmp_path, cpu):
    folder = _assembled_bundle(tmp_path, cpu, COUNTED_LOOP.replace("tiny:\n", "tiny:\n\tudf #0\n"))
    with pytest.raises(toolchains.ToolchainError, match="@fault HardFault"):
        _run(cpu, folder, _data(4)[0])


def test_missing_tool_is_an_error_not_a_skip(monkeypatch):
    monkeypatch.setattr(toolchains.shutil, "which", lambda tool: None)
    with pytest.raises(toolchains.ToolchainError, match="install_toolchains.sh"):
        toolchains.require_tool("qemu-system-arm")
