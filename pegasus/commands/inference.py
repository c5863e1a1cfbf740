"""``pegasus inference``: run a model on the PC with the NumPy reference and post-process the results."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from itertools import cycle, islice
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.runtime import interpreter
from pegasus.runtime.inputmeta import InputMeta, PortMeta, load_input_meta
from pegasus.runtime.inputs import read_dataset, read_sample
from pegasus.runtime.postprocess import POSTPROCESS_CHOICES, dump_tensor, format_top_n, save_outputs_npz


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("inference", help="run a model on the PC (NumPy reference)",
                                   description="Run NAME.json + NAME.data with the reference interpreter.")
    parser.add_argument("--model", required=True, help="the model's .json file")
    parser.add_argument("--model-data", required=True, help="the model's .data file")
    parser.add_argument("--dtype", choices=("float32",), default="float32",
                        help="float32: float reference (quantized arrives with the quantizer)")
    parser.add_argument("--with-input-meta", help="inputmeta .yml: preprocessing and the dataset to read "
                                                  "samples from when --input is not given")
    parser.add_argument("--input", nargs="+", action="extend", metavar="FILE",
                        help="sample file(s): .npy, .pb, .tensor or an image (PNG/JPEG/BMP); for a model with "
                             "several inputs join one sample's files with '#', e.g. a.npy#b.npy")
    parser.add_argument("--batch-size", type=int, help="samples per batch (default: 1)")
    parser.add_argument("--iterations", type=int, help="number of batches (default: all samples once)")
    parser.add_argument("--postprocess", choices=POSTPROCESS_CHOICES, default="classification_classic",
                        help="print_topn: top-5 of each output; dump_result: .tensor files of inputs and outputs "
                             "+ outputs.npz; classification_classic: both (default)")
    parser.add_argument("--output-dir", default=".", help="where dumps go (default: current directory)")
    parser.add_argument("--device", choices=("CPU",), default="CPU", help="accepted for Acuity compatibility")
    parser.set_defaults(run=run)


def _ports(graph: Graph, meta: InputMeta | None) -> list[PortMeta | None]:
    if meta is None:
        return [None] * len(graph.inputs)
    by_name = {port.name: port for port in meta.ports}
    unknown = sorted(set(by_name) - set(graph.inputs))
    if unknown:
        raise PegasusError(f"input meta names {unknown}, which are not model inputs ({graph.inputs})",
                           where=str(meta.path))
    return [by_name.get(name) for name in graph.inputs]


def _sample_files(args: argparse.Namespace, graph: Graph, meta: InputMeta | None) -> list[list[Path]]:
    count = len(graph.inputs)
    if args.input:
        samples = [[Path(p) for p in item.split("#")] for item in args.input]
        for files in samples:
            if len(files) != count:
                raise PegasusError(f"--input '{'#'.join(map(str, files))}' gives {len(files)} file(s) for "
                                   f"{count} model input(s) {graph.inputs}; join them with '#'")
        return samples
    if meta is None or not meta.databases:
        raise PegasusError("no input given: pass sample files with --input FILE (.npy/.pb/.tensor/image) or an "
                           "input meta with a dataset via --with-input-meta NAME_inputmeta.yml")
    if meta.separated:
        columns = [read_dataset(db, 1) for db in meta.databases]
        return [[column[i][0] for column in columns] for i in range(min(map(len, columns)))]
    return read_dataset(meta.databases[0], count)


def iterate_samples(args: argparse.Namespace, graph: Graph) -> Iterator[dict[str, np.ndarray]]:
    meta = load_input_meta(args.with_input_meta) if args.with_input_meta else None
    ports = _ports(graph, meta)
    files = _sample_files(args, graph, meta)
    batch = args.batch_size or 1
    if batch < 1 or (args.iterations is not None and args.iterations < 1):
        raise PegasusError("--batch-size and --iterations must be positive")
    total = batch * args.iterations if args.iterations else len(files)
    for sample in islice(cycle(files), total):
        yield {name: read_sample(path, graph.type_of(name), port, name)
               for name, path, port in zip(graph.inputs, sample, ports)}


def run(args: argparse.Namespace) -> int:
    graph = serialize.load(args.model, args.model_data)
    out_dir = Path(args.output_dir)
    dump = args.postprocess in ("dump_result", "classification_classic")
    show = args.postprocess in ("print_topn", "classification_classic")
    if dump and not out_dir.is_dir():
        raise PegasusError(f"--output-dir does not exist: {out_dir}")
    stacked: dict[str, list[np.ndarray]] = {name: [] for name in graph.outputs}
    for index, feeds in enumerate(iterate_samples(args, graph)):
        results = interpreter.run(graph, feeds)
        for name in graph.outputs:
            stacked[name].append(results[name])
            if show:
                print(f"[{index}] {format_top_n(name, results[name])}")
        if dump:
            for name, value in list(feeds.items()) + list(results.items()):
                dump_tensor(out_dir, name, index, value)
    if dump:
        print(f"wrote {save_outputs_npz(out_dir, stacked)}")
    return 0
