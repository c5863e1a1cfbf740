"""NAME.quantize: the editable YAML quantization table (Acuity guide §3.2, §3.5).

Layout::

    pegasus_version: 0.1.0
    graph_digest: 1f0c...            # the model this table belongs to (a stale table is refused)
    float_graph_digest: 1f0c...      # that model without dtype_converter layers (NAME.json; differs after --hybrid)
    quantizer: asymmetric_affine
    qtype: uint8
    algorithm: normal
    rounding: tflite                 # optional: the integer arithmetic (half_up when absent; tflite = TFLite's)
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
    layer_digests:                   # each layer of the float model (op, attributes, shapes, weights): names
      conv1: 3fa2c1d07e19            # the layer that changed

Read and written with ruamel.yaml in round-trip mode: rewriting a table a user edited keeps its key
order and the text of every value pegasus does not change. Comments are put back from the old text,
not from ruamel's tree: ruamel hangs a comment line on the node BEFORE it (the comment above
``customized_quantize_layers`` belongs to the last tensor entry, or to the last layer digest), so
replacing or deleting that node would lose it. Here each comment line stays above the key it stood
above (or the next key that still exists), end-of-line comments stay on their key or list item, and
comments at the end stay at the end.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from pathlib import Path
from typing import Any

import numpy as np
from ruamel.yaml import YAML
from ruamel.yaml.comments import Comment, CommentedMap, CommentedSeq
from ruamel.yaml.scalarfloat import ScalarFloat

from pegasus import __version__, yamlsafe
from pegasus.errors import PegasusError
from pegasus.fileio import atomic_write
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.ops.fixedpoint import ROUNDINGS
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


#: what a table's numbers may be: beyond these no integer grid or float32 value makes sense, and the integer
#: arithmetic's multipliers and shifts (2**-fl, scale ratios) stay finite
MAX_FL = 100
SCALE_RANGE = (1e-38, 1e30)  # 1e-38: about float32's smallest normal; older tables hold 8e-33
MAX_RANGE_VALUE = 1e30
MAX_AXIS = 64
ZERO_POINT_RANGES = {qtype: (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
                     for qtype, dtype in QTYPE_DTYPES.items()}


def _number(value: Any, kind: type) -> int | float | None:
    """``value`` as a finite ``kind`` (an int may be written 3 or 3.0), or None when it is no such number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):  # exact, however many digits (the callers' ranges refuse the huge ones)
        if kind is int:
            return value
        return float(value) if abs(value) <= 2**1000 else None
    if not math.isfinite(value):
        return None
    if kind is int:
        return int(value) if value.is_integer() else None
    return value


def _entry_from_yaml(name: str, entry: Any, where: str) -> TensorQuant:
    if not isinstance(entry, dict):
        raise PegasusError(f"{_line(entry)}tensor '{name}' must map dtype/qtype/scale/...", where=where)
    qtype = str(entry.get("qtype", ""))
    if qtype not in QTYPES:
        raise PegasusError(f"{_line(entry, 'qtype')}tensor '{name}' has unknown qtype '{qtype[:40]}' "
                           f"(valid: {', '.join(QTYPES)})", where=where)
    dtype = str(entry.get("dtype", "float32" if qtype == "float32" else "asymmetric_quantized"))
    if dtype not in DTYPES:
        raise PegasusError(f"{_line(entry, 'dtype')}tensor '{name}' has unknown dtype '{dtype[:40]}' "
                           f"(valid: {', '.join(DTYPES)})", where=where)

    def bad(key: str, what: str) -> PegasusError:
        shown = repr(entry.get(key))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return PegasusError(f"{_line(entry, key)}tensor '{name}': {key} must be {what}, got {shown}", where=where)

    def numbers(key: str, kind: type, low: float, high: float, what: str) -> list:
        value = entry.get(key, [])
        values = value if isinstance(value, list) else [value]
        parsed = [_number(v, kind) for v in values]
        if any(v is None or not low <= v <= high for v in parsed):
            raise bad(key, what)
        return parsed

    def integer(key: str, low: int, high: int, what: str) -> int | None:
        if entry.get(key) is None:
            return None
        value = _number(entry[key], int)
        if value is None or not low <= value <= high:
            raise bad(key, what)
        return value

    ranges = "a list of finite numbers (|value| <= 1e30)"
    zero_low, zero_high = ZERO_POINT_RANGES.get(qtype, (-2**31, 2**31 - 1))
    q = TensorQuant(qtype=qtype, dtype=dtype, method=str(entry.get("method", "layer")),
                    min_value=numbers("min_value", float, -MAX_RANGE_VALUE, MAX_RANGE_VALUE, ranges),
                    max_value=numbers("max_value", float, -MAX_RANGE_VALUE, MAX_RANGE_VALUE, ranges),
                    scale=numbers("scale", float, *SCALE_RANGE, "a list of numbers in [1e-38, 1e30]"),
                    zero_point=numbers("zero_point", int, zero_low, zero_high,
                                       f"a list of integers in [{zero_low}, {zero_high}] ({qtype})"),
                    fl=integer("fl", -MAX_FL, MAX_FL, f"an integer in [-{MAX_FL}, {MAX_FL}]"),
                    axis=integer("axis", -MAX_AXIS, MAX_AXIS, "an integer axis of the tensor"))
    if any(lo > hi for lo, hi in zip(q.min_value, q.max_value)):
        raise bad("min_value", "at most max_value")
    if q.is_integer:
        if not q.scale or len(q.scale) != len(q.zero_point):
            raise PegasusError(f"{_line(entry)}tensor '{name}' needs positive scale(s) and as many zero points",
                               where=where)
        if q.method not in ("layer", "channel"):
            raise PegasusError(f"{_line(entry, 'method')}tensor '{name}': method must be layer or channel",
                               where=where)
        if q.dtype == "dynamic_fixed_point" and q.fl is not None:
            q.scale = [2.0 ** -q.fl]  # fl is what users edit for fixed point
    return q


def _mapping_of(doc: Any, key: str, where: str) -> dict:
    """``doc[key]`` as a mapping (absent or empty: {})."""
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise PegasusError(f"{_line(doc, key)}{key} must be a mapping (name: value lines), got "
                           f"{type(value).__name__}", where=where)
    return value


def load_table(path: str | Path, graph: Graph | None = None, digest: str | None = None) -> QuantTable:
    """Read a .quantize file, checking it against ``graph`` (names) and ``digest`` (staleness)."""
    path = Path(path)
    where = str(path)
    doc = read_yaml(path)
    if not isinstance(doc, dict) or "quantize_parameters" not in doc:
        raise PegasusError("not a .quantize file (no quantize_parameters)", where=where)
    params = _mapping_of(doc, "quantize_parameters", where)
    tensors = {str(name): _entry_from_yaml(str(name), entry, where) for name, entry in params.items()}
    custom_doc = _mapping_of(doc, "customized_quantize_layers", where)
    custom = {str(k): str(v) for k, v in custom_doc.items()}
    for layer, precision in custom.items():
        if precision not in CUSTOM_PRECISIONS and precision not in ("dynamic_fixed_point-16",):
            raise PegasusError(f"{_line(custom_doc, layer)}customized_quantize_layers: layer '{layer}' has unknown "
                               f"precision '{precision}' (valid: {', '.join(CUSTOM_PRECISIONS)})", where=where)
        if precision == "dynamic_fixed_point-16":
            custom[layer] = "dynamic_fixed_point-i16"
    rounding = str(doc.get("rounding", "half_up"))
    if rounding not in ROUNDINGS:
        raise PegasusError(f"{_line(doc, 'rounding')}rounding '{rounding}' is not one of {', '.join(ROUNDINGS)}",
                           where=where)
    table = QuantTable(quantizer=str(doc.get("quantizer", "asymmetric_affine")), qtype=str(doc.get("qtype", "uint8")),
                       algorithm=str(doc.get("algorithm", "normal")), graph_digest=str(doc.get("graph_digest", "")),
                       tensors=tensors, customized_layers=custom, path=where,
                       layer_digests={str(k): str(v) for k, v in _mapping_of(doc, "layer_digests", where).items()},
                       float_graph_digest=str(doc.get("float_graph_digest", "")), rounding=rounding)
    if graph is not None:
        check_against_graph(table, graph, doc, digest)
    return table


def check_against_graph(table: QuantTable, graph: Graph, doc: Any = None, digest: str | None = None) -> None:
    """Refuse a table naming layers/tensors the model does not have, or made for another model."""
    where = table.path
    if digest is not None and table.graph_digest and table.graph_digest != digest:
        if table.float_graph_digest not in ("", table.graph_digest) and digest == table.float_graph_digest:
            raise PegasusError(f"is the hybrid table of model '{graph.name}' (customized_quantize_layers with "
                               "dtype_converter layers): pass --model NAME.quantize.json, which pegasus quantize "
                               "--hybrid wrote next to the model", where=where)
        raise PegasusError(f"was made for another version of model '{graph.name}' ({_what_changed(table, graph)}); "
                           "re-run pegasus quantize --rebuild", where=where)
    _check_layers(table, graph, doc)
    unknown = sorted(set(table.tensors) - set(graph.tensors))
    if unknown:
        _unknown_tensors(table, graph, doc, unknown)


def check_for_hybrid(table: QuantTable, graph: Graph, source: Graph, doc: Any = None) -> None:
    """What ``--hybrid`` accepts: ``graph`` is the model the table was made for (NAME.quantize.json) or the
    model it derives from (NAME.json); ``source`` is ``graph`` without dtype_converter layers."""
    from pegasus.quantizers.hybrid import converted_tensor

    expected = table.float_graph_digest or table.graph_digest
    if expected and serialize.graph_digest(source) != expected and serialize.graph_digest(graph) != table.graph_digest:
        raise PegasusError(f"was made for another version of model '{graph.name}' ({_what_changed(table, source)}); "
                           "re-run pegasus quantize --rebuild", where=table.path)
    _check_layers(table, source, doc)
    # entries of converters an earlier --hybrid inserted are dropped or reused; any other unknown name is a typo
    unknown = sorted(name for name in set(table.tensors) - set(graph.tensors) - set(source.tensors)
                     if converted_tensor(name) not in source.tensors)
    if unknown:
        _unknown_tensors(table, graph, doc, unknown)


def _check_layers(table: QuantTable, graph: Graph, doc: Any) -> None:
    layers = {node.name for node in graph.nodes if node.op != "DtypeConverter"}
    for layer in table.customized_layers:
        if layer not in layers:
            line = _line(doc.get("customized_quantize_layers"), layer) if doc is not None else ""
            raise PegasusError(f"{line}customized_quantize_layers names layer '{layer}', which is not in the model "
                               f"(layers: {', '.join(sorted(layers)[:8])}{', ...' if len(layers) > 8 else ''})",
                               where=table.path)


def _unknown_tensors(table: QuantTable, graph: Graph, doc: Any, unknown: list[str]) -> None:
    line = _line(doc.get("quantize_parameters"), unknown[0]) if doc is not None else ""
    raise PegasusError(f"{line}quantize_parameters names tensor '{unknown[0]}', which is not in model "
                       f"'{graph.name}'" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "") +
                       ": the model changed since this .quantize was made; re-run pegasus quantize --rebuild",
                       where=table.path)


def _what_changed(table: QuantTable, graph: Graph) -> str:
    """Name the first layer whose recorded digest differs from the model's (and how many more do)."""
    from pegasus.quantizers.hybrid import without_converters

    if not table.layer_digests:
        return f"graph digest {table.graph_digest}, model now {serialize.graph_digest(graph)}"
    graph = without_converters(graph)  # the digests are the float model's, as NAME.json has it
    now = serialize.layer_digests(graph)
    ops = {node.name: node.op for node in graph.nodes}
    changes = [f"layer '{name}' ({ops[name]}) is new" if name not in table.layer_digests else
               f"layer '{name}' ({ops[name]}) changed: its weights, attributes or shapes"
               for name in now if table.layer_digests.get(name) != now[name]]
    changes += [f"layer '{name}' was removed" for name in table.layer_digests if name not in now]
    if not changes:
        return "its inputs, outputs or layer order changed"
    return changes[0] + (f"; {len(changes) - 1} more layers changed" if len(changes) > 1 else "")


def _update(mapping: CommentedMap, values: dict[str, Any], *, drop_others: bool = True) -> None:
    """Set ``values`` in ``mapping`` in place, leaving values that are already equal as they were written."""
    if drop_others:
        for key in [k for k in mapping if k not in values]:
            del mapping[key]
    for key, value in values.items():
        if key not in mapping or mapping[key] != value:
            mapping[key] = value


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
    _update(entry, values)
    return entry


def table_document(table: QuantTable, existing: Any = None) -> CommentedMap:
    """The YAML document of ``table``; updates ``existing`` (a loaded document) in place."""
    doc = existing if isinstance(existing, CommentedMap) else CommentedMap()
    if not isinstance(existing, CommentedMap):
        doc.yaml_set_start_comment(HEADER)
    if "float_graph_digest" not in doc and "graph_digest" in doc:
        doc.insert(list(doc).index("graph_digest") + 1, "float_graph_digest", "")
    header = {"pegasus_version": __version__, "graph_digest": table.graph_digest,
              "float_graph_digest": table.float_graph_digest or table.graph_digest, "quantizer": table.quantizer,
              "qtype": table.qtype, "algorithm": table.algorithm}
    if table.rounding != "half_up" or "rounding" in doc:  # absent means half_up: older tables stay as written
        header["rounding"] = table.rounding
    if "rounding" in header and "rounding" not in doc and "algorithm" in doc:
        doc.insert(list(doc).index("algorithm") + 1, "rounding", table.rounding)
    _update(doc, header, drop_others=False)
    params = doc.get("quantize_parameters")
    if not isinstance(params, CommentedMap):
        params = doc["quantize_parameters"] = CommentedMap()
    for name in [k for k in params if k not in table.tensors]:
        del params[name]
    for name, q in table.tensors.items():
        params[name] = _entry_to_yaml(q, params.get(name))
    custom = doc.get("customized_quantize_layers")
    if not isinstance(custom, CommentedMap):
        custom = doc["customized_quantize_layers"] = CommentedMap()
        custom.fa.set_flow_style()
    _update(custom, table.customized_layers)
    digests = doc.get("layer_digests")
    if not isinstance(digests, CommentedMap):
        digests = doc["layer_digests"] = CommentedMap()
        note = "each layer as this table saw it (op, attributes, shapes, weights): names what changed in the model"
        doc.yaml_set_comment_before_after_key("layer_digests", before=note)
    _update(digests, table.layer_digests)
    return doc


def render_table(table: QuantTable, previous: str | None = None) -> str:
    """The text of ``table``. Given the text of the file it replaces, that document is updated in place and
    every comment and blank line of it is put back where it stood (see the module docstring)."""
    if previous is None:
        return dump_yaml(table_document(table))
    yaml = yamlsafe.make_yaml()
    try:
        doc = yamlsafe.parse(previous, "the previous table", yaml)
    except PegasusError:  # --rebuild over a broken file (or one with aliases or tags): nothing of it to keep
        doc = None
    if not isinstance(doc, CommentedMap) or "quantize_parameters" not in doc:
        return dump_yaml(table_document(table))
    order = _node_lines(doc)
    comments = _user_comments(previous, order)
    _strip_comments(doc)
    _exact_floats(doc, yaml)
    text = dump_yaml(table_document(table, doc))
    return _put_back(text, [path for _, path in order], comments, yaml)


def save_table(table: QuantTable, path: str | Path, previous: str | None = None) -> None:
    atomic_write(path, render_table(table, previous))


def previous_text(path: str | Path) -> str | None:
    """The text of an existing table, whose comments and layout a rewrite keeps (None: no readable file)."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def load_document(path: str | Path) -> Any:
    return read_yaml(path)


# ---- comments: kept from the old text ------------------------------------------------------------------------

NodePath = tuple  # a node's keys / list indices from the document root


def _node_lines(node: Any, path: NodePath = ()) -> list[tuple[int, NodePath]]:
    """(0-based line, path) of every mapping key and list item, in document order."""
    found: list[tuple[int, NodePath]] = []
    if isinstance(node, CommentedMap):
        for key in node:
            at = node.lc.key(key)
            if at is not None:
                found.append((at[0], path + (key,)))
            found += _node_lines(node[key], path + (key,))
    elif isinstance(node, CommentedSeq):
        for index, item in enumerate(node):
            at = node.lc.item(index)
            if at is not None:
                found.append((at[0], path + (index,)))
            found += _node_lines(item, path + (index,))
    return found


def _comment_start(line: str) -> int | None:
    """Where the end-of-line comment of a YAML line starts (with the blanks before it), or None."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote and not (quote == '"' and line[i - 1] == "\\"):
                quote = ""
        elif char in "'\"" and line[:i].rstrip()[-1:] in ("", ":", "-", "[", "{", ",", "?"):
            quote = char  # a quoted scalar starts here (a quote inside a plain scalar does not)
        elif char == "#" and i > 0 and line[i - 1] in " \t":
            return len(line[:i].rstrip())
    return None


def _user_comments(text: str, order: list[tuple[int, NodePath]]) -> list[tuple[int, str, str | None]]:
    """Each comment (or blank) line of ``text`` as (index in ``order`` of the node it belongs to, the line, None):
    a comment line belongs to the node after it (len(order): the end of the file); and each end-of-line comment
    as (index of the node on its line, the comment as a line of its own, the comment as it ends the line)."""
    lines = [line for line, _ in order]
    comments: list[tuple[int, str, str | None]] = []
    pending: list[str] = []
    for number, line in enumerate(text.splitlines()):
        if not line.strip() or line.lstrip().startswith("#"):
            pending.append(line)
            continue
        anchor = bisect_left(lines, number)
        comments += [(anchor, kept, None) for kept in pending]
        pending = []
        cut = _comment_start(line)
        if cut is not None:
            own_line = line[: len(line) - len(line.lstrip())] + line[cut:].lstrip()
            on_line = anchor < len(order) and lines[anchor] == number
            comments.append((anchor, own_line, line[cut:] if on_line else None))
    comments += [(len(order), kept, None) for kept in pending]
    return comments


def _exact_floats(node: Any, yaml: YAML) -> None:
    """Numbers as written stay as written, except where ruamel.yaml 0.19 would print a float it read in another
    value (2.856082316325486e-05 comes back as ...485e-05): those are printed as Python prints them."""
    if isinstance(node, (CommentedMap, CommentedSeq)):
        for key in list(node.keys() if isinstance(node, CommentedMap) else range(len(node))):
            value = node[key]
            if isinstance(value, ScalarFloat) and math.isfinite(value) and \
                    float(yaml.representer.represent_scalar_float(value).value) != float(value):
                node[key] = float(value)
            else:
                _exact_floats(value, yaml)


def _strip_comments(node: Any) -> None:
    if isinstance(node, (CommentedMap, CommentedSeq)):
        setattr(node, Comment.attrib, Comment())
        for child in node.values() if isinstance(node, CommentedMap) else node:
            _strip_comments(child)


def _put_back(text: str, old_paths: list[NodePath], comments: list[tuple[int, str, str | None]], yaml: YAML) -> str:
    """``text`` with the old comments at the line of the node each belongs to (or of the next node that is still
    there; end-of-line comments of a node that is gone become comment lines)."""
    lines = text.splitlines()
    at: dict[NodePath, int] = {}
    for number, path in _node_lines(yamlsafe.parse(text, "the rewritten table", yaml)):
        at.setdefault(path, number)
    before: dict[int, list[str]] = {}
    after: dict[int, str] = {}
    for anchor, comment, line_end in comments:
        if line_end is not None and old_paths[anchor] in at:
            number = at[old_paths[anchor]]
            after[number] = after.get(number, "") + line_end
            continue
        while anchor < len(old_paths) and old_paths[anchor] not in at:
            anchor += 1
        before.setdefault(at[old_paths[anchor]] if anchor < len(old_paths) else len(lines), []).append(comment)
    out: list[str] = []
    for number, line in enumerate(lines):
        out += before.get(number, [])
        out.append(line + after.get(number, ""))
    out += before.get(len(lines), [])
    return "\n".join(out) + "\n"
