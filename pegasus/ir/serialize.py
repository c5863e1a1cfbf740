"""Reads and writes the intermediate model: NAME.json (the graph, readable) + NAME.data (weights).

NAME.json lists inputs, outputs, the layers in topological order (name, op, attributes, input and
output tensor names) and every tensor's shape and dtype; constants say where their bytes lie in
NAME.data (offset, bytes; little-endian, 64-byte aligned). Keys are written in a stable order so the
same model always gives the same files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from pegasus import __version__
from pegasus.errors import PegasusError
from pegasus.fileio import AtomicFileSet, read_model_input
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import InvalidGraphError, verify
from pegasus.limits import check_present, check_tensor, element_count
from pegasus.ops.registry import attrs_to_dict, get_op, make_attrs

FORMAT = "pegasus-model"
FORMAT_VERSION = 1
DATA_ALIGN = 64


def graph_to_files(graph: Graph, source: dict[str, Any] | None = None) -> tuple[str, bytes]:
    """Serialize to (json text, data bytes)."""
    blob = bytearray()
    constants: dict[str, dict[str, int]] = {}
    for tensor in graph.constants():
        blob.extend(b"\0" * (-len(blob) % DATA_ALIGN))
        raw = np.ascontiguousarray(tensor.data, dtype=tensor.type.dtype.numpy.newbyteorder("<")).tobytes()
        constants[tensor.name] = {"offset": len(blob), "bytes": len(raw)}
        blob.extend(raw)

    def describe(name: str) -> dict[str, Any]:
        ttype = graph.type_of(name)
        entry: dict[str, Any] = {"shape": list(ttype.shape), "dtype": ttype.dtype.value}
        if name in constants:
            entry["constant"] = constants[name]
        return entry

    used = list(graph.inputs) + [n for node in graph.nodes for n in node.present_inputs() + node.outputs if n]
    tensors = {name: describe(name) for name in dict.fromkeys(used + graph.outputs) if name in graph.tensors}
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "pegasus_version": __version__,
        "name": graph.name,
        "source": source or {},
        "inputs": [{"name": n, **describe(n)} for n in graph.inputs],
        "outputs": [{"name": n, **describe(n)} for n in graph.outputs],
        "layers": [
            {"name": node.name, "op": node.op, "inputs": node.inputs, "outputs": node.outputs,
             "attributes": attrs_to_dict(node.attrs)}
            for node in graph.nodes
        ],
        "tensors": tensors,
        "data": {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()},
    }
    return json.dumps(doc, indent=1) + "\n", bytes(blob)


def save(graph: Graph, json_path: str | Path, data_path: str | Path, source: dict[str, Any] | None = None) -> None:
    """Write both files atomically: either both are replaced or neither is touched."""
    text, blob = graph_to_files(graph, source)
    with AtomicFileSet() as files:
        files.stage(json_path, text)
        files.stage(data_path, blob)


def load(json_path: str | Path, data_path: str | Path | None = None) -> Graph:
    """Read NAME.json + NAME.data (default: the .json's path with suffix .data).

    Users exchange these files, so they are read as untrusted input: both must be regular files (not links),
    every piece of the JSON is checked for its type, every shape against the tensor budget, every constant's
    offset and length against the .data file, and the graph is verified (layers in topological order, each
    stored type the one its op's shape rule gives). Anything wrong is one line naming the file and the piece.
    """
    json_path = Path(json_path)
    data_path = Path(data_path or json_path.with_suffix(".data"))
    text = read_model_input(json_path, "model file", given=True)
    where = str(json_path)
    try:
        doc = json.loads(text.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise PegasusError(f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", where=where) from exc
    except UnicodeDecodeError as exc:
        raise PegasusError("not a text file (is this the .data file?)", where=where) from exc
    except RecursionError:
        raise PegasusError("not a pegasus model (JSON nested too deeply)", where=where) from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise PegasusError(f"not a pegasus model ({exc})", where=where) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PegasusError(f"not a pegasus model (missing \"format\": \"{FORMAT}\")", where=where)
    blob = read_model_input(data_path, "model data file")
    data = doc.get("data", {})
    if not isinstance(data, dict):
        raise PegasusError("malformed model file: \"data\" must be an object", where=where)
    expected = data.get("bytes")
    if expected is not None and expected != len(blob):
        raise PegasusError(f"has {len(blob)} bytes but {json_path.name} expects {expected}: "
                           "the two files do not belong together", where=str(data_path))
    try:
        graph = _graph_from_doc(doc, blob)
        verify(graph)
    except InvalidGraphError as exc:
        raise PegasusError(f"malformed model file: {str(exc).removeprefix('invalid graph: ')}", where=where) from None
    except PegasusError as exc:
        if exc.where:
            raise
        raise PegasusError(exc.message, where=where) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise PegasusError(f"malformed model file: {type(exc).__name__}: {exc}", where=where) from None
    return graph


def _need(value: Any, kind: type, what: str) -> Any:
    """``value`` if it is of JSON type ``kind``, else a one-line error naming the piece."""
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
        raise PegasusError(f"{what} must be {names.get(kind, kind.__name__)}, not {type(value).__name__}")
    return value


def _names(value: Any, what: str) -> list[str]:
    for index, item in enumerate(_need(value, list, what)):
        _need(item, str, f"{what}[{index}]")
    return list(value)


def _tensor_from_entry(name: str, entry: Any, blob: bytes) -> Tensor:
    what = f"tensor '{name}'"
    _need(entry, dict, what)
    shape = tuple(_need(entry.get("shape"), list, f"{what} shape"))
    try:
        dtype = DType(_need(entry.get("dtype"), str, f"{what} dtype"))
    except ValueError:
        raise PegasusError(f"{what} has unknown dtype {entry.get('dtype')!r}") from None
    element_count(shape, what)  # integers, none negative (activations over the budget: refused where computed)
    ttype = TensorType(tuple(int(d) for d in shape), dtype)
    if "constant" not in entry:
        return Tensor(name, ttype)
    nbytes = check_tensor(shape, dtype.itemsize, what)
    place = _need(entry["constant"], dict, f"{what} constant")
    offset = _need(place.get("offset"), int, f"{what} constant offset")
    size = _need(place.get("bytes"), int, f"{what} constant bytes")
    if offset < 0 or size != nbytes:
        raise PegasusError(f"{what} ({ttype}) needs {nbytes} bytes but its constant says offset {offset}, "
                           f"bytes {size}")
    check_present(offset + size, len(blob), f"{what} (at offset {offset} of the .data file)")
    data = np.frombuffer(blob, dtype=dtype.numpy.newbyteorder("<"), count=ttype.size, offset=offset)
    return Tensor(name, ttype, data.astype(dtype.numpy).reshape(ttype.shape))


def _graph_from_doc(doc: dict[str, Any], blob: bytes) -> Graph:
    graph = Graph(_need(doc.get("name", "model"), str, "name"))
    for name, entry in _need(doc.get("tensors"), dict, "\"tensors\"").items():
        graph.tensors[name] = _tensor_from_entry(name, entry, blob)
    for key in ("inputs", "outputs"):
        ports = _need(doc.get(key), list, f"\"{key}\"")
        names = [_need(_need(port, dict, f"an entry of \"{key}\"").get("name"), str, f"a name in \"{key}\"")
                 for port in ports]
        for name in names:
            if name not in graph.tensors:
                raise PegasusError(f"{key[:-1]} '{name}' is not in \"tensors\"")
        setattr(graph, key, names)
    for index, layer in enumerate(_need(doc.get("layers"), list, "\"layers\"")):
        what = f"layer {index}"
        _need(layer, dict, what)
        name, op = _need(layer.get("name"), str, f"{what} name"), _need(layer.get("op"), str, f"{what} op")
        try:
            opdef = get_op(op)
        except KeyError:
            raise PegasusError(f"layer '{name}' has unknown op '{op}'") from None
        inputs = _names(layer.get("inputs"), f"layer '{name}' inputs")
        outputs = _names(layer.get("outputs"), f"layer '{name}' outputs")
        for tensor in inputs + outputs:
            if tensor and tensor not in graph.tensors:
                raise PegasusError(f"layer '{name}' names tensor '{tensor}', which is not in \"tensors\"")
        attributes = _need(layer.get("attributes", {}), dict, f"layer '{name}' attributes")
        try:
            attrs = make_attrs(opdef, **attributes)
        except TypeError as exc:
            raise PegasusError(f"layer '{name}': {exc}") from None
        graph.nodes.append(Node(name, op, attrs, inputs, outputs))
    return graph


def layer_digests(graph: Graph) -> dict[str, str]:
    """A short hash per layer of its op, attributes, tensor names and types, and constant inputs' bytes: what a
    .quantize file keeps to name the layer that changed when its model changes."""
    digests: dict[str, str] = {}
    for node in graph.nodes:
        names = node.present_inputs() + [n for n in node.outputs if n]
        doc = {"op": node.op, "attributes": attrs_to_dict(node.attrs), "inputs": node.inputs, "outputs": node.outputs,
               "types": [[list(graph.type_of(n).shape), graph.type_of(n).dtype.value] for n in names
                         if n in graph.tensors]}
        h = hashlib.sha256(json.dumps(doc, sort_keys=True).encode())
        for name in node.present_inputs():
            value = graph.value_of(name)
            if value is not None:
                h.update(np.ascontiguousarray(value).tobytes())
        digests[node.name] = h.hexdigest()[:12]
    return digests


def graph_digest(graph: Graph) -> str:
    """A hash of the graph's structure and weights (what a .quantize file is tied to)."""
    text, blob = graph_to_files(graph)
    doc = json.loads(text)
    for key in ("pegasus_version", "source"):
        doc.pop(key)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode() + blob).hexdigest()[:16]
