"""What ``pegasus quantize`` does, step by step, without the command line: calibrate, choose each
tensor's grid, optionally refine ranges (--MLE) and measure each layer's error (--compute-entropy),
then write NAME.quantize (and NAME.quantize.json for --hybrid)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import AtomicFileSet
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.params import QuantTable, TensorQuant
from pegasus.quantizers import quantize_file
from pegasus.quantizers.assign import build_table, refresh_biases
from pegasus.quantizers.calibrate import Calibration, calibrate, observed_tensors
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


def _ranges(graph: Graph, feeds: Feeds, options: Options, scheme: Scheme, only: Iterable[str] | None = None):
    return calibrate(graph, feeds(graph), total=options.total, batch_size=options.batch_size,
                     algorithm=options.algorithm, signed=scheme.qtype != "u8",
                     moving_average_weight=options.moving_average_weight,
                     first_quantize_bits=options.first_quantize_bits, keep_values=options.mle,
                     progress=options.progress, only=only)


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
    from pegasus.quantizers.hybrid import without_converters

    scheme = Scheme.of(options.quantizer, options.qtype)
    digest = serialize.graph_digest(graph)
    hybrid = any(node.op == "DtypeConverter" for node in graph.nodes)
    messages: list[str] = []
    keep: dict[str, TensorQuant] = {}
    custom: dict[str, str] = {}
    rounding = "half_up"
    if target.is_file() and not options.rebuild:
        old = quantize_file.load_table(target, graph, digest)
        if old.quantizer != scheme.quantizer:
            raise PegasusError(f"{target} was made with --quantizer {old.quantizer} --qtype {old.qtype}; pass "
                               "--rebuild to quantize with another scheme")
        keep, custom, rounding = old.tensors, old.customized_layers, old.rounding  # a reused table keeps its arithmetic
    previous = quantize_file.previous_text(target) if target.is_file() else None
    calibration = _ranges(graph, feeds, options, scheme)
    # customized layers apply to a graph with converters; on NAME.json they wait for --hybrid (and stay listed)
    table = build_table(graph, calibration.ranges, scheme, algorithm=options.algorithm, digest=digest, keep=keep,
                        custom=custom if hybrid else {})
    table.customized_layers = dict(custom)
    table.rounding = rounding
    if hybrid:
        source = without_converters(graph)
        table.float_graph_digest, table.layer_digests = serialize.graph_digest(source), serialize.layer_digests(source)
    if keep:
        kept = sum(table.tensors[name] is keep.get(name) for name in table.tensors)
        missing = sum(name not in keep for name in table.tensors)
        messages.append(f"reused {target}: kept {kept} tensors, filled {missing} missing"
                        + (f", recomputed {len(table.tensors) - kept - missing} of another precision"
                           if len(table.tensors) - kept - missing else "") + " (pass --rebuild to recompute all)")
    _finish(graph, table, feeds, options, scheme, calibration, messages)
    quantize_file.save_table(table, target, previous)
    messages.append(f"wrote {target} ({len(table.tensors)} tensors, {scheme.quantizer}-{options.qtype}, "
                    f"{options.algorithm}, {calibration.samples} samples)")
    return Result(graph, table, messages)


def quantize_hybrid(graph: Graph, feeds: Feeds, options: Options, target: Path, model_path: Path) -> Result:
    """Apply the user's customized_quantize_layers: write NAME.quantize.json and re-quantize into ``target``.

    The new grids come from the table as it stands: an entry whose precision does not change is kept as it
    is (hand edits included), one that changes precision is recomputed from its range, a converter's output
    takes its input's range (and its input's entry when that already has the converter's precision), and
    only tensors with no entry at all are calibrated. ``graph`` may be NAME.json or NAME.quantize.json.
    """
    from pegasus.quantizers.hybrid import insert_converters, without_converters

    scheme = Scheme.of(options.quantizer, options.qtype)
    existing = quantize_file.load_document(target)
    old = quantize_file.load_table(target)
    source_graph = without_converters(graph)
    quantize_file.check_for_hybrid(old, graph, source_graph, existing)
    hybrid = insert_converters(source_graph, scheme, old.customized_layers)
    ranges, keep = _table_ranges(hybrid, old)
    converted = {node.outputs[0]: node.inputs[0] for node in hybrid.nodes if node.op == "DtypeConverter"}
    missing = [name for name in observed_tensors(hybrid) if name not in ranges and name not in converted
               and hybrid.type_of(name).dtype.is_float]
    calibration = _ranges(hybrid, feeds, options, scheme, only=None if options.mle else missing) \
        if missing or options.mle else Calibration({})
    ranges.update({name: calibration.ranges[name] for name in missing})
    # a converter's output holds its input's values: its input's range
    ranges.update({out: ranges[source] for out, source in converted.items() if out not in ranges and source in ranges})
    table = build_table(hybrid, ranges, scheme, algorithm=old.algorithm, digest=serialize.graph_digest(hybrid),
                        custom=old.customized_layers, keep=keep)
    table.float_graph_digest = serialize.graph_digest(source_graph)
    table.layer_digests = serialize.layer_digests(source_graph)  # what a refusal compares, for either model
    table.rounding = old.rounding
    kept = sum(table.tensors[name] is keep.get(name) for name in table.tensors)
    derived = len(table.tensors) - len(missing) - kept
    messages = [f"hybrid: took {len(table.tensors) - len(missing)} tensors from {target} ({kept} as they were, "
                f"{derived} re-derived from their ranges for a new precision or a converter), calibrated "
                f"{len(missing)}" + (f" ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}) on "
                                     f"{calibration.samples} samples" if missing else "")]
    _finish(hybrid, table, feeds, options, scheme, calibration, messages)
    stem = model_path.name[: -len(".quantize.json")] if model_path.name.endswith(".quantize.json") else model_path.stem
    json_path = model_path.with_name(f"{stem}.quantize.json")
    text, blob = serialize.graph_to_files(hybrid)
    original_text, original_blob = serialize.graph_to_files(source_graph)
    with AtomicFileSet() as files:
        files.stage(json_path, text)
        if blob != original_blob:  # never: converters add no constants (so the model's .data still fits)
            files.stage(json_path.with_suffix(".data"), blob)
        files.stage(target, quantize_file.render_table(table, quantize_file.previous_text(target)))
    converters = sum(node.op == "DtypeConverter" for node in hybrid.nodes)
    messages.append(f"wrote {json_path} ({converters} dtype_converter layers) and {target} "
                    f"({len(old.customized_layers)} customized layers)")
    return Result(hybrid, table, messages)


def _table_ranges(hybrid: Graph, old: QuantTable) -> tuple[dict[str, tuple[float, float]], dict[str, TensorQuant]]:
    """The (min, max) of every tensor of ``hybrid`` the table has, and the entries a new table may keep. A
    converter's output without an entry of its own may keep its input's (a copy), so a u8 tensor read by a
    float layer keeps its grid on the u8 side."""
    ranges = {name: (min(q.min_value), max(q.max_value)) for name, q in old.tensors.items()
              if q.min_value and q.max_value and name in hybrid.tensors}
    keep = dict(old.tensors)
    for node in hybrid.nodes:
        source, out = (node.inputs[0], node.outputs[0]) if node.op == "DtypeConverter" else ("", "")
        if out and out not in keep and source in old.tensors:
            keep[out] = copy.deepcopy(old.tensors[source])
    return ranges, keep
