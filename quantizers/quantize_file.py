"""NAME.quantize: the editable YAML quantization table (Acuity guide §3.2, §3.5).

Layout::

    pegasus_version: 0.1.0
    graph_digest: 1f0c...            # the model this table belongs to (a stale table is refused)
    quantizer: asymmetric_affine
    qtype: uint8
    algorithm: normal
    quantize_parameters:
      conv1_out:                     # a tensor name from NAME.json
        dtype: asymmetric_quantized  # or symmetric_quantized, dynamic_fixed_point, qbfloat16, float32
        method: layer                # layer (per tensor) | channel (per output channel, along axis)
        max_value: [6.88]
        min_value: [0.0]
        zero_point: [0]
        scale: [0.027]
        qtype: u8                    # u8 | i8 | i16 | i32 | bf16 | float32
        fl: 4                        # dynamic_fixed_point only: scale = 2**-fl
    customized_quantize_layers: {}   # {layer: float32 | dynamic_fixed_point-i16}
    layer_digests:                   # each layer as it was (op, attributes, shapes, weights), to name what changed
      conv1: 3fa2c1d07e19

Read and written with ruamel.yaml in round-trip mode: rewriting a table a user edited keeps their
comments and key order; only values pegasus recomputes change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from pegasus import __version__
from pegasus.errors import PegasusError
from pegasus.fileio import atomic_write
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.params import CUSTOM_PRECISIONS, QTYPE_DTYPES, QuantTable, TensorQuant
from pegasus.runtime.inputmeta import dump_yaml, read_yaml

QTYPES = tuple(QTYPE_DTYPES) + ("bf16", "float32")
DTYPES = ("asymmetric_quantized", "symmetric_quantized", "dynamic_fixed_point", "qbfloat16", "float32")
HEADER = """\
pegasus quantization table. Edit any tensor's scale / zero_point / fl / min_value / max_value, or raise
layers in customized_quantize_layers ({layer: float32 | dynamic_fixed_point-i16}) and re-run
`pegasus quantize --hybrid --model-quantize THIS_FILE`. Tensor and layer names are those of the model's .json.
"""


def _line(node: Any, key: Any = None) -> str:
    """'line N: ' of a key in a ruamel mapping (1-based), or '' when unknown."""
    try:
        if key is not None:
            return f"line {node.lc.key(key)[0] + 1}: "
        return f"line {node.lc.line + 1}: "
    except (AttributeError, KeyError, TypeError):
        return ""


def _entry_from_yaml(name: str, entry: Any, where: str) -> TensorQuant:
    if not isinstance(entry, dict):
        raise PegasusError(f"{_line(entry)}tensor '{name}' must map dtype/qtype/scale/...", where=where)
    qtype = str(entry.get("qtype", ""))
    if qtype not in QTYPES:
        raise PegasusError(f"{_line(entry, 'qtype')}tensor '{name}' has unknown qtype '{qtype}' "
                           f"(valid: {', '.join(QTYPES)})", where=where)
    dtype = str(entry.get("dtype", "float32" if qtype == "float32" else "asymmetric_quantized"))
    if dtype not in DTYPES:
        raise PegasusError(f"{_line(entry, 'dtype')}tensor '{name}' has unknown dtype '{dtype}' "
                           f"(valid: {', '.join(DTYPES)})", where=where)

    def numbers(key: str, kind: type) -> list:
        value = entry.get(key, [])
        values = value if isinstance(value, list) else [value]
        try:
            return [kind(v) for v in values]
        except (TypeError, ValueError):
            raise PegasusError(f"{_line(entry, key)}tensor '{name}': {key} must be a list of numbers, got {value!r}",
                               where=where) from None

    q = TensorQuant(qtype=qtype, dtype=dtype, method=str(entry.get("method", "layer")),
                    min_value=numbers("min_value", float), max_value=numbers("max_value", float),
                    scale=numbers("scale", float), zero_point=numbers("zero_point", int),
                    fl=int(entry["fl"]) if entry.get("fl") is not None else None,
                    axis=int(entry["axis"]) if entry.get("axis") is not None else None)
    if q.is_integer:
        if not q.scale or len(q.scale) != len(q.zero_point) or any(s <= 0 for s in q.scale):
            raise PegasusError(f"{_line(entry)}tensor '{name}' needs positive scale(s) and as many zero points",
                               where=where)
        if q.method not in ("layer", "channel"):
            raise PegasusError(f"{_line(entry, 'method')}tensor '{name}': method must be layer or channel",
                               where=where)
        if q.dtype == "dynamic_fixed_point" and q.fl is not None:
            q.scale = [2.0 ** -q.fl]  # fl is what users edit for fixed point
    return q


def load_table(path: str | Path, graph: Graph | None = None, digest: str | None = None) -> QuantTable:
    """Read a .quantize file, checking it against ``graph`` (names) and ``digest`` (staleness)."""
    path = Path(path)
    where = str(path)
    doc = read_yaml(path)
    if not isinstance(doc, dict) or "quantize_parameters" not in doc:
        raise PegasusError("not a .quantize file (no quantize_parameters)", where=where)
    params = doc.get("quantize_parameters") or {}
    tensors = {str(name): _entry_from_yaml(str(name), entry, where) for name, entry in params.items()}
    custom_doc = doc.get("customized_quantize_layers") or {}
    custom = {str(k): str(v) for k, v in custom_doc.items()}
    for layer, precision in custom.items():
        if precision not in CUSTOM_PRECISIONS and precision not in ("dynamic_fixed_point-16",):
            raise PegasusError(f"{_line(custom_doc, layer)}customized_quantize_layers: layer '{layer}' has unknown "
                               f"precision '{precision}' (valid: {', '.join(CUSTOM_PRECISIONS)})", where=where)
        if precision == "dynamic_fixed_point-16":
            custom[layer] = "dynamic_fixed_point-i16"
    table = QuantTable(quantizer=str(doc.get("quantizer", "asymmetric_affine")), qtype=str(doc.get("qtype", "uint8")),
                       algorithm=str(doc.get("algorithm", "normal")), graph_digest=str(doc.get("graph_digest", "")),
                       tensors=tensors, customized_layers=custom, path=where,
                       layer_digests={str(k): str(v) for k, v in (doc.get("layer_digests") or {}).items()})
    if graph is not None:
        check_against_graph(table, graph, doc, digest)
    return table


def check_against_graph(table: QuantTable, graph: Graph, doc: Any = None, digest: str | None = None) -> None:
    """Refuse a table naming layers/tensors the model does not have, or made for another model."""
    where = table.path
    layers = {node.name for node in graph.nodes}
    for layer in table.customized_layers:
        if layer not in layers:
            line = _line(doc.get("customized_quantize_layers"), layer) if doc is not None else ""
            raise PegasusError(f"{line}customized_quantize_layers names layer '{layer}', which is not in the model "
                               f"(layers: {', '.join(sorted(layers)[:8])}{', ...' if len(layers) > 8 else ''})",
                               where=where)
    unknown = sorted(set(table.tensors) - set(graph.tensors))
    if unknown:
        line = _line(doc.get("quantize_parameters"), unknown[0]) if doc is not None else ""
        raise PegasusError(f"{line}quantize_parameters names tensor '{unknown[0]}', which is not in model "
                           f"'{graph.name}'" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "") +
                           ": the model changed since this .quantize was made; re-run pegasus quantize --rebuild",
                           where=where)
    if digest is not None and table.graph_digest and table.graph_digest != digest:
        raise PegasusError(f"was made for another version of model '{graph.name}' ({_what_changed(table, graph)}); "
                           "re-run pegasus quantize --rebuild", where=where)


def _what_changed(table: QuantTable, graph: Graph) -> str:
    """Name the first layer whose recorded digest differs from the model's (and how many more do)."""
    if not table.layer_digests:
        return f"graph digest {table.graph_digest}, model now {serialize.graph_digest(graph)}"
    now = serialize.layer_digests(graph)
    ops = {node.name: node.op for node in graph.nodes}
    changes = [f"layer '{name}' ({ops[name]}) is new" if name not in table.layer_digests else
               f"layer '{name}' ({ops[name]}) changed: its weights, attributes or shapes"
               for name in now if table.layer_digests.get(name) != now[name]]
    changes += [f"layer '{name}' was removed" for name in table.layer_digests if name not in now]
    if not changes:
        return "its inputs, outputs or layer order changed"
    return changes[0] + (f"; {len(changes) - 1} more layers changed" if len(changes) > 1 else "")


def _entry_to_yaml(q: TensorQuant, existing: Any = None) -> CommentedMap:
    entry = existing if isinstance(existing, CommentedMap) else CommentedMap()
    values: dict[str, Any] = {"dtype": q.dtype, "method": q.method,
                              "max_value": [float(v) for v in q.max_value],
                              "min_value": [float(v) for v in q.min_value]}
    if q.is_integer:
        values["zero_point"] = [int(v) for v in q.zero_point]
        values["scale"] = [float(v) for v in q.scale]
    if q.fl is not None:
        values["fl"] = int(q.fl)
    values["qtype"] = q.qtype
    if q.axis is not None:
        values["axis"] = int(q.axis)
    for key in [k for k in entry if k not in values]:
        del entry[key]
    for key, value in values.items():
        entry[key] = value
    return entry


def table_document(table: QuantTable, existing: Any = None) -> CommentedMap:
    """The YAML document of ``table``; updates ``existing`` (a loaded document) in place to keep comments."""
    doc = existing if isinstance(existing, CommentedMap) else CommentedMap()
    if not isinstance(existing, CommentedMap):
        doc.yaml_set_start_comment(HEADER)
    doc["pegasus_version"] = __version__
    doc["graph_digest"] = table.graph_digest
    doc["quantizer"] = table.quantizer
    doc["qtype"] = table.qtype
    doc["algorithm"] = table.algorithm
    params = doc.get("quantize_parameters")
    if not isinstance(params, CommentedMap):
        params = CommentedMap()
    for name in [k for k in params if k not in table.tensors]:
        del params[name]
    for name, q in table.tensors.items():
        params[name] = _entry_to_yaml(q, params.get(name))
    doc["quantize_parameters"] = params
    custom = doc.get("customized_quantize_layers")
    if not isinstance(custom, CommentedMap):
        custom = CommentedMap()
        custom.fa.set_flow_style()
    for name in [k for k in custom if k not in table.customized_layers]:
        del custom[name]
    for layer, precision in table.customized_layers.items():
        custom[layer] = precision
    doc["customized_quantize_layers"] = custom
    fresh = "layer_digests" not in doc
    doc["layer_digests"] = CommentedMap(table.layer_digests)
    if fresh:
        note = "each layer as this table saw it (op, attributes, shapes, weights): names what changed in the model"
        doc.yaml_set_comment_before_after_key("layer_digests", before=note)
    return doc


def save_table(table: QuantTable, path: str | Path, existing: Any = None) -> None:
    atomic_write(path, dump_yaml(table_document(table, existing)))


def load_document(path: str | Path) -> Any:
    return read_yaml(path)
