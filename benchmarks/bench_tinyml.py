"""int8 bundles of the MLPerf Tiny models on Cortex-M against the best published engines (issue 17).

For the four MLPerf Tiny models (benchmarks/tinyml_models.py: full-int8 .tflite, int8 input and output,
imported with ``pegasus import tflite`` and its own .quantize, rounding tflite) and the demo LeNet quantized
by pegasus (per-channel int8, bench_quantized.quantized_lenet, integer I/O as ``export glow --quantized-io``),
on each CPU of --cpus (qemu mps2 boards, ``-icount shift=0``), one row per model and CPU:
- INSTRUCTIONS per inference of the int8 bundle (qemu -icount: instructions, not cycles) and MACs per
  instruction (MACs: profile.node_macs over the integer graph);
- beside them the best published cycles for that core and TFLite Micro + CMSIS-NN's reference submission on
  the M4 (constants below, with their source);
- on cortex-m7 the float bundle's instructions (the float .tflite, or the float LeNet) and float / int8;
- ACTIVATIONS, MUTABLE, their sum, TFLite Micro's arena for the same .tflite (tflite-micro's
  print_allocations) and sum / arena; the stack the bundle call used (painted and scanned by the harness);
  code (.text* + .rodata* + .data.rel.ro* of NAME.o, memory_report.object_sizes) of the int8 and float bundle;
- one PASS/MISS column per issue target: instructions <= the M4's published cycles on both cores (``instr``),
  float / int8 >= 2 on every conv model on cortex-m7 (``f/i``), ACTIVATIONS + MUTABLE <= half the arena
  (``ram``), and LeNet int8 ACTIVATIONS <= 3,680 B (``act``) and code <= 8,380 B (``code``) on cortex-m7.
Inputs: NumPy default_rng(0) integers over the int8 range in the input's shape (float bundles:
default_rng(0) standard normal); LeNet: held-out digit 0 (its int8 input from the integer reference).

The CSV goes to benchmarks/results/tinyml.csv unless --csv PATH (written to a temporary file, then renamed).
--profile adds, per model and CPU, the costliest layers (the probe build of ``pegasus run --profile``).

    python benchmarks/bench_tinyml.py [--models kws_ds_cnn,...,lenet_int8] [--cpus cortex-m4,cortex-m7]
        [--skip-float] [--csv PATH] [--jobs N] [--profile]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pegasus.exporters.glow.export import export_bundle  # noqa: E402
from pegasus.exporters.glow.memory.report import object_sizes  # noqa: E402
from pegasus.exporters.glow.run import toolchains  # noqa: E402
from pegasus.exporters.glow.run.profile import export_instrumented, node_macs, profile_table  # noqa: E402
from pegasus.exporters.glow.run.target_run import output_spec, run_bundle  # noqa: E402
from pegasus.exporters.glow.target import resolve_target  # noqa: E402
from pegasus.fileio import atomic_write  # noqa: E402
from pegasus.ir import serialize  # noqa: E402
from pegasus.ir.dtypes import DType  # noqa: E402
from pegasus.ir.graph import Graph  # noqa: E402

TINYML = ("kws_ds_cnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder")
MODELS = (*TINYML, "lenet_int8")
CPUS = ("cortex-m4", "cortex-m7")
CONV = {"kws_ds_cnn", "vww_mobilenet", "ic_resnet8", "lenet_int8"}   # the f/i >= 2 target's models
NAME = "net"

# Best published cycles per inference (MLPerf Tiny inference results, latency x clock), as issue 17 cites them:
# cortex-m7: STM32Cube.AI 9 on STM32H7A3 at 280 MHz (KWS 11.3 ms -> 3.17 M); cortex-m4: STM32L4R5 at 120 MHz,
# the autoencoder's M4 figure Plumerai's.
BEST = {"kws_ds_cnn": {"cortex-m7": 3_170_000, "cortex-m4": 5_180_000},
        "vww_mobilenet": {"cortex-m7": 6_670_000, "cortex-m4": 10_670_000},
        "ic_resnet8": {"cortex-m7": 11_440_000, "cortex-m4": 19_820_000},
        "ad_autoencoder": {"cortex-m7": 340_000, "cortex-m4": 490_000}}
# TFLite Micro + CMSIS-NN, the MLPerf Tiny reference submission on a Cortex-M4 (cycles per inference).
TFLM_CMSIS_M4 = {"kws_ds_cnn": 21_800_000, "vww_mobilenet": 72_100_000, "ic_resnet8": 84_500_000,
                 "ad_autoencoder": 1_200_000}
# Issue 17's targets: instructions <= the M4's published cycles on both cores; LeNet int8 on cortex-m7 within
# Glow's figures (ACTIVATIONS with CMSIS-NN's smaller plan 3,680 B; code 8,380 B).
TARGET_INSTRUCTIONS = {"kws_ds_cnn": 5_200_000, "vww_mobilenet": 10_700_000, "ic_resnet8": 19_800_000,
                       "ad_autoencoder": 490_000}
LENET_ACTIVATIONS, LENET_CODE = 3_680, 8_380
FLOAT_RATIO, ARENA_SHARE, STACK_LIMIT = 2.0, 0.5, 512

CSV_COLUMNS = ("model", "cpu", "instructions", "macs", "macs_per_instruction", "best_published_cycles",
               "tflm_cmsis_m4_cycles", "target_instructions", "instructions_target", "float_instructions",
               "float_over_int8", "float_ratio_target", "activations", "mutable", "ram", "ram_reusing_input",
               "tflm_arena", "ram_over_arena", "ram_target", "stack", "stack_target", "code_int8", "code_float",
               "code_target", "weights_int8", "weights_float", "lenet_activations_target", "lenet_code_target")


@dataclass
class Subject:
    """A model as the benchmark runs it: the int8 graph with integer I/O and the float graph, with inputs."""
    name: str
    int8: Graph
    int8_feeds: dict[str, np.ndarray]
    float: Graph
    float_feeds: dict[str, np.ndarray]
    tflite: Path | None       # the int8 .tflite (TFLite Micro's arena), None for LeNet


@dataclass
class Measured:
    instructions: int
    stack: int
    activations: int
    mutable: int
    code: int
    macs: int
    ram_reusing_input: int     # ACTIVATIONS + MUTABLE with --reuse-input-memory (inputs overwritten)
    weights: int               # CONSTANT_MEM_SIZE: the weights, with the layers' requantisation tables


def random_feeds(graph: Graph) -> dict[str, np.ndarray]:
    """default_rng(0) over each input: the full integer range, or standard normal floats."""
    rng = np.random.default_rng(0)
    feeds = {}
    for name in graph.inputs:
        kind = graph.type_of(name)
        shape, dtype = tuple(kind.shape), kind.dtype.numpy
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            feeds[name] = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def import_tflite(path: Path, folder: Path) -> tuple[Path, Path, Path]:
    """``pegasus import tflite`` as a user runs it: (m.json, m.data, m.quantize)."""
    files = (folder / "m.json", folder / "m.data", folder / "m.quantize")
    proc = subprocess.run([sys.executable, "-m", "pegasus", "import", "tflite", "--model", str(path),
                           "--output-model", str(files[0]), "--output-data", str(files[1]),
                           "--output-quantize", str(files[2])], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pegasus import tflite {path} failed:\n{proc.stderr}")
    return files


def tinyml_subject(name: str, work: Path) -> Subject:
    from tinyml_models import tflite_model

    from pegasus.commands.quantized_model import lower_model
    from pegasus.quantized.lower import expose_integer_io

    path = tflite_model(name)
    json_path, data_path, table = import_tflite(path, work / "int8")
    integer = expose_integer_io(lower_model(serialize.load(json_path, data_path), str(table), show=False))
    float_json, float_data, _ = import_tflite(tflite_model(name, float_model=True), work / "float")
    floating = serialize.load(float_json, float_data)
    return Subject(name, integer, random_feeds(integer), floating, random_feeds(floating), path)


def lenet_subject() -> Subject:
    from bench_quantized import quantized_lenet
    from heldout import heldout_digits

    from pegasus.quantized.lower import expose_integer_io, lower_to_integer
    from pegasus.runtime import interpreter

    graph, table, _ = quantized_lenet("pc8")
    lowered = lower_to_integer(graph, table)
    integer = expose_integer_io(lowered)
    image = heldout_digits()[0][0][None]
    every = interpreter.run(lowered.graph, {"data": image}, keep_all=True)
    return Subject("lenet_int8", integer, {name: every[name] for name in integer.inputs}, graph, {"data": image},
                   None)


def measure(graph: Graph, feeds: dict[str, np.ndarray], cpu: str, folder: Path) -> Measured:
    """Export for ``cpu``, run once under qemu (-icount): instructions, stack, buffers, code and MACs."""
    target = resolve_target("arm", cpu)
    result = export_bundle(graph, folder, NAME, target)
    code = object_sizes((folder / f"{NAME}.o").read_bytes()).code_size
    run = run_bundle(folder, NAME, target, feeds, output_spec(result.graph))
    check_outputs(graph, feeds, run.outputs, cpu)
    macs = sum(node_macs(graph, node) for node in graph.nodes)
    plan = result.plan
    reused = export_bundle(graph, folder.with_name(folder.name + "-reuse"), NAME, target, reuse_input_memory=True).plan
    return Measured(run.instructions, run.stack, plan.activations_size, plan.mutable_size, code, macs,
                    reused.activations_size + reused.mutable_size, plan.constant_size)


def check_outputs(graph: Graph, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray], cpu: str) -> None:
    """A bundle is timed only if it computes what ``pegasus inference`` does: the integer bundles bit for bit,
    the float ones to 1e-4 of the largest output."""
    from pegasus.runtime import interpreter

    for name, want in interpreter.run(graph, feeds).items():
        got = outputs[name]
        exact = want.dtype.kind in "iu"
        ok = np.array_equal(got, want) if exact else np.allclose(got, want, atol=1e-4 * max(1.0, np.abs(want).max()))
        if not ok:
            print(f"bench_tinyml: {graph.name} on {cpu}: output '{name}' differs from pegasus inference",
                  file=sys.stderr)
            raise SystemExit(1)


def top_layers(graph: Graph, feeds: dict[str, np.ndarray], cpu: str, folder: Path, count: int = 6) -> str:
    """The ``count`` costliest layers of the probe build ``pegasus run --profile`` uses."""
    target = resolve_target("arm", cpu)
    bundle = export_instrumented(graph, folder, NAME, target)
    board = toolchains.board_for(cpu)
    run = toolchains.run_cortex_m_detailed(folder, NAME, cpu, feeds, output_spec(bundle.graph), icount=True,
                                           probes=bundle.probes)
    _, rows = profile_table(bundle, run.probes, run.calibration, board.instructions_per_tick)
    nodes = {node.name: node for node in bundle.graph.nodes}
    total = sum(cost for _, cost, _ in rows) or 1.0
    lines = [f"  {'instructions':>12}  {'share':>6}  {'MACs':>10}  {'MAC/instr':>9}  layer"]
    for layer, cost, macs in sorted(rows, key=lambda row: -row[1])[:count]:
        ratio = f"{macs / cost:.3f}" if macs and cost else "-"
        described = " + ".join(describe(bundle.graph, nodes[node]) for node in layer.split(" + "))
        lines.append(f"  {cost:>12,.0f}  {100 * cost / total:>5.1f}%  {macs:>10,}  {ratio:>9}  {described}")
    return "\n".join(lines)


def describe(graph: Graph, node) -> str:
    """A layer's node as op, group, output shape and weight shape, then the start of its (often long) name."""
    weight = next((graph.type_of(name) for name in node.inputs
                   if name and graph.tensors[name].is_constant and len(graph.type_of(name).shape) >= 2), None)
    if weight is not None:      # int32 words of two 16-bit weights (integer_conv_weights.spread_pairs): the weights
        weight = weight.shape[:-1] + (weight.shape[-1] * (2 if weight.dtype is DType.INT32 else 1),)
    group = getattr(node.attrs, "group", 1)
    shape = "x".join(map(str, graph.type_of(node.outputs[0]).shape))
    return (f"{node.op}{f' group {group}' if group != 1 else ''} -> {shape}"
            f"{' weight ' + 'x'.join(map(str, weight)) if weight else ''} ({node.name.split(';')[0][:48]})")


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def benchmark_model(name: str, cpus: tuple[str, ...], skip_float: bool, profile: bool) -> tuple[list[dict], str]:
    """Every row of one model (one per CPU) and its --profile text."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix=f"bench-tinyml-{name}-") as tmp:
        work = Path(tmp)
        subject = lenet_subject() if name == "lenet_int8" else tinyml_subject(name, work / "import")
        arena = None
        if subject.tflite is not None:
            from tests.support.tflm import tflm_arena_bytes

            arena = tflm_arena_bytes(subject.tflite)
        floating = None
        if not skip_float and "cortex-m7" in cpus:
            floating = measure(subject.float, subject.float_feeds, "cortex-m7", work / "float-m7")
        rows, profiles = [], []
        for cpu in cpus:
            got = measure(subject.int8, subject.int8_feeds, cpu, work / f"int8-{cpu}")
            rows.append(row_of(name, cpu, got, floating if cpu == "cortex-m7" else None, arena))
            if profile:
                profiles.append(f"{name} on {cpu}: {got.instructions:,} instructions\n"
                                + top_layers(subject.int8, subject.int8_feeds, cpu, work / f"profile-{cpu}"))
    return rows, "\n".join(profiles)


def row_of(name: str, cpu: str, got: Measured, floating: Measured | None, arena: int | None) -> dict:
    ram = got.activations + got.mutable
    target = TARGET_INSTRUCTIONS.get(name)
    lenet_m7 = name == "lenet_int8" and cpu == "cortex-m7"
    ratio = floating.instructions / got.instructions if floating else None
    return {
        "model": name, "cpu": cpu, "instructions": got.instructions, "macs": got.macs,
        "macs_per_instruction": round(got.macs / got.instructions, 4), "best_published_cycles":
        BEST.get(name, {}).get(cpu, ""), "tflm_cmsis_m4_cycles": TFLM_CMSIS_M4.get(name, ""),
        "target_instructions": target or "",
        "instructions_target": verdict(got.instructions <= target) if target else "",
        "float_instructions": floating.instructions if floating else "",
        "float_over_int8": round(ratio, 3) if ratio else "",
        "float_ratio_target": verdict(ratio >= FLOAT_RATIO) if ratio and name in CONV else "",
        "activations": got.activations, "mutable": got.mutable, "ram": ram, "ram_reusing_input": got.ram_reusing_input,
        "tflm_arena": arena or "", "ram_over_arena": round(ram / arena, 3) if arena else "",
        "ram_target": ram_verdict(ram, got.ram_reusing_input, arena) if arena else "",
        "stack": got.stack, "stack_target": verdict(got.stack <= STACK_LIMIT),
        "code_int8": got.code, "code_float": floating.code if floating else "",
        "code_target": verdict(got.code <= floating.code) if floating else "",
        "weights_int8": got.weights, "weights_float": floating.weights if floating else "",
        "lenet_activations_target": verdict(got.activations <= LENET_ACTIVATIONS) if lenet_m7 else "",
        "lenet_code_target": verdict(got.code <= LENET_CODE) if lenet_m7 else "",
    }


def ram_verdict(ram: int, reusing_input: int, arena: int) -> str:
    """PASS with Glow's buffers as they are; PASS-reuse when only ``--reuse-input-memory`` (the input
    overwritten, as in TFLite Micro's arena) brings the RAM within half the arena."""
    if ram <= ARENA_SHARE * arena:
        return "PASS"
    return "PASS-reuse" if reusing_input <= ARENA_SHARE * arena else "MISS"


def _cell(value, kind: str) -> str:
    if value == "" or value is None:
        return "-"
    if kind == "M":
        return f"{value / 1e6:.3f}M"
    if kind == "B":
        return f"{value:,}"
    if kind == "x":
        return f"{value:.2f}"
    return str(value)


def render(rows: list[dict]) -> str:
    """The table: one line per model and CPU, targets as PASS/MISS (``-`` where a target does not apply)."""
    spec = (("model", "model", ""), ("cpu", "cpu", ""), ("int8 instr", "instructions", "M"),
            ("MAC/instr", "macs_per_instruction", "x"), ("best pub.", "best_published_cycles", "M"),
            ("TFLM M4", "tflm_cmsis_m4_cycles", "M"), ("target", "target_instructions", "M"),
            ("instr", "instructions_target", ""), ("float M7", "float_instructions", "M"),
            ("f/i", "float_over_int8", "x"), ("f/i>=2", "float_ratio_target", ""),
            ("ACTIV", "activations", "B"), ("MUTABLE", "mutable", "B"), ("sum", "ram", "B"),
            ("reuse in", "ram_reusing_input", "B"),
            ("TFLM arena", "tflm_arena", "B"), ("sum/arena", "ram_over_arena", "x"), ("ram<=1/2", "ram_target", ""),
            ("stack", "stack", "B"), ("stack<=512", "stack_target", ""), ("code int8", "code_int8", "B"),
            ("code float", "code_float", "B"), ("code<=float", "code_target", ""),
            ("weights int8", "weights_int8", "B"), ("weights float", "weights_float", "B"),
            ("act<=3680", "lenet_activations_target", ""), ("code<=8380", "lenet_code_target", ""))
    table = [[title for title, _, _ in spec]] + [[_cell(row[key], kind) for _, key, kind in spec] for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(spec))]
    return "\n".join("  ".join(cell.ljust(width) if column < 2 else cell.rjust(width)
                               for column, (cell, width) in enumerate(zip(line, widths))).rstrip()
                     for line in table)


def write_csv(path: Path, rows: list[dict]) -> None:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, text.getvalue())


def _list(value: str, known: tuple[str, ...], flag: str) -> tuple[str, ...]:
    chosen = tuple(item for item in value.split(",") if item)
    unknown = [item for item in chosen if item not in known]
    if unknown or not chosen:
        print(f"bench_tinyml: {flag} {value}: unknown {', '.join(unknown) or 'empty list'} "
              f"(valid: {', '.join(known)})", file=sys.stderr)
        raise SystemExit(2)
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--cpus", default=",".join(CPUS), help="comma-separated: cortex-m4, cortex-m7")
    parser.add_argument("--skip-float", action="store_true", help="do not build and run the float bundles")
    parser.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "results" / "tinyml.csv")
    parser.add_argument("--jobs", type=int, default=1, help="models measured at once (default 1)")
    parser.add_argument("--profile", action="store_true", help="print each model's costliest layers")
    args = parser.parse_args(argv)
    models = _list(args.models, MODELS, "--models")
    cpus = _list(args.cpus, CPUS, "--cpus")
    start = time.monotonic()
    jobs = [(name, cpus, args.skip_float, args.profile) for name in models]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(benchmark_model, *zip(*jobs)))
    else:
        results = [benchmark_model(*job) for job in jobs]
    rows = [row for model_rows, _ in results for row in model_rows]
    print("int8 bundles (integer I/O) on qemu mps2 boards with -icount shift=0: INSTRUCTIONS per inference, not "
          "cycles; M = million; bytes otherwise")
    print(render(rows))
    print("best pub.: best published cycles on that core (MLPerf Tiny: STM32Cube.AI 9, H7A3 / L4R5; AD M4: "
          "Plumerai); TFLM M4: TFLite Micro + CMSIS-NN reference submission, cycles on a Cortex-M4")
    print("targets: instr <= the M4's published cycles on both cores; float/int8 >= 2 on conv models (M7); "
          "ACTIVATIONS + MUTABLE <= half of TFLite Micro's arena; stack <= 512 B; int8 code (.text + .rodata) <= "
          "the float bundle's (M7); LeNet int8 on M7: ACTIVATIONS <= 3,680 B, "
          "code <= 8,380 B")
    for _, text in results:
        if text:
            print("\n" + text)
    write_csv(args.csv, rows)
    print(f"\nwrote {args.csv} ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
