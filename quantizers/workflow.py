"""What ``pegasus quantize`` does, step by step, without the command line: calibrate, choose each
tensor's grid, optionally refine ranges (--MLE) and measure each layer's error (--compute-entropy),
then write NAME.quantize (and NAME.quantize.json for --hybrid)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import AtomicFileSet
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.params import QuantTable
from pegasus.quantizers import quantize_file
from pegasus.quantizers.assign import build_table, refresh_biases
from pegasus.quantizers.calibrate import calibrate
from pegasus.quantizers.schemes import Scheme

Feeds = Callable[[Graph], Iterable[dict[str, np.ndarray]]]


@dataclass
class Options:
    quantizer: str = "asymmetric_affine"
    qtype: str = "uint8"
    algorithm: str = "normal"
    batch_size: int = 1
    total: int = 1
    moving_average_weight: float = 0.01
    first_quantize_bits: int = 11
    mle: bool = False
    compute_entropy: bool = False
    rebuild: bool = True
    progress: bool = False
    entropy_path: Path = Path("entropy.txt")


@dataclass
class Result:
    graph: Graph
    table: QuantTable
    messages: list[str] = field(default_factory=list)


def _ranges(graph: Graph, feeds: Feeds, options: Options, scheme: Scheme):
    return calibrate(graph, feeds(graph), total=options.total, batch_size=options.batch_size,
                     algorithm=options.algorithm, signed=scheme.qtype != "u8",
                     moving_average_weight=options.moving_average_weight,
                     first_quantize_bits=options.first_quantize_bits, keep_values=options.mle,
                     progress=options.progress)


def _finish(graph: Graph, table: QuantTable, feeds: Feeds, options: Options, scheme: Scheme, calibration,
            messages: list[str]) -> None:
    if calibration.nonfinite:
        shown = ", ".join(calibration.nonfinite[:5]) + (" ..." if len(calibration.nonfinite) > 5 else "")
        messages.append(f"note: {len(calibration.nonfinite)} tensor(s) held NaN or infinity ({shown}); their ranges "
                        "use the finite values, and the others saturate to the ends of the grid")
    if options.mle:
        from pegasus.quantizers.mle import refine_ranges

        changed = refine_ranges(table, calibration.values, scheme)
        refresh_biases(graph, table)
        messages.append(f"MLE: tightened the range of {changed} of {len(calibration.values)} tensors")
    if options.compute_entropy:
        from pegasus.quantizers.entropy import layer_entropies, suggest_layers, write_entropy

        entropies = layer_entropies(graph, table, feeds(graph))
        write_entropy(options.entropy_path, entropies)
        suggested = suggest_layers(entropies)
        for layer in suggested:
            table.customized_layers.setdefault(layer, "dynamic_fixed_point-i16")
        messages.append(f"wrote {options.entropy_path} ({len(entropies)} layers); suggested for "
                        f"dynamic_fixed_point-i16: {', '.join(suggested) or 'none'}")


def quantize_model(graph: Graph, feeds: Feeds, options: Options, target: Path) -> Result:
    """Calibrate ``graph`` and write its table to ``target`` (reusing an existing table unless rebuild)."""
    scheme = Scheme.of(options.quantizer, options.qtype)
    digest = serialize.graph_digest(graph)
    messages: list[str] = []
    keep, existing = {}, None
    if target.is_file() and not options.rebuild:
        old = quantize_file.load_table(target, graph, digest)
        if (old.quantizer, old.qtype) != (scheme.quantizer, Scheme.of(old.quantizer, old.qtype).qtype) and \
                old.quantizer != scheme.quantizer:
            raise PegasusError(f"{target} was made with --quantizer {old.quantizer} --qtype {old.qtype}; pass "
                               "--rebuild to quantize with another scheme")
        keep, existing = old.tensors, quantize_file.load_document(target)
    calibration = _ranges(graph, feeds, options, scheme)
    table = build_table(graph, calibration.ranges, scheme, algorithm=options.algorithm, digest=digest, keep=keep)
    if keep:
        missing = len(set(table.tensors) - set(keep))
        messages.append(f"reused {target}: kept {len(keep)} tensors, filled {missing} missing "
                        "(pass --rebuild to recompute all)")
    _finish(graph, table, feeds, options, scheme, calibration, messages)
    quantize_file.save_table(table, target, existing)
    messages.append(f"wrote {target} ({len(table.tensors)} tensors, {scheme.quantizer}-{options.qtype}, "
                    f"{options.algorithm}, {calibration.samples} samples)")
    return Result(graph, table, messages)


def quantize_hybrid(graph: Graph, feeds: Feeds, options: Options, target: Path, model_path: Path) -> Result:
    """Apply the user's customized_quantize_layers: write NAME.quantize.json and re-quantize into ``target``."""
    from pegasus.quantizers.hybrid import insert_converters

    scheme = Scheme.of(options.quantizer, options.qtype)
    existing = quantize_file.load_document(target)
    old = quantize_file.load_table(target)
    source_graph = _without_converters(graph)
    quantize_file.check_against_graph(old, graph, existing)
    hybrid = insert_converters(source_graph, scheme, old.customized_layers)
    calibration = _ranges(hybrid, feeds, options, scheme)
    digest = serialize.graph_digest(hybrid)
    table = build_table(hybrid, calibration.ranges, scheme, algorithm=options.algorithm, digest=digest,
                        custom=old.customized_layers)
    messages: list[str] = []
    _finish(hybrid, table, feeds, options, scheme, calibration, messages)
    stem = model_path.name[: -len(".quantize.json")] if model_path.name.endswith(".quantize.json") else model_path.stem
    json_path = model_path.with_name(f"{stem}.quantize.json")
    text, blob = serialize.graph_to_files(hybrid)
    original_text, original_blob = serialize.graph_to_files(source_graph)
    with AtomicFileSet() as files:
        files.stage(json_path, text)
        if blob != original_blob:  # never: converters add no constants (so the model's .data still fits)
            files.stage(json_path.with_suffix(".data"), blob)
        files.stage(target, quantize_file.dump_yaml(quantize_file.table_document(table, existing)))
    converters = sum(node.op == "DtypeConverter" for node in hybrid.nodes)
    messages.append(f"wrote {json_path} ({converters} dtype_converter layers) and {target} "
                    f"({len(old.customized_layers)} customized layers)")
    return Result(hybrid, table, messages)


def _without_converters(graph: Graph) -> Graph:
    import copy

    from pegasus.quantizers.hybrid import _remove_converters

    clean = copy.deepcopy(graph)
    _remove_converters(clean)
    return clean
