"""``pegasus run``: export a model (or take an exported bundle), run it on its target — an emulated board
under qemu, or this machine — and set its outputs beside ``pegasus inference`` on the same input, with the
instructions per inference, the stack the bundle call used and the three buffers."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from pegasus.boards import apply_board
from pegasus.commands.export import MCPUS, TARGETS, c_identifier, report_board_fit
from pegasus.commands.inference import iterate_samples, model_for
from pegasus.errors import PegasusError
from pegasus.fileio import check_folder
from pegasus.runtime import interpreter
from pegasus.runtime.postprocess import format_top_n, save_outputs_npz


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run an exported bundle on an emulated board or this machine",
                                   description="Export the model as a Glow bundle (or take --bundle), run it on "
                                               "the target (Cortex-M: qemu-system-arm mps2 board, bare metal; "
                                               "aarch64: qemu-aarch64; x86_64: this machine) and compare its "
                                               "outputs with pegasus inference.")
    parser.add_argument("--model", required=True, help="the model's .json file")
    parser.add_argument("--model-data", required=True, help="the model's .data file")
    parser.add_argument("--dtype", choices=("float32", "quantized"), default="float32",
                        help="float32 (default) or quantized (with --model-quantize)")
    parser.add_argument("--model-quantize", help="the .quantize file (with --dtype quantized)")
    parser.add_argument("--target", help=f"CPU architecture: {', '.join(TARGETS)} (default: the host)")
    parser.add_argument("--mcpu", help=f"CPU: {', '.join(MCPUS)} (default: cortex-m7 for arm)")
    parser.add_argument("--float-abi", help="soft or hard (default: hard where the CPU has an FPU)")
    parser.add_argument("--board", help="a board or MCU (pegasus boards lists them): sets --target/--mcpu/"
                                        "--float-abi and says whether the bundle fits, with the measured stack")
    parser.add_argument("--bundle", metavar="DIR", help="a bundle exported earlier (export glow --output-path) "
                                                        "for the same model, --dtype and target")
    parser.add_argument("--with-input-meta", help="inputmeta .yml: the dataset to read samples from")
    parser.add_argument("--input", nargs="+", action="extend", metavar="FILE",
                        help="sample file(s) as for pegasus inference (.npy, .pb, .tensor, image)")
    parser.add_argument("--iterations", type=int, help="number of samples (default: all once)")
    parser.add_argument("--profile", action="store_true",
                        help="Cortex-M: instructions per layer, from a build with a probe between layers (the "
                             "probe's cost subtracted), sorted by cost")
    parser.add_argument("--explain", action="store_true",
                        help="print, per layer, the implementation chosen and why (as export glow --explain)")
    parser.add_argument("--compare-layers", action="store_true",
                        help="Cortex-M: read every layer's output back from the board and compare it with the "
                             "reference interpreter; names the first layer that differs")
    parser.add_argument("--reuse-input-memory", action="store_true",
                        help="export as export glow --reuse-input-memory does: every tensor in the mutable buffer, "
                             "over the inputs once read (the inference overwrites them)")
    parser.add_argument("--compact-weights", action="store_true",
                        help="export as export glow --compact-weights does: 8-bit weights stay bytes on Cortex-M "
                             "CPUs with the DSP extension (half the flash of the convolutions' weights, slower)")
    parser.add_argument("--output-dir", help="write the target's outputs there as outputs.npz")
    parser.add_argument("--keep-build", metavar="DIR", help="keep the bundle and the linked program there")
    parser.set_defaults(run=run)


def _bundle_name(folder: Path) -> str:
    objects = sorted(folder.glob("*.o"))
    if len(objects) != 1:
        raise PegasusError(f"expected one NAME.o in the bundle folder, found {len(objects)}", where=str(folder))
    return objects[0].stem


def _buffers(folder: Path, name: str) -> str:
    report = folder / f"{name}.memory.json"
    if not report.is_file():
        return "buffers: unknown (no memory report in the bundle)"
    sizes = json.loads(report.read_text())
    return (f"buffers: weights (constant) {sizes['weights']:,} B, input/output (mutable) "
            f"{sizes['input_output']:,} B, activations {sizes['activations']:,} B")


def _prepare(args: argparse.Namespace, graph, target, work: Path) -> tuple[Path, str]:
    """The bundle folder and name: --bundle as given, else a fresh export into ``work``."""
    if args.bundle:
        folder = Path(args.bundle)
        if not folder.is_dir():
            raise PegasusError("no such bundle folder", where=f"--bundle {folder}")
        return folder, _bundle_name(folder)
    from pegasus.exporters.glow.export import export_bundle

    name = c_identifier(Path(args.model).stem)
    result = export_bundle(graph, work, name, target, reuse_input_memory=args.reuse_input_memory)
    if getattr(args, "explain", False):
        from pegasus.exporters.glow.pipeline import explain

        print(explain(result.schedule))
    return work, name


def _profile(args, graph, target, name: str, feeds, spec, folder: Path, whole: int) -> None:
    """Export the bundle with probes between layers and run it on ``feeds`` (the last sample): the layer
    table of --profile, the layer-by-layer comparison of --compare-layers."""
    from pegasus.exporters.glow.run import toolchains
    from pegasus.exporters.glow.run.compare_layers import compare_layers
    from pegasus.exporters.glow.run.profile import export_instrumented, profile_table

    bundle = export_instrumented(graph, folder, name, target, args.reuse_input_memory)
    if args.compare_layers:
        print(compare_layers(bundle, folder, name, target.cpu, feeds, spec)[0], end="")
    if not args.profile:
        return
    board = toolchains.board_for(target.cpu)
    run = toolchains.run_cortex_m_detailed(folder, name, target.cpu, feeds, spec, icount=True, probes=bundle.probes)
    text, rows = profile_table(bundle, run.probes, run.calibration, 1e9 / board.clock_hz)
    print(text, end="")
    print(f"whole inference without probes: {whole:,} instructions; layers sum to "
          f"{sum(row[1] for row in rows):,.0f}")
    if args.output_dir:
        from pegasus.exporters.glow.run.profile import render_profile
        from pegasus.fileio import atomic_write

        chart = Path(args.output_dir) / "profile.png"
        atomic_write(chart, render_profile(f"{name} on {target.cpu} ({board.machine})", rows))
        print(f"wrote {chart}")


def run(args: argparse.Namespace) -> int:
    from pegasus.exporters.glow.lower import lower_for_export
    from pegasus.exporters.glow.run import toolchains
    from pegasus.exporters.glow.run.target_run import check_runnable, input_bytes, output_spec, run_bundle
    from pegasus.exporters.glow.target import resolve_target

    board = apply_board(args)
    target = resolve_target(args.target, args.mcpu, args.float_abi)
    if args.compact_weights:
        target = dataclasses.replace(target, byte_weights=True)
    check_runnable(target)   # a missing tool or board is reported before anything is compiled
    if args.model_quantize and args.dtype != "quantized":
        raise PegasusError("--model-quantize needs --dtype quantized")
    if (args.profile or args.compare_layers) and not target.is_cortex_m:
        raise PegasusError("--profile and --compare-layers need a Cortex-M target (--target arm): the probes run "
                           "on the emulated boards only")
    out_dir = check_folder(args.output_dir, "--output-dir") if args.output_dir else None
    keep = Path(args.keep_build) if args.keep_build else None
    if keep is not None:
        check_folder(keep, "--keep-build")
        keep = keep.resolve()   # the emulator runs in a sandbox that binds the program by its absolute path
    _, graph = model_for(args)
    lowered = lower_for_export(graph)
    spec = output_spec(lowered)
    args.batch_size = None
    with tempfile.TemporaryDirectory(prefix="pegasus-run-") as tmp:
        folder, name = _prepare(args, graph, target, (keep or Path(tmp)) / "bundle")
        if target.is_cortex_m:   # one line with the figures, before any sample is read or anything linked
            toolchains.check_board_fit(folder, name, target.cpu, input_bytes(lowered),
                                       quantized=args.dtype == "quantized")
        stacked: dict[str, list[np.ndarray]] = {key: [] for key in spec}
        worst: dict[str, tuple[float, bool]] = {}   # per output: largest difference, beyond the tolerance
        measured = None
        for index, feeds in enumerate(iterate_samples(args, graph)):
            expected = interpreter.run(graph, feeds)
            measured = run_bundle(folder, name, target, feeds, spec, keep / "program" if keep else None)
            for key in spec:
                got = measured.outputs[key]
                stacked[key].append(got)
                reference = np.asarray(expected[key], dtype=got.dtype).reshape(got.shape)
                difference = float(np.max(np.abs(got.astype(np.float64) - reference.astype(np.float64)),
                                          initial=0.0))
                print(f"[{index}] target:    {format_top_n(key, got)}")
                print(f"[{index}] inference: {format_top_n(key, reference)}")
                print(f"[{index}] {key}: largest difference {difference:.6g}")
                previous = worst.get(key, (0.0, False))
                worst[key] = (max(previous[0], difference), previous[1] or _differs(got, reference, difference))
        if measured is None:
            raise PegasusError("no samples to run: give --input or --with-input-meta")
        print(f"ran {name} for {target.triple} ({target.cpu}) on {measured.where}")
        if measured.instructions is not None:
            print(f"instructions per inference: {measured.instructions:,} ({measured.note}; instructions, "
                  "not cycles)")
        else:
            print(f"instructions per inference: not measured ({measured.note})")
        print(f"stack used by the bundle call: {measured.stack:,} B" if measured.stack is not None
              else "stack used by the bundle call: not measured")
        print(_buffers(folder, name))
        if board is not None:
            print(report_board_fit(board, folder, name, measured.stack), end="")
        if args.profile or args.compare_layers:
            _profile(args, graph, target, name, feeds, spec, (keep or Path(tmp)) / "profiled", measured.instructions)
    if out_dir is not None:
        print(f"wrote {save_outputs_npz(out_dir, stacked)}")
    differing = [(key, difference) for key, (difference, beyond) in worst.items() if beyond]
    for key, difference in differing:
        exact = "" if np.issubdtype(stacked[key][0].dtype, np.floating) else ", integers must be equal"
        print(f"pegasus run: output '{key}' on the target differs from pegasus inference (largest difference "
              f"{difference:.6g}{exact})", file=sys.stderr)
    return 1 if differing else 0


def _differs(got: np.ndarray, reference: np.ndarray, difference: float) -> bool:
    """Whether the target's output is not what inference gives: integers (a quantized bundle's, bit-exact by
    design) not equal; floats further apart than 1e-4 of the largest reference value (at least 1e-4)."""
    if not np.issubdtype(got.dtype, np.floating):
        return difference > 0
    scale = float(np.max(np.abs(reference), initial=0.0)) if reference.size else 0.0
    return not np.isfinite(difference) or difference > 1e-4 * max(1.0, scale)
