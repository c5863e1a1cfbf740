"""``pegasus inference``: run a model on the PC with the NumPy reference and post-process the results."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pegasus.commands.quantize import acuity_notes, add_device, default_table_path
from pegasus.fileio import check_folder, require_file
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.runtime import interpreter, samples
from pegasus.runtime.inputmeta import load_input_meta
from pegasus.runtime.postprocess import POSTPROCESS_CHOICES, dump_names, dump_tensor, format_top_n, save_outputs_npz


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("inference", help="run a model on the PC (NumPy reference)",
                                   description="Run NAME.json + NAME.data with the reference interpreter.")
    parser.add_argument("--model", required=True, help="the model's .json file")
    parser.add_argument("--model-data", required=True, help="the model's .data file")
    parser.add_argument("--dtype", choices=("float32", "quantized"), default="float32",
                        help="float32: float reference (default); quantized: the integer arithmetic of the "
                             "exported code, with --model-quantize (outputs dequantized to float)")
    parser.add_argument("--model-quantize", help="the .quantize file (needed with --dtype quantized)")
    parser.add_argument("--with-input-meta", help="inputmeta .yml: preprocessing and the dataset to read "
                                                  "samples from when --input is not given")
    parser.add_argument("--input", nargs="+", action="extend", metavar="FILE",
                        help="sample file(s): .npy, .pb, .tensor or an image (PNG/JPEG/BMP); for a model with "
                             "several inputs join one sample's files with '#', e.g. a.npy#b.npy")
    parser.add_argument("--batch-size", type=int, help="samples per batch (default: 1)")
    parser.add_argument("--iterations", type=int, help="number of batches (default: all samples once)")
    post = parser.add_mutually_exclusive_group()
    post.add_argument("--postprocess", choices=POSTPROCESS_CHOICES, default="classification_classic",
                      help="print_topn: top-5 of each output; dump_result: .tensor files of inputs and outputs "
                           "+ outputs.npz; classification_classic: both (default)")
    post.add_argument("--postprocess-file", metavar="FILE.yml",
                      help="Acuity's post-processing configuration: pegasus has none; the file must exist and "
                           "classification_classic runs (a note on stderr says so)")
    parser.add_argument("--output-dir", default=".", help="where dumps go (created if missing; default: current "
                                                          "directory)")
    add_device(parser)
    parser.set_defaults(run=run)


def acuity_flags(args: argparse.Namespace) -> None:
    """The Acuity guide's inference flags: --device, --postprocess-file, and --dtype quantized without
    --model-quantize (the guide's step 4), which takes NAME.quantize next to the model when there is one."""
    acuity_notes(args)
    if args.postprocess_file:
        require_file(args.postprocess_file, "--postprocess-file")
        print(f"pegasus: note: --postprocess-file {args.postprocess_file}: pegasus has no post-processing "
              "configuration files; running --postprocess classification_classic (top-5 and dumps)", file=sys.stderr)
    if args.dtype == "quantized" and not args.model_quantize:
        table = default_table_path(Path(args.model))
        if table.is_file():
            print(f"pegasus: note: --dtype quantized without --model-quantize: using {table}", file=sys.stderr)
            args.model_quantize = str(table)


def iterate_samples(args: argparse.Namespace, graph: Graph) -> Iterator[dict[str, np.ndarray]]:
    meta = load_input_meta(args.with_input_meta) if args.with_input_meta else None
    return samples.iterate_samples(graph, meta, args.input, batch_size=args.batch_size, iterations=args.iterations)


def model_for(args: argparse.Namespace) -> tuple[Graph, Graph]:
    """(the graph as loaded, the graph to run): the integer graph for --dtype quantized."""
    graph = serialize.load(args.model, args.model_data)
    if args.dtype == "float32":
        return graph, graph
    from pegasus.commands.quantized_model import lower_model

    lowered = lower_model(graph, args.model_quantize)
    return graph, lowered.graph


def run(args: argparse.Namespace) -> int:
    acuity_flags(args)
    _, graph = model_for(args)
    dump = args.postprocess in ("dump_result", "classification_classic")
    show = args.postprocess in ("print_topn", "classification_classic")
    out_dir = check_folder(args.output_dir, "--output-dir") if dump else Path(args.output_dir)
    stacked: dict[str, list[np.ndarray]] = {name: [] for name in graph.outputs}
    for index, feeds in enumerate(iterate_samples(args, graph)):
        results = interpreter.run(graph, feeds)
        for name in graph.outputs:
            stacked[name].append(results[name])
            if show:
                print(f"[{index}] {format_top_n(name, results[name])}")
        if dump:
            files = dump_names([*feeds, *results])
            for name, value in list(feeds.items()) + list(results.items()):
                dump_tensor(out_dir, files[name], index, value)
    if dump:
        print(f"wrote {save_outputs_npz(out_dir, stacked)}")
    return 0
