"""``pegasus compare``: how far each layer of the quantized model is from the float model on the input
meta's samples — cosine similarity, SNR and relative error per layer, as a table (compare.txt,
compare.csv) and a bar chart of SNR (compare.png). The same report as ``pegasus quantize --report``,
for a .quantize file that already exists (e.g. after editing it)."""

from __future__ import annotations

import argparse

from pegasus.errors import PegasusError
from pegasus.fileio import check_folder
from pegasus.ir import serialize
from pegasus.runtime import samples
from pegasus.runtime.inputmeta import load_input_meta


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="per-layer float vs quantized comparison (table + chart)",
                                   description="Run the float and the quantized model on the same samples and "
                                               "report, per layer, cosine similarity, SNR and relative error.")
    parser.add_argument("--model", required=True, help="the model's .json file (NAME.quantize.json for a hybrid "
                                                       "model)")
    parser.add_argument("--model-data", required=True, help="the model's .data file")
    parser.add_argument("--model-quantize", required=True, help="the .quantize file")
    parser.add_argument("--with-input-meta", required=True, help="inputmeta .yml (preprocessing + dataset)")
    parser.add_argument("--batch-size", type=int, help="samples per batch (default: 1)")
    parser.add_argument("--iterations", type=int, help="number of batches (default: every dataset sample once)")
    parser.add_argument("--output-dir", default=".", help="where compare.txt/.csv/.png go (created if missing; "
                                                          "default: the current directory)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pegasus.quantizers import compare
    from pegasus.quantizers.quantize_file import load_table

    for flag, value in (("--batch-size", args.batch_size), ("--iterations", args.iterations)):
        if value is not None and value < 1:
            raise PegasusError(f"{flag} must be at least 1, got {value}")
    out_dir = check_folder(args.output_dir, "--output-dir")
    graph = serialize.load(args.model, args.model_data)
    table = load_table(args.model_quantize, graph, serialize.graph_digest(graph))
    if table.customized_layers and not any(node.op == "DtypeConverter" for node in graph.nodes):
        raise PegasusError(f"{args.model_quantize} customizes layers {sorted(table.customized_layers)}: run "
                           "pegasus quantize --hybrid and pass --model NAME.quantize.json")
    meta = load_input_meta(args.with_input_meta)
    feeds = samples.iterate_samples(graph, meta, batch_size=args.batch_size, iterations=args.iterations)
    compare.write_report(graph, table, feeds, out_dir)
    return 0
