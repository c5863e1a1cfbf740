"""``pegasus quantize``: calibrate a model on its input meta's dataset and write NAME.quantize
(Acuity guide §3.6.9, §3.5): schemes and algorithms, reuse of an existing table, hybrid precision,
--compute-entropy, --MLE and the per-layer report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import check_folder, check_target
from pegasus.ir import serialize
from pegasus.runtime import samples
from pegasus.runtime.inputmeta import load_input_meta


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quantize", help="calibrate and write the editable NAME.quantize table",
                                   description="Run the float model over calibration samples and choose each "
                                               "tensor's quantization (NAME.quantize).")
    parser.add_argument("--model", required=True, help="the model's .json file (NAME.quantize.json with --hybrid)")
    parser.add_argument("--model-data", required=True, help="the model's .data file")
    parser.add_argument("--with-input-meta", required=True, help="inputmeta .yml (preprocessing + dataset)")
    parser.add_argument("--model-quantize", help="the .quantize file to write (default: NAME.quantize next to the "
                                                 "model); with --hybrid, the edited file to read")
    parser.add_argument("--quantizer",
                        help="asymmetric_affine (default; with --hybrid: the table's), dynamic_fixed_point, "
                             "perchannel_symmetric_affine, symmetric_affine (int8, or uint8 zero point 0), qbfloat16")
    parser.add_argument("--qtype", help="uint8 (default; with --hybrid: the table's), int8, int16, bfloat16 "
                                        "(qbfloat16)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--rebuild", "--quantized-rebuild", dest="rebuild", action="store_true",
                      help="compute a new table even if the .quantize exists (--quantized-rebuild: the Acuity "
                           "guide's name for it)")
    mode.add_argument("--rebuild-all", action="store_true", help="like --rebuild (Acuity: needed for qbfloat16)")
    mode.add_argument("--hybrid", action="store_true",
                      help="apply the customized_quantize_layers of --model-quantize: writes NAME.quantize.json "
                           "(with dtype_converter layers) and the updated .quantize, whose ranges it reuses "
                           "(only tensors missing from it are calibrated)")
    parser.add_argument("--batch-size", type=int, help="samples per calibration batch (default: 1)")
    parser.add_argument("--iterations", type=int, help="number of batches (default: 1)")
    parser.add_argument("--algorithm", default="normal", choices=("normal", "kl_divergence", "moving_average", "auto"),
                        help="normal: min/max (default); kl_divergence: KL threshold search; moving_average: "
                             "exponential average of per-batch min/max; auto (Acuity's automatic hybrid): here "
                             "kl_divergence with --compute-entropy, whose suggested layers --hybrid then applies")
    parser.add_argument("--moving-average-weight", type=float, default=0.01,
                        help="weight of each new batch for moving_average (default 0.01)")
    parser.add_argument("--divergence-nbins", type=int, help="KL histogram bins, a power of two (deprecated: use "
                                                             "--divergence-first-quantize-bits)")
    parser.add_argument("--divergence-first-quantize-bits", type=int, default=None,
                        help="KL histogram of 2**M bins (default M = 11)")
    parser.add_argument("--compute-entropy", action="store_true",
                        help="write entropy.txt (per layer, 0..1: relative error of the quantized output) and "
                             "suggest layers for dynamic_fixed_point-i16 in customized_quantize_layers")
    parser.add_argument("--MLE", dest="mle", action="store_true",
                        help="search each tensor's clipping range minimising its quantization error on the "
                             "calibration data")
    parser.add_argument("--report", metavar="DIR", help="also write the per-layer float-vs-quantized comparison "
                                                        "(table + bar chart) into DIR")
    add_device(parser)
    parser.set_defaults(run=run)


def add_device(parser: argparse.ArgumentParser) -> None:
    """Acuity's --device CPU|GPU: pegasus computes with NumPy on the CPU either way (GPU says so on stderr)."""
    parser.add_argument("--device", type=str.upper, choices=("CPU", "GPU"), default="CPU",
                        help="accepted for Acuity compatibility: pegasus computes on the CPU (GPU: the same, "
                             "with a note)")


def acuity_notes(args: argparse.Namespace) -> None:
    """One line on stderr for each Acuity flag that means something else (or nothing) here."""
    if getattr(args, "device", "CPU") == "GPU":
        print("pegasus: note: --device GPU: pegasus computes with NumPy on the CPU", file=sys.stderr)
    if getattr(args, "algorithm", None) == "auto":
        print("pegasus: note: --algorithm auto: pegasus has no automatic hybrid search; quantizing with kl_divergence "
              "and --compute-entropy (its suggested layers go to customized_quantize_layers for --hybrid)",
              file=sys.stderr)
        args.algorithm, args.compute_entropy = "kl_divergence", True


def _first_quantize_bits(args: argparse.Namespace) -> int:
    if args.divergence_nbins is not None:
        if args.divergence_first_quantize_bits is not None:
            raise PegasusError("give either --divergence-nbins or --divergence-first-quantize-bits, not both")
        bins = args.divergence_nbins
        if bins < 2 or bins & (bins - 1):
            raise PegasusError(f"--divergence-nbins must be a power of two, got {bins}")
        return bins.bit_length() - 1
    bits = 11 if args.divergence_first_quantize_bits is None else args.divergence_first_quantize_bits
    if not 1 <= bits <= 20:
        raise PegasusError(f"--divergence-first-quantize-bits must be in 1..20, got {bits}")
    return bits


def run(args: argparse.Namespace) -> int:
    from pegasus.quantizers import workflow

    acuity_notes(args)
    graph = serialize.load(args.model, args.model_data)
    meta = load_input_meta(args.with_input_meta)
    model_path = Path(args.model)
    target = check_target(args.model_quantize or default_table_path(model_path), "--model-quantize")
    if args.report:
        check_folder(args.report, "--report")
    if args.hybrid and not args.model_quantize:
        raise PegasusError("--hybrid needs --model-quantize: the .quantize file with your customized_quantize_layers")
    if args.hybrid and not target.is_file():
        raise PegasusError(f"--model-quantize {target} does not exist (run pegasus quantize --rebuild first)")
    quantizer, qtype = _scheme(args, target)
    batch_size = args.batch_size or 1
    iterations = args.iterations or 1
    feeds = lambda g: samples.iterate_samples(g, meta, batch_size=batch_size, iterations=iterations)  # noqa: E731
    options = workflow.Options(quantizer=quantizer, qtype=qtype, algorithm=args.algorithm,
                               batch_size=batch_size, total=batch_size * iterations,
                               moving_average_weight=args.moving_average_weight,
                               first_quantize_bits=_first_quantize_bits(args), mle=args.mle,
                               compute_entropy=args.compute_entropy, rebuild=args.rebuild or args.rebuild_all,
                               progress=sys.stderr.isatty())
    if args.hybrid:
        result = workflow.quantize_hybrid(graph, feeds, options, target, model_path)
    else:
        result = workflow.quantize_model(graph, feeds, options, target)
    for line in result.messages:
        print(line)
    if args.report:
        from pegasus.quantizers import compare

        compare.write_report(result.graph, result.table, feeds(result.graph), Path(args.report))
    return 0


def _scheme(args: argparse.Namespace, target: Path) -> tuple[str, str]:
    """--quantizer/--qtype; with --hybrid the table's scheme, which flags may repeat but not change."""
    quantizer, qtype = args.quantizer or "asymmetric_affine", args.qtype or "uint8"
    if not args.hybrid:
        return quantizer, qtype
    from pegasus.quantizers.quantize_file import load_table
    from pegasus.quantizers.schemes import Scheme

    table = load_table(target)
    quantizer, qtype = args.quantizer or table.quantizer, args.qtype or table.qtype
    if Scheme.of(quantizer, qtype) != Scheme.of(table.quantizer, table.qtype):
        raise PegasusError(f"--hybrid re-quantizes with the scheme of {target} ({table.quantizer}-{table.qtype}), "
                           f"not --quantizer {quantizer} --qtype {qtype}; to change the scheme, pass --rebuild")
    return quantizer, qtype


def default_table_path(model: Path) -> Path:
    name = model.name
    stem = name[: -len(".quantize.json")] if name.endswith(".quantize.json") else model.stem
    return model.with_name(f"{stem}.quantize")
