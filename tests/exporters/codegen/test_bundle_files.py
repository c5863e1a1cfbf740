"""The bundle's files besides NAME.o's code, checked with real compilers and independent readers:
gcc/g++ compile the header (static and dynamic API, two bundles in one file), weights.txt included
into a C array gives weights.bin, main.c + Makefile build and run a bundle whose outputs numpy
predicts, C reads NAME_config as the plan says, the 32-bit layouts of the config follow the ABIs,
and the memory report agrees with binutils' ``size -A``."""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from onnx import TensorProto, helper, numpy_helper

from pegasus.exporters.glow import bundle_files
from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.memory import plot as plan_plot
from pegasus.exporters.glow.memory import report as memory_report
from pegasus.exporters.glow.memory.plan import plan_memory
from pegasus.exporters.glow.target import resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import QuantParams, TensorType

GCC = ["gcc", "-Wall", "-Werror", "-O1"]


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), name="g")


def _weighted_graph():
    """y = where(mask, (x + bias) * scale, x + bias): float and bool constants of sizes that need padding."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.random((3, 5)) > 0.5, "mask")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]), helper.make_node("Mul", ["a", "scale"], ["m"]),
             helper.make_node("Where", ["mask", "m", "a"], ["y"])]
    return _model(nodes, [_value("x", [3, 5])], [_value("y", [3, 5])], inits)


@pytest.fixture(scope="module")
def weighted():
    """The weighted graph as the exporter sees it: (graph, plan)."""
    graph = lower_for_export(_weighted_graph())
    return graph, plan_memory(graph)


def _relu_graph():
    """Two inputs, two outputs, names that are not C identifiers; Relu has an emitter."""
    nodes = [helper.make_node("Relu", ["in.a"], ["mid"]), helper.make_node("Relu", ["mid"], ["out:0"]),
             helper.make_node("Relu", ["b"], ["out2"])]
    return _model(nodes, [_value("in.a", [1, 3, 4]), _value("b", [7])],
                  [_value("out:0", [1, 3, 4]), _value("out2", [7])])


def _export(tmp_path_factory, api: str):
    """The Relu graph exported for the host: (folder, BundleResult)."""
    folder = tmp_path_factory.mktemp(f"bundle_{api}")
    return folder, export_bundle(_relu_graph(), folder, "net", resolve_target(), bundle_api=api)


@pytest.fixture(scope="module")
def static_bundle(tmp_path_factory):
    return _export(tmp_path_factory, "static")


@pytest.fixture(scope="module")
def dynamic_bundle(tmp_path_factory):
    return _export(tmp_path_factory, "dynamic")


@pytest.fixture(params=["static", "dynamic"])
def bundle(request):
    return request.getfixturevalue(f"{request.param}_bundle")


def _run(cmd, cwd, **kwargs):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=120, **kwargs)


def _build_and_run(folder: Path, source: str, *objects: str) -> str:
    (folder / "probe.c").write_text(source)
    build = _run([*GCC, "-o", "probe", "probe.c", *objects], folder)
    assert build.returncode == 0, build.stderr
    run = _run(["./probe"], folder)
    assert run.returncode == 0, run.stderr
    return run.stdout


# ---- weights -----------------------------------------------------------------------------------
def test_weights_blob_puts_each_constant_at_its_offset(weighted):
    graph, plan = weighted
    blob = np.frombuffer(bundle_files.weights_blob(graph, plan), dtype=np.uint8)
    assert blob.size == plan.constant_size
    sizes = [tensor.type.nbytes for tensor in graph.constants() if tensor.type.nbytes > 16]
    assert sum(sizes) <= blob.size <= sum(-(-size // 16) * 16 for size in sizes)  # packed at 16 bytes
    covered = np.zeros(blob.size, dtype=bool)
    for tensor in graph.constants():
        loc = plan.locations[tensor.name]
        if loc.region == "code":  # 16 bytes or less: compiled into the object
            assert tensor.type.nbytes <= 16
            continue
        assert loc.offset % 16 == 0
        want = np.frombuffer(tensor.data.astype(tensor.data.dtype.newbyteorder("<")).tobytes(), dtype=np.uint8)
        np.testing.assert_array_equal(blob[loc.offset:loc.offset + want.size], want)
        covered[loc.offset:loc.offset + want.size] = True
    assert not blob[~covered].any()  # padding is zeros


@pytest.mark.parametrize("length", [1, 19, 20, 40, 41])
def test_weights_txt_lines_hold_20_items(length):
    blob = bytes(range(256))[:length]
    text = bundle_files.render_weights_txt(blob).decode("ascii")
    assert text.endswith("\n")
    lines = text.rstrip("\n").split("\n")
    assert all(len(re.findall(r" 0X[0-9A-F]{2},", line)) == 20 for line in lines[:-1])
    assert bytes(int(h, 16) for h in re.findall(r"0X([0-9A-F]{2}),", text)) == blob


@pytest.mark.parametrize("length", [0, 1, 20, 41, 1000])
def test_weights_txt_is_glows_text(length):
    """Byte for byte the text of Glow's writer: ' 0X%02X,' per byte, a newline after every 20, one at the end."""
    blob = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8).tobytes()
    expected = "".join(f" 0X{b:02X}," + ("\n" if i % 20 == 19 else "") for i, b in enumerate(blob)) + "\n"
    assert bundle_files.render_weights_txt(blob) == expected.encode("ascii")
    for lines in (1, 2, 3):   # written a chunk of lines at a time (export_bundle): the same text at any boundary
        assert b"".join(bundle_files.weights_txt_chunks(blob, lines)) == expected.encode("ascii")


def test_weights_txt_in_a_static_array_gives_weights_bin(weighted, tmp_path):
    graph, plan = weighted
    blob = bundle_files.weights_blob(graph, plan)
    (tmp_path / "net.weights.txt").write_bytes(bundle_files.render_weights_txt(blob))
    (tmp_path / "net.h").write_text(bundle_files.render_header("net", graph, plan, "static"))
    source = """#include <stdio.h>
#include "net.h"
GLOW_MEM_ALIGN(NET_MEM_ALIGN)
uint8_t constantWeight[NET_CONSTANT_MEM_SIZE] = {
#include "net.weights.txt"
};
int main(void) {
  fwrite(constantWeight, 1, sizeof constantWeight, stdout);
  return ((uintptr_t)constantWeight % NET_MEM_ALIGN) != 0;
}
"""
    (tmp_path / "probe.c").write_text(source)
    assert _run([*GCC, "-o", "probe", "probe.c"], tmp_path).returncode == 0
    run = subprocess.run(["./probe"], cwd=tmp_path, capture_output=True, timeout=60)
    assert run.returncode == 0 and run.stdout == blob


# ---- header ------------------------------------------------------------------------------------
@pytest.mark.parametrize("compiler", [["gcc", "-x", "c"], ["g++", "-x", "c++"]])
def test_headers_compile_as_c_and_cpp_two_bundles_together(weighted, tmp_path, compiler):
    graph, plan = weighted
    (tmp_path / "one.h").write_text(bundle_files.render_header("one", graph, plan, "static"))
    (tmp_path / "two.h").write_text(bundle_files.render_header("two", graph, plan, "dynamic"))
    (tmp_path / "use.c").write_text("""#include "one.h"
#include "two.h"
#include "one.h"
int use(void) {
  static uint8_t mutableWeight[ONE_MUTABLE_MEM_SIZE];
  uint8_t *input = GLOW_GET_ADDR(mutableWeight, ONE_x);
  const BundleConfig *config = &two_config;
  return input[0] + (int)config->symbolTable[0].kind + GLOW_SUCCESS + one(0, mutableWeight, 0) + two(0, 0, 0);
}
""")
    build = _run([*compiler, "-Wall", "-Werror", "-c", "use.c", "-o", "use.o"], tmp_path)
    assert build.returncode == 0, build.stderr


def test_static_header_values_match_the_plan(static_bundle):
    folder, result = static_bundle
    plan = result.plan
    out = _build_and_run(folder, """#include <stdio.h>
#include "net.h"
int main(void) {
  printf("%d %d %d %d %d\\n", NET_in_a, NET_b, NET_out_0, NET_out2, NET_MEM_ALIGN);
  printf("%d %d %d\\n", NET_CONSTANT_MEM_SIZE, NET_MUTABLE_MEM_SIZE, NET_ACTIVATIONS_MEM_SIZE);
  return 0;
}
""")
    offsets = [plan.locations[n].offset for n in ("in.a", "b", "out:0", "out2")]
    assert out.split("\n")[0].split() == [str(v) for v in offsets + [64]]
    assert out.split("\n")[1].split() == [str(plan.constant_size), str(plan.mutable_size), str(plan.activations_size)]
    header = (folder / "net.h").read_text()
    assert "//   Type: float<1 x 3 x 4>\n//   Size: 12 (elements)\n//   Size: 48 (bytes)\n" in header
    assert 'int net(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);' in header


def test_glow_type_names():
    assert bundle_files.glow_type_name(TensorType((1, 1, 28, 28), DType.FLOAT32)) == "float<1 x 1 x 28 x 28>"
    int8 = TensorType((10,), DType.INT8, QuantParams((1 / 128,), (0,)))
    assert bundle_files.glow_type_name(int8) == "i8[S:0.0078 O:0][-1.000,0.992]<10>"


def test_c_identifiers_are_distinct():
    names = bundle_files.c_identifiers(["a.b", "a_b", "a:b", "MEM_ALIGN", "ok"])
    assert names == {"a.b": "a_b", "a_b": "a_b_1", "a:b": "a_b_2", "MEM_ALIGN": "MEM_ALIGN_1", "ok": "ok"}


# ---- dynamic API -------------------------------------------------------------------------------
def test_dynamic_config_read_from_c_matches_the_plan(dynamic_bundle):
    folder, result = dynamic_bundle
    out = _build_and_run(folder, """#include <stdio.h>
#include "net.h"
int main(void) {
  uint64_t i;
  printf("%llu %llu %llu %llu %llu\\n", (unsigned long long)net_config.constantWeightVarsMemSize,
         (unsigned long long)net_config.mutableWeightVarsMemSize,
         (unsigned long long)net_config.activationsMemSize, (unsigned long long)net_config.alignment,
         (unsigned long long)net_config.numSymbols);
  for (i = 0; i < net_config.numSymbols; i++) {
    const SymbolTableEntry *s = &net_config.symbolTable[i];
    printf("%s %llu %llu %d\\n", s->name, (unsigned long long)s->offset, (unsigned long long)s->size, s->kind);
  }
  return 0;
}
""", "net.o")
    plan, graph = result.plan, result.graph
    lines = out.strip().split("\n")
    assert lines[0].split() == [str(v) for v in (plan.constant_size, plan.mutable_size, plan.activations_size, 64, 4)]
    want = [f"{ident} {plan.locations[t].offset} {graph.type_of(t).size} 1"
            for t, ident in (("in.a", "in_a"), ("b", "b"), ("out:0", "out_0"), ("out2", "out2"))]
    assert lines[1:] == want


def _symbol(elf: ELFFile, name: str):
    return next(s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == name)


def _relocated_offsets(elf: ELFFile, section_index: int) -> set[int]:
    return {r["r_offset"] for s in elf.iter_sections() if isinstance(s, RelocationSection)
            and s["sh_info"] == section_index for r in s.iter_relocations()}


# (arch, mcpu): sizeof(BundleConfig), sizeof(SymbolTableEntry), offsetof(offset), offsetof(size), offsetof(kind).
# AAPCS aligns uint64_t to 8 bytes; the i386 System V ABI aligns it to 4 inside structs.
LAYOUTS = {("arm", "cortex-m7"): (48, 32, 8, 16, 24), ("i386", None): (44, 24, 4, 12, 20),
           ("x86_64", None): (48, 32, 8, 16, 24)}


@pytest.mark.parametrize("arch,mcpu", list(LAYOUTS))
def test_dynamic_config_layout_follows_the_c_abi(arch, mcpu):
    graph = lower_for_export(_relu_graph())
    plan = plan_memory(graph)
    target = resolve_target(arch, mcpu)
    module = build_module(graph, plan, target, "net")
    bundle_files.add_dynamic_config(module, "net", graph, plan)
    elf = ELFFile(io.BytesIO(compile_object(module, target)))
    config_size, entry_size, at_offset, at_size, at_kind = LAYOUTS[(arch, mcpu)]
    config, table = _symbol(elf, "net_config"), _symbol(elf, "netSymbolTable")
    assert config["st_size"] == config_size and table["st_size"] == 4 * entry_size
    section = elf.get_section(config["st_shndx"])
    data = section.data()
    fields = struct.unpack_from("<5Q", data, config["st_value"])
    assert fields == (plan.constant_size, plan.mutable_size, plan.activations_size, 64, 4)
    relocated = _relocated_offsets(elf, config["st_shndx"])
    assert config["st_value"] + 40 in relocated  # the symbolTable pointer
    base = table["st_value"]
    for index, tensor in enumerate(["in.a", "b", "out:0", "out2"]):
        entry = base + index * entry_size
        assert entry in relocated  # the name pointer
        assert struct.unpack_from("<QQ", data, entry + at_offset) == (plan.locations[tensor].offset,
                                                                      graph.type_of(tensor).size)
        assert data[entry + at_kind] == 1 and at_size == at_offset + 8


# ---- example program ---------------------------------------------------------------------------
def test_main_program_builds_and_matches_numpy(bundle):
    folder, _ = bundle
    make = _run(["make", "-B", "CFLAGS=-O2 -Wall -Werror"], folder)
    assert make.returncode == 0, make.stderr + make.stdout
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, 3, 4)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    np.save(folder / "a.npy", a)
    b.tofile(folder / "b.bin")  # raw bytes
    run = _run(["./net_run", "-n", "3", "-o", "out.bin", "a.npy", "b.bin"], folder)
    assert run.returncode == 0, run.stderr
    expected = [np.maximum(a, 0).ravel(), np.maximum(b, 0)]
    assert (folder / "out.bin").read_bytes() == b"".join(e.tobytes() for e in expected)
    blocks = run.stdout.split("Output ")[1:]
    assert len(blocks) == 2 and "Time per inference:" in run.stdout
    for block, want in zip(blocks, expected):
        top = [line.split(":") for line in block.strip().split("\n")[1:6]]
        assert [int(i) for i, _ in top] == list(np.argsort(-want, kind="stable")[:5])
        np.testing.assert_allclose([float(s) for _, s in top], np.sort(want)[::-1][:5], rtol=1e-5)


def test_main_program_rejects_wrong_inputs(static_bundle):
    folder, _ = static_bundle
    assert _run(["make"], folder).returncode == 0
    np.save(folder / "wrong_type.npy", np.zeros((1, 3, 4), dtype=np.float64))
    np.save(folder / "wrong_size.npy", np.zeros((1, 3, 5), dtype=np.float32))
    np.zeros(6, dtype=np.float32).tofile(folder / "short.bin")
    np.zeros(7, dtype=np.float32).tofile(folder / "b7.bin")
    for args, message in ((["wrong_type.npy", "b7.bin"], "element type"),
                          (["wrong_size.npy", "b7.bin"], "number of elements"),
                          (["short.bin", "b7.bin"], "needs 48"), (["short.bin"], "usage")):
        run = _run(["./net_run", *args], folder)
        assert run.returncode != 0 and message in run.stderr, (args, run.stderr)


def test_main_program_loads_the_weights(tmp_path):
    graph = _weighted_graph()
    export_bundle(graph, tmp_path, "net", resolve_target())
    assert _run(["make", "CFLAGS=-O2 -Wall -Werror"], tmp_path).returncode == 0
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = _run([tmp_path / "net_run", "-o", "y.bin", tmp_path / "x.npy"], elsewhere)  # weights next to the program
    assert run.returncode == 0, run.stderr
    bias, scale, mask = (graph.value_of(n) for n in ("bias", "scale", "mask"))
    want = np.where(mask, (x + bias) * scale, x + bias)
    np.testing.assert_allclose(np.fromfile(elsewhere / "y.bin", dtype=np.float32).reshape(3, 5), want, rtol=1e-6)
    (tmp_path / "short.bin").write_bytes(bytes(10))
    run = _run(["./net_run", "-w", "short.bin", "x.npy"], tmp_path)
    assert run.returncode == 1 and "wrong size" in run.stderr


# ---- memory report -----------------------------------------------------------------------------
#: sections binutils' size lists that hold code and read-only data (.data.rel.ro: address tables of PIC code)
CODE_SECTIONS = (".text", ".rodata", ".data.rel.ro")


def _size_a(obj: Path) -> dict[str, int]:
    out = _run(["size", "-A", obj.name], obj.parent).stdout
    rows = [line.split() for line in out.splitlines()[2:]]
    return {row[0]: int(row[1]) for row in rows if len(row) == 3 and row[0].startswith(".")}


def test_memory_report_matches_size_and_plan(bundle):
    folder, result = bundle
    plan = result.plan
    report = json.loads((folder / "net.memory.json").read_text())
    code = sum(size for name, size in _size_a(folder / "net.o").items() if name.startswith(CODE_SECTIONS))
    assert code > 0 and report["code"] == code
    assert (report["weights"], report["input_output"], report["activations"]) == (
        plan.constant_size, plan.mutable_size, plan.activations_size)
    assert report["weights_in_flash"] == {"flash": code + plan.constant_size,
                                          "ram": plan.mutable_size + plan.activations_size}
    assert report["weights_in_ram"] == {"flash": code + plan.constant_size,
                                        "ram": plan.mutable_size + plan.activations_size + plan.constant_size}
    text = (folder / "net.memory.txt").read_text()
    assert text == result.report and f"{code:,}" in text and "Flash = code + weights" in text


def test_memory_report_of_a_cortex_m_object(tmp_path):
    graph = lower_for_export(_relu_graph())
    plan = plan_memory(graph)
    target = resolve_target("arm", "cortex-m7")
    obj = compile_object(build_module(graph, plan, target, "net"), target)
    (tmp_path / "net.o").write_bytes(obj)
    text, report = memory_report.memory_report("net", plan, obj)
    code = sum(size for name, size in _size_a(tmp_path / "net.o").items() if name.startswith(CODE_SECTIONS))
    assert json.loads(report)["code"] == code > 0
    assert json.loads(report)["weights_in_flash"]["flash"] == code + plan.constant_size


# ---- memory plan picture -----------------------------------------------------------------------
def test_memory_plan_png_is_deterministic(weighted, tmp_path):
    graph, plan = weighted
    plan_plot.plot_memory_plan(graph, plan, tmp_path / "one.png")
    plan_plot.plot_memory_plan(graph, plan, tmp_path / "two.png")
    data = (tmp_path / "one.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data == (tmp_path / "two.png").read_bytes()
    assert struct.unpack(">II", data[16:24]) == (1000, 600)
    assert [b.tensors for b, _ in plan_plot.activation_buffers(plan)] == [["a"], ["m"]]
