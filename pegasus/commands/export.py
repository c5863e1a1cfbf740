"""``pegasus export glow``: compile an imported model ahead of time into a Glow-format bundle."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import check_folder, check_target
from pegasus.ir import serialize

TARGETS = ("x86_64", "i386", "arm", "aarch64")
MCPUS = ("cortex-m0", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "cortex-a53", "cortex-a72", "native")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="export a model as deployable code",
                                   description="Export an imported model as deployable code.")
    kinds = parser.add_subparsers(dest="exporter", metavar="EXPORTER", required=True)
    glow = kinds.add_parser("glow", help="Glow-format AOT bundle: NAME.o, NAME.h, weights, example, memory report",
                            description="Compile the model with LLVM into a Glow-format bundle in --output-path.")
    glow.add_argument("--model", required=True, help="the model's .json file")
    glow.add_argument("--model-data", required=True, help="the model's .data file")
    glow.add_argument("--output-path", required=True, help="folder for the bundle files (created if missing)")
    glow.add_argument("--network-name", help="bundle name: file names, entry point and macro prefix "
                                             "(default: the model's stem, as a C identifier)")
    glow.add_argument("--target", help=f"CPU architecture: {', '.join(TARGETS)} (default: the host)")
    glow.add_argument("--mcpu", help=f"CPU: {', '.join(MCPUS)} (default: cortex-m7 for arm, cortex-a53 for "
                                     "aarch64, generic for x86)")
    glow.add_argument("--float-abi", help="soft or hard (default: hard where the CPU has an FPU)")
    glow.add_argument("--board", help="a board or MCU (pegasus boards lists them): sets --target/--mcpu/--float-abi "
                                      "and the memory report says whether the bundle fits its flash and RAM")
    glow.add_argument("--relocation-model", help="pic (default for x86_64, i386, aarch64: links into PIE and non-PIE "
                                                 "programs and shared libraries) or static (default for arm: "
                                                 "Cortex-M firmware)")
    glow.add_argument("--bundle-api", default="static", help="static (default): offsets as macros; dynamic: also "
                                                             "a BundleConfig NAME_config with a symbol table")
    glow.add_argument("--no-fuse", dest="fuse", action="store_false",
                      help="generate one layer per node instead of computing element-wise and pooling layers "
                           "inside the producing convolution's loop nest (to compare)")
    glow.add_argument("--dtype", choices=("float32", "quantized"), default="float32",
                      help="float32 (default) or quantized: integer kernels as the .quantize file says")
    glow.add_argument("--model-quantize", help="the .quantize file (with --dtype quantized); for a hybrid model "
                                               "pass --model NAME.quantize.json")
    glow.add_argument("--quantized-io", action="store_true",
                      help="with --dtype quantized: the input/output placeholders hold the integer tensors (scale "
                           "and zero point in the header) instead of float, which the bundle converts itself")
    glow.add_argument("--reuse-input-memory", action="store_true",
                      help="plan every tensor in the mutable buffer, over the input placeholders once they are read "
                           "(ACTIVATIONS_MEM_SIZE 0, less RAM in all): the inference overwrites its inputs, as "
                           "TFLite Micro's does; without it (Glow's way) the caller's inputs stay intact")
    glow.add_argument("--compact-weights", action="store_true",
                      help="keep 8-bit weights as bytes on Cortex-M CPUs with the DSP extension (half the flash of the "
                           "convolutions' weights, slower: their inner loops unpack them), instead of 16-bit pairs")
    glow.add_argument("--explain", action="store_true",
                      help="print, per layer, the implementation chosen, the candidates and why the others were "
                           "not, and its workspace and stream")
    glow.add_argument("--dump-graph-DAG", dest="dump_graph_dag", metavar="FILE.dot",
                      help="write the graph as Graphviz dot")
    glow.add_argument("--dump-memory-plan", metavar="FILE.png",
                      help="draw the activation memory plan (lifetime × address) as a PNG")
    glow.set_defaults(run=run_glow)
    _add_ovxlib(kinds)


def _add_ovxlib(kinds) -> None:
    """The Acuity guide's ``export ovxlib`` (VeriSilicon NPU case code), every flag of its table accepted, so that
    the guide's command line gets one line naming the ``export glow`` command that does the same job here."""
    ovx = kinds.add_parser("ovxlib", help="(Acuity) not an exporter of pegasus: prints the equivalent export glow "
                                          "command", description="Acuity's OVXLIB case code for VeriSilicon NPUs "
                                                                 "is not something pegasus makes; this names the "
                                                                 "equivalent pegasus export glow command (exit 2).")
    for flag in ("--model", "--model-data", "--with-input-meta", "--postprocess-file", "--output-path", "--optimize",
                 "--viv-sdk", "--build-platform", "--batch-size", "--customer-lids", "--customer-ops", "--dtype"):
        ovx.add_argument(flag)
    ovx.add_argument("--model-quantize", "-model-quantize", dest="model_quantize")  # the guide writes it both ways
    for flag in ("--save-fused-graph", "--force-remove-permute", "--pack-nbg-unify", "--pack-nbg-viplite"):
        ovx.add_argument(flag, action="store_true")
    ovx.set_defaults(run=run_ovxlib)


def run_ovxlib(args: argparse.Namespace) -> int:
    import shlex

    model = args.model or "NAME.json"
    stem = Path(model).name.removesuffix(".json").removesuffix(".quantize")
    line = ["pegasus", "export", "glow", "--model", model, "--model-data", args.model_data or f"{stem}.data",
            "--output-path", args.output_path or f"{stem}_bundle", "--target", "arm"]
    if args.dtype == "quantized" or args.model_quantize:
        line += ["--dtype", "quantized", "--model-quantize", args.model_quantize or f"{stem}.quantize"]
    raise PegasusError("export ovxlib (OVXLIB case code for VeriSilicon NPUs) is not something pegasus makes: "
                       "pegasus exports Glow bundles for Arm CPUs; the equivalent is: "
                       + " ".join(shlex.quote(arg) for arg in line))


#: names a bundle's entry point cannot take: C keywords, ``main`` (the example program's and the run harness's) and
#: what <math.h>, <stdio.h>, <stdlib.h> and <string.h> declare, which the programs around a bundle include
TAKEN_C_NAMES = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long register
restrict return short signed sizeof static struct switch typedef union unsigned void volatile while bool true false
alignas alignof nullptr static_assert thread_local typeof main
abs acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim floor fma
fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround modf nan
nearbyint nextafter pow remainder remquo rint round scalbn sin sinh sqrt tan tanh tgamma trunc
abort atexit atof atoi atol calloc div exit free getenv labs ldiv malloc qsort rand realloc srand strtod strtol system
fclose feof ferror fflush fgetc fgets fopen fprintf fputc fputs fread free freopen fscanf fseek ftell fwrite getc
getchar printf putc putchar puts remove rename rewind scanf snprintf sprintf sscanf
memchr memcmp memcpy memmove memset strcat strchr strcmp strcpy strlen strncmp strncpy strrchr strstr strtok
""".split())


def c_identifier(text: str) -> str:
    """``text`` as a C identifier a bundle's entry point can take: ASCII letters, digits and ``_`` (anything
    else becomes ``_``), at most 200 characters (a taken name, e.g. a model saved as main.onnx or exp.onnx, gets
    ``_net``). The name becomes file names, macros and Make variables: nothing in it may need escaping."""
    name = re.sub(r"\W", "_", text, flags=re.ASCII)[:200]
    name = name if name and not name[0].isdigit() else f"_{name}"[:200]
    return f"{name}_net" if name in TAKEN_C_NAMES else name


def run_glow(args: argparse.Namespace) -> int:
    from pegasus.boards import apply_board
    from pegasus.exporters.glow.export import export_bundle
    from pegasus.exporters.glow.target import resolve_target

    board = apply_board(args)
    target = resolve_target(args.target, args.mcpu, args.float_abi, args.relocation_model)
    if args.compact_weights:
        target = dataclasses.replace(target, byte_weights=True)
    if args.bundle_api not in ("static", "dynamic"):
        raise PegasusError(f"unknown --bundle-api '{args.bundle_api}' (valid: static, dynamic)")
    out_dir = check_folder(args.output_path, "--output-path")
    for flag, path in (("--dump-graph-DAG", args.dump_graph_dag), ("--dump-memory-plan", args.dump_memory_plan)):
        if path:
            check_target(path, flag)
    graph = serialize.load(args.model, args.model_data)
    if args.dtype == "quantized":
        from pegasus.commands.quantized_model import lower_model
        from pegasus.quantized.lower import expose_integer_io

        lowered = lower_model(graph, args.model_quantize)
        graph = expose_integer_io(lowered) if args.quantized_io else lowered.graph
    elif args.quantized_io or args.model_quantize:
        raise PegasusError("--model-quantize and --quantized-io need --dtype quantized")
    name = c_identifier(args.network_name or Path(args.model).stem)
    result = export_bundle(graph, out_dir, name, target, bundle_api=args.bundle_api, fuse=args.fuse, board=board,
                           reuse_input_memory=args.reuse_input_memory)
    if args.dump_graph_dag:
        from pegasus.exporters.glow.graph_dot import write_dot

        write_dot(result.graph, result.plan, Path(args.dump_graph_dag))
    if args.dump_memory_plan:
        from pegasus.exporters.glow.memory.plot import plot_memory_plan

        plot_memory_plan(result.graph, result.plan, Path(args.dump_memory_plan))
    if getattr(args, "explain", False):
        from pegasus.exporters.glow.pipeline import explain

        print(explain(result.schedule))
    print(f"exported {name} for {target.triple} ({target.cpu}) to {out_dir}")
    print(result.report)   # with --board, ends with the fit (a bundle that does not fit was refused unwritten)
    return 0


def report_board_fit(board, folder: Path, name: str, stack: int | None) -> str:
    """The fit section for ``board``, appended to NAME.memory.txt; a bundle that does not fit is refused."""
    import json

    from pegasus.exporters.glow.memory.report import board_fit
    from pegasus.fileio import atomic_write

    text = board_fit(board, json.loads((folder / f"{name}.memory.json").read_text()), stack)
    report = folder / f"{name}.memory.txt"
    atomic_write(report, report.read_text().split("\nFit on ")[0] + "\n" + text)
    return text
