"""The files of a bundle besides NAME.o's code, in the formats Glow's users already have code for.

- NAME.weights.bin / .weights.txt: the constant region, and the same bytes as a C initialiser list
  (`` 0X..,`` 20 per line, as Glow's bundle saver writes it) for ``#include`` into a static array;
- NAME.h: Glow's static API (offset macros, memory sizes, entry prototype) or dynamic API
  (``BundleConfig NAME_config`` and its ``SymbolTableEntry`` table, which ``add_dynamic_config`` puts
  into the LLVM module so the object carries it);
- main.c + Makefile: an example host program built from ``templates/`` (package data).

Placeholder names become C identifiers (anything else turns into ``_``); the header's comment block
keeps each model tensor name. Every name reaches these files through generated_text.py's escaping (C string
literals, comments, Make words) and the templates are filled in one pass: a model's names stay data.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources

import numpy as np
from llvmlite import ir

from pegasus import __version__
from pegasus.exporters.glow.generated_text import bundle_name, c_comment, c_string, fill_template, make_word
from pegasus.exporters.glow.memory.plan import ALIGN, CONSTANT, MUTABLE, Location, MemoryPlan, align
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType

BYTES_PER_LINE = 20
MUTABLE_KIND = 1  # SymbolTableEntry.kind: 1 for a mutable variable (placeholder), 0 otherwise
MEMORY_MACROS = ("CONSTANT_MEM_SIZE", "MUTABLE_MEM_SIZE", "ACTIVATIONS_MEM_SIZE", "MEM_ALIGN")
GLOW_ELEMENT_NAMES = {
    DType.FLOAT32: "float", DType.FLOAT16: "float16", DType.FLOAT64: "float64", DType.INT8: "i8",
    DType.UINT8: "ui8", DType.INT16: "i16", DType.UINT16: "ui16", DType.INT32: "index32", DType.UINT32: "ui32",
    DType.INT64: "index64", DType.UINT64: "ui64", DType.BOOL: "bool",
}
C_KINDS = {
    DType.FLOAT32: "K_F32", DType.FLOAT64: "K_F64", DType.FLOAT16: "K_F16", DType.INT8: "K_I8", DType.UINT8: "K_U8",
    DType.INT16: "K_I16", DType.UINT16: "K_U16", DType.INT32: "K_I32", DType.UINT32: "K_U32", DType.INT64: "K_I64",
    DType.UINT64: "K_U64", DType.BOOL: "K_BOOL",
}


# ---- placeholders ------------------------------------------------------------------------------
def placeholders(graph: Graph, plan: MemoryPlan) -> list[tuple[str, Location]]:
    """The graph's inputs and outputs that live in the mutable region, by offset."""
    names = [n for n in dict.fromkeys(graph.inputs + graph.outputs) if plan.locations[n].region == MUTABLE]
    return sorted(((n, plan.locations[n]) for n in names), key=lambda item: item[1].offset)


def c_identifiers(names: list[str]) -> dict[str, str]:
    """A distinct C identifier for every name (other characters become ``_``, clashes get ``_N``)."""
    taken = set(MEMORY_MACROS)
    result = {}
    for name in names:
        base = re.sub(r"\W", "_", name, flags=re.ASCII) or "_"
        ident, suffix = base, 1
        while ident in taken:
            ident, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(ident)
        result[name] = ident
    return result


def glow_type_name(ttype: TensorType) -> str:
    """The type as Glow prints it: ``float<1 x 1 x 28 x 28>``, ``i8[S:0.0078 O:-1][-0.992,1.000]<...>``."""
    quant, element = ttype.quant, GLOW_ELEMENT_NAMES[ttype.dtype]
    if ttype.dtype is DType.INT32 and quant is not None:
        element = "i32"
    if quant is not None and len(quant.scale) == 1:
        info = np.iinfo(ttype.dtype.numpy)
        scale, zero = quant.scale[0], quant.zero_point[0]
        element += f"[S:{scale:.4f} O:{zero}][{(info.min - zero) * scale:.3f},{(info.max - zero) * scale:.3f}]"
    elif quant is not None:
        element += f"[per-channel axis:{quant.axis}]"
    return element + "<" + " x ".join(str(d) for d in ttype.shape) + ">"


def activations_efficiency(plan: MemoryPlan) -> float:
    """Glow's allocation efficiency: the most bytes ever live at once over the activations size."""
    buffers = [b for b in plan.buffers if b.placeholder is None]
    if not plan.activations_size or not buffers:
        return 0.0
    steps = range(min(b.start for b in buffers), max(b.end for b in buffers) + 1)
    peak = max(sum(align(b.size) for b in buffers if b.start <= t <= b.end) for t in steps)
    return peak / plan.activations_size


# ---- weights -----------------------------------------------------------------------------------
def weights_blob(graph: Graph, plan: MemoryPlan) -> bytes:
    """The constant region: every constant's little-endian bytes at its planned offset, then the layers'
    parameter blocks, zeros between."""
    blob = bytearray(plan.constant_size)
    for name, loc in plan.locations.items():
        if loc.region != CONSTANT:
            continue
        dtype = graph.type_of(name).dtype.numpy.newbyteorder("<")
        data = np.ascontiguousarray(graph.value_of(name), dtype=dtype).tobytes()
        if len(data) != loc.size:
            raise ValueError(f"constant '{name}' has {len(data)} bytes, the plan gives it {loc.size}")
        blob[loc.offset:loc.offset + loc.size] = data
    for offset, data in plan.parameters:   # the layers' per-channel tables (kernels/parameters.py)
        blob[offset:offset + len(data)] = data
    return bytes(blob)


def render_weights_txt(blob: bytes) -> bytes:
    """The bytes as `` 0X..,`` items, 20 a line, ending with a newline (Glow's NAME.weights.txt), as ASCII."""
    return b"".join(weights_txt_chunks(blob))


WEIGHTS_TXT_LINES = 1 << 15   # lines of text per chunk: about 4 MB, whatever the size of the weights


def weights_txt_chunks(blob: bytes, lines_per_chunk: int = WEIGHTS_TXT_LINES) -> Iterator[bytes]:
    """``render_weights_txt`` a chunk at a time, for writing straight to a file: the text is six times the
    weights (VGG-19: 548 MB of weights, 3.3 GB of text), too much to hold in memory. Built in NumPy, one
    table row per byte value."""
    items = np.frombuffer("".join(f" 0X{b:02X}," for b in range(256)).encode(), "V6")   # one 6-byte item each
    data = np.frombuffer(blob, np.uint8)
    step = lines_per_chunk * BYTES_PER_LINE
    width = BYTES_PER_LINE * 6 + 1
    for start in range(0, len(data) + 1, step):
        part = data[start:start + step]
        lines, rest = divmod(len(part), BYTES_PER_LINE)
        last = start + step > len(data)
        text = np.empty(lines * width + rest * 6 + last, np.uint8)
        full = text[:lines * width].reshape(lines, width)
        full[:, :-1] = items[part[:lines * BYTES_PER_LINE]].view(np.uint8).reshape(lines, width - 1)
        full[:, -1] = ord("\n")
        text[lines * width:lines * width + rest * 6] = items[part[lines * BYTES_PER_LINE:]].view(np.uint8)
        if last:
            text[-1] = ord("\n")
        yield text.tobytes()


# ---- header ------------------------------------------------------------------------------------
RULE = "// " + "-" * 63
COMMON_DEFS = """\
#ifndef _GLOW_BUNDLE_COMMON_DEFS
#define _GLOW_BUNDLE_COMMON_DEFS

// Glow bundle error code for correct execution.
#define GLOW_SUCCESS 0

// Memory alignment definition with given alignment size
// for static allocation of memory.
#define GLOW_MEM_ALIGN(size)  __attribute__((aligned(size)))

// Macro function to get the absolute address of a
// placeholder using the base address of the mutable
// weight buffer and placeholder offset definition.
#define GLOW_GET_ADDR(mutableBaseAddr, placeholderOff)  (((uint8_t*)(mutableBaseAddr)) + placeholderOff)
#endif
"""
DYNAMIC_DEFS = """
#ifndef _GLOW_BUNDLE_DYNAMIC_DEFS
#define _GLOW_BUNDLE_DYNAMIC_DEFS

// Type describing a symbol table entry of a generated bundle.
typedef struct SymbolTableEntry {
  // Name of a variable.
  const char *name;
  // Offset of the variable inside the memory area.
  uint64_t offset;
  // The number of elements inside this variable.
  uint64_t size;
  // Variable kind: 1 if it is a mutable variable, 0 otherwise.
  char kind;
} SymbolTableEntry;

// Type describing the config of a generated bundle.
typedef struct BundleConfig {
  // Size of the constant weight variables memory area.
  uint64_t constantWeightVarsMemSize;
  // Size of the mutable weight variables memory area.
  uint64_t mutableWeightVarsMemSize;
  // Size of the activations memory area.
  uint64_t activationsMemSize;
  // Alignment to be used for weights and activations.
  uint64_t alignment;
  // Number of symbols in the symbol table.
  uint64_t numSymbols;
  // Symbol table.
  const SymbolTableEntry *symbolTable;
} BundleConfig;
#endif
"""


def _model_info(name: str, graph: Graph, plan: MemoryPlan, idents: dict[str, str]) -> list[str]:
    total = plan.constant_size + plan.mutable_size + plan.activations_size
    lines = [f'// Model name: "{name}"', f"// Total data size: {total} (bytes)",
             f"// Activations allocation efficiency: {activations_efficiency(plan):.4f}", "// Placeholders:"]
    for tensor, loc in placeholders(graph, plan):
        ttype = graph.type_of(tensor)
        shown = f'"{idents[tensor]}"' + ("" if idents[tensor] == tensor else f" (model tensor {c_comment(tensor)})")
        lines += ["//", f"//   Name: {shown}", f"//   Type: {glow_type_name(ttype)}",
                  f"//   Size: {ttype.size} (elements)", f"//   Size: {loc.size} (bytes)",
                  f"//   Offset: {loc.offset} (bytes)"]
    return lines + ["//"]


def _overwrite_note(plan: MemoryPlan) -> list[str]:
    """Exported with --reuse-input-memory: the inference overwrites its inputs (memory/plan.py)."""
    if not plan.reuses_inputs:
        return []
    return ["// NOTE: exported with --reuse-input-memory: every tensor lives in",
            '// "mutableWeight" (ACTIVATIONS_MEM_SIZE is 0) and the inference',
            "// OVERWRITES the input placeholders: write the inputs again",
            "// before every call."]


def _static_api(upper: str, graph: Graph, plan: MemoryPlan, idents: dict[str, str]) -> list[str]:
    entries = [(idents[tensor], loc.offset) for tensor, loc in placeholders(graph, plan)]
    width = max((len(ident) for ident, _ in entries), default=0)
    lines = ["// Placeholder address offsets within mutable buffer (bytes)."]
    lines += [f"#define {upper}_{ident.ljust(width)}  {offset}" for ident, offset in entries]
    sizes = zip(MEMORY_MACROS, (plan.constant_size, plan.mutable_size, plan.activations_size))
    lines += ["", "// Memory sizes (bytes)."]
    lines += [f"#define {upper}_{macro.ljust(20)}  {size}" for macro, size in sizes]
    return lines + ["", "// Memory alignment (bytes).", f"#define {upper}_MEM_ALIGN  {ALIGN}", ""]


def _quant_macros(upper: str, graph: Graph, plan: MemoryPlan, idents: dict[str, str]) -> list[str]:
    """Scale and zero point of integer placeholders (``--quantized-io``): real = SCALE * (q - OFFSET)."""
    lines = []
    for tensor, _ in placeholders(graph, plan):
        quant = graph.type_of(tensor).quant
        if quant is not None and len(quant.scale) == 1:
            lines += [f"#define {upper}_{idents[tensor]}_SCALE  {quant.scale[0]!r}f",
                      f"#define {upper}_{idents[tensor]}_OFFSET  {quant.zero_point[0]}"]
    if lines:
        lines = ["// Quantized placeholders: real value = SCALE * (integer - OFFSET)."] + lines + [""]
    return lines


def render_header(name: str, graph: Graph, plan: MemoryPlan, api: str) -> str:
    """NAME.h for ``api`` "static" (offset and size macros) or "dynamic" (``NAME_config``)."""
    if api not in ("static", "dynamic"):
        raise ValueError(f"unknown bundle API '{api}' (valid: static, dynamic)")
    upper = bundle_name(name).upper()
    idents = c_identifiers([tensor for tensor, _ in placeholders(graph, plan)])
    if api == "static":
        model_api = _static_api(upper, graph, plan, idents)
    else:
        model_api = ["// Bundle memory configuration (memory layout).", f"extern BundleConfig {name}_config;", ""]
    model_api += _quant_macros(upper, graph, plan, idents)
    lines = [
        "// Bundle API auto-generated header file. Do not edit!", f"// Generated by pegasus {__version__}.",
        f"#ifndef _GLOW_BUNDLE_{upper}_H", f"#define _GLOW_BUNDLE_{upper}_H", "", "#include <stdint.h>", "",
        RULE, "//                       Common definitions", RULE,
        COMMON_DEFS + (DYNAMIC_DEFS if api == "dynamic" else ""),
        RULE, "//                          Bundle API", RULE,
        *_model_info(name, graph, plan, idents),
        '// NOTE: Placeholders are allocated within the "mutableWeight"',
        "// buffer and are identified using an offset relative to base.", *_overwrite_note(plan), RULE,
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "", *model_api,
        "// Bundle entry point (inference function). Returns 0",
        "// for correct execution or some error code otherwise.",
        f"int {name}(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);", "",
        "#ifdef __cplusplus", "}", "#endif", "#endif",
    ]
    return "\n".join(lines) + "\n"


# ---- dynamic API: the config inside the object -------------------------------------------------
def _string_constant(module: ir.Module, symbol: str, text: str) -> ir.Constant:
    data = bytearray(text.encode() + b"\0")
    array = ir.ArrayType(ir.IntType(8), len(data))
    variable = ir.GlobalVariable(module, array, name=symbol)
    variable.linkage, variable.global_constant, variable.unnamed_addr = "private", True, True
    variable.initializer = ir.Constant(array, data)
    return variable.bitcast(ir.IntType(8).as_pointer())


def _constant_global(module: ir.Module, value: ir.Constant, symbol: str, linkage: str) -> ir.GlobalVariable:
    variable = ir.GlobalVariable(module, value.type, name=symbol)
    variable.linkage, variable.global_constant, variable.initializer = linkage, True, value
    return variable


def add_dynamic_config(module: ir.Module, name: str, graph: Graph, plan: MemoryPlan) -> None:
    """Add ``BundleConfig NAME_config`` and its symbol table (one entry per placeholder) to ``module``.

    The structs are LLVM literal structs whose layout the target's data layout decides, which is the
    C layout of the header's typedefs on every target (x86-64, i386, 32-bit ARM, AArch64).
    """
    i8, i64 = ir.IntType(8), ir.IntType(64)
    entry_type = ir.LiteralStructType([i8.as_pointer(), i64, i64, i8])
    config_type = ir.LiteralStructType([i64] * 5 + [entry_type.as_pointer()])
    items = placeholders(graph, plan)
    idents = c_identifiers([tensor for tensor, _ in items])
    entries = [ir.Constant(entry_type, [_string_constant(module, f"{name}_symbol{index}", idents[tensor]),
                                        i64(loc.offset), i64(graph.type_of(tensor).size), i8(MUTABLE_KIND)])
               for index, (tensor, loc) in enumerate(items)]
    table = _constant_global(module, ir.Constant(ir.ArrayType(entry_type, len(entries)), entries),
                             f"{name}SymbolTable", "internal")
    fields = [plan.constant_size, plan.mutable_size, plan.activations_size, ALIGN, len(entries)]
    config = ir.Constant(config_type, [i64(v) for v in fields] + [table.bitcast(entry_type.as_pointer())])
    _constant_global(module, config, f"{name}_config", "")  # "" = external definition


# ---- example program ---------------------------------------------------------------------------
def _template(file_name: str, values: dict[str, str]) -> str:
    text = (resources.files("pegasus.exporters.glow") / "templates" / file_name).read_text(encoding="utf-8")
    return fill_template(text, values)


def _placeholder_rows(graph: Graph, plan: MemoryPlan, tensors: list[str]) -> str:
    rows = []
    for tensor in tensors:
        ttype, loc = graph.type_of(tensor), plan.locations[tensor]
        descr = ttype.dtype.numpy.newbyteorder("<").str
        rows.append(f"  {{{c_string(tensor)}, {loc.offset}, {loc.size}, {ttype.size}, {C_KINDS[ttype.dtype]}, "
                    f"{c_string(descr)}, {c_string(glow_type_name(ttype))}}},")
    return "\n".join(rows) or "  {NULL, 0, 0, 0, K_F32, NULL, NULL},"


def render_main_c(name: str, graph: Graph, plan: MemoryPlan) -> str:
    """The example host program: loads the weights and the inputs, runs, prints top-5 and timing."""
    ins = [n for n in dict.fromkeys(graph.inputs) if plan.locations[n].region == MUTABLE]
    outs = [n for n in dict.fromkeys(graph.outputs) if plan.locations[n].region == MUTABLE]
    return _template("main.c", {
        "NAME": bundle_name(name), "CONSTANT_SIZE": str(plan.constant_size), "MUTABLE_SIZE": str(plan.mutable_size),
        "INPUTS_OVERWRITTEN": str(int(plan.reuses_inputs)),
        "ACTIVATIONS_SIZE": str(plan.activations_size), "ALIGN": str(ALIGN),
        "NUM_INPUTS": str(len(ins)), "NUM_OUTPUTS": str(len(outs)),
        "INPUTS": _placeholder_rows(graph, plan, ins), "OUTPUTS": _placeholder_rows(graph, plan, outs),
    })


def render_makefile(name: str) -> str:
    return _template("Makefile.mk", {"NAME": make_word(bundle_name(name))})
