"""``pegasus generate <target>``: write the files the later steps read; so far ``inputmeta`` (Acuity §3.6.8).

``generate inputmeta`` describes each model input (name, shape, layout, dtype, preprocessing) and the
dataset of samples in NAME_inputmeta.yml, checking the dataset against the model before writing.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.fileio import atomic_write, check_target
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.runtime.inputmeta import LAYOUTS, PortMeta, default_port, dump_yaml, input_meta_document
from pegasus.runtime.inputs import check_sample, dataset_lines

NHWC_FRAMEWORKS = ("tensorflow", "tflite", "keras")  # their image inputs are [batch, height, width, channels]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate files the later steps read (inputmeta)",
                                   description="Generate files the later steps read.")
    targets = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    meta = targets.add_parser(
        "inputmeta", help="write NAME_inputmeta.yml: input preprocessing and the dataset of samples",
        description="Write NAME_inputmeta.yml: per model input its shape, layout, dtype and preprocessing "
                    "(out = (x - mean) * scale), and the dataset file(s) of samples. Edit the file freely.")
    meta.add_argument("--model", required=True, help="the model's .json file (its .data must lie next to it)")
    meta.add_argument("--source-file", required=True,
                      help="dataset file: one sample per line, one file per model input separated by spaces, "
                           "paths relative to the dataset file; with --separated-database one file per input "
                           "joined with '#', e.g. 'dataset1.txt#dataset2.txt'")
    meta.add_argument("--channel-mean-value", metavar="'M1 M2 M3 SCALE'",
                      help="per input, one mean per channel then one scale (out = (x - mean) * scale), e.g. "
                           "'128 128 128 0.0078125'; inputs separated by '#' (default: mean 0, scale 1)")
    meta.add_argument("--separated-database", action="store_true",
                      help="one dataset file per input (multi-input models) instead of one for all")
    meta.add_argument("--input-meta-output", help="the .yml to write (default: MODEL_STEM_inputmeta.yml next to "
                                                  "the model)")
    meta.set_defaults(run=run_inputmeta)


def recorded_layout(json_path: Path) -> str | None:
    """The layout the importer recorded for the model's inputs (``source.layout``, or nhwc for a channels-last
    framework), None if it says nothing: what an input whose shape is ambiguous (1x3x4x4) is taken as."""
    source = json.loads(json_path.read_text()).get("source") or {}
    layout = str(source.get("layout", "")).lower()
    if layout in LAYOUTS:
        return layout
    return "nhwc" if str(source.get("framework", "")).lower() in NHWC_FRAMEWORKS else None


def parse_channel_mean_value(text: str | None, ports: list[PortMeta]) -> None:
    """Set each port's mean and scale from 'm1 m2 m3 s#m1 s...' (one group per input, checked per input)."""
    if text is None:
        return
    groups = text.split("#")
    if len(groups) != len(ports):
        raise PegasusError(f"--channel-mean-value has {len(groups)} group(s) for {len(ports)} model input(s) "
                           f"({', '.join(p.name for p in ports)}); give one 'means... scale' group per input, "
                           "separated by '#'")
    for group, port in zip(groups, ports):
        try:
            values = [float(v) for v in group.split()]
        except ValueError:
            raise PegasusError(f"--channel-mean-value for input '{port.name}': expected numbers, got "
                               f"'{group.strip()}'") from None
        channels = port.channels
        acuity_gray = channels == 1 and len(values) == 4 and values[1] == values[2] == 0  # Acuity's "m 0 0 s"
        if len(values) != channels + 1 and not acuity_gray:
            raise PegasusError(
                f"--channel-mean-value for input '{port.name}' (shape {port.shape}, {port.layout}) needs "
                f"{channels + 1} values ({channels} mean(s) then one scale), got {len(values)}: '{group.strip()}'")
        means = values[:channels]
        port.mean = means
        port.scale = [values[-1]] * channels


def dataset_files(text: str, separated: bool, count: int) -> list[Path]:
    files = [Path(part.strip()) for part in text.split("#")]
    if any(not str(f) or str(f) == "." for f in files):
        raise PegasusError(f"--source-file '{text}' has an empty entry")
    if separated and count > 1 and len(files) != count:
        raise PegasusError(f"--source-file gives {len(files)} dataset file(s) for {count} model inputs with "
                           "--separated-database; give one per input joined with '#'")
    if (not separated or count == 1) and len(files) != 1:
        raise PegasusError(f"--source-file gives {len(files)} dataset files: pass --separated-database for one "
                           "dataset per input, or list all inputs' files on each line of one dataset")
    return files


def check_datasets(graph: Graph, ports: list[PortMeta], files: list[Path]) -> None:
    """Every dataset line names an existing, fitting file for each input it feeds (file and line on error)."""
    if len(files) == 1:
        columns = [(files[0], dataset_lines(files[0], len(ports)), ports)]
    else:
        columns = [(file, dataset_lines(file, 1), [port]) for file, port in zip(files, ports)]
        counts = {len(lines) for _, lines, _ in columns}
        if len(counts) > 1:
            listed = ", ".join(f"{file} {len(lines)}" for file, lines, _ in columns)
            raise PegasusError(f"the separated datasets list different numbers of samples ({listed}); "
                               "line i of each must be the same sample")
    for dataset, lines, feeds in columns:
        for number, paths in lines:
            for path, port in zip(paths, feeds):
                try:
                    check_sample(path, graph.type_of(port.name), port, port.name)
                except PegasusError as exc:
                    raise PegasusError(f"line {number}: {exc}", where=str(dataset)) from exc


def relative_to_folder(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` when they share a folder below the root (else absolute), as the yml
    stores it: the yml and its dataset can then move together."""
    path, folder = path.resolve(), folder.resolve()
    try:
        if os.path.commonpath([path, folder]) != path.anchor:
            return Path(os.path.relpath(path, folder)).as_posix()
    except ValueError:  # another drive on Windows
        pass
    return path.as_posix()


def run_inputmeta(args: argparse.Namespace) -> int:
    json_path = Path(args.model)
    graph = serialize.load(json_path)
    target = check_target(args.input_meta_output or json_path.with_name(f"{json_path.stem}_inputmeta.yml"),
                          "--input-meta-output")
    layout = recorded_layout(json_path)
    ports = [default_port(name, list(graph.type_of(name).shape), graph.type_of(name).dtype.value, layout)
             for name in graph.inputs]
    parse_channel_mean_value(args.channel_mean_value, ports)
    files = dataset_files(args.source_file, args.separated_database, len(ports))
    check_datasets(graph, ports, files)
    sources = [relative_to_folder(file, target.parent) for file in files]
    atomic_write(target, dump_yaml(input_meta_document(ports, sources, about=json_path.name)))
    print(f"wrote {target}")
    return 0
