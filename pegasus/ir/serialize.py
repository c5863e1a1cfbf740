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
from pegasus.fileio import AtomicFileSet, require_file
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
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
    """Read NAME.json + NAME.data (default: the .json's path with suffix .data)."""
    json_path = require_file(json_path, "model file")
    data_path = require_file(data_path or json_path.with_suffix(".data"), "model data file")
    try:
        doc = json.loads(json_path.read_text())
    except json.JSONDecodeError as exc:
        raise PegasusError(f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                           where=str(json_path)) from exc
    except UnicodeDecodeError as exc:
        raise PegasusError("not a text file (is this the .data file?)", where=str(json_path)) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PegasusError(f"not a pegasus model (missing \"format\": \"{FORMAT}\")", where=str(json_path))
    blob = data_path.read_bytes()
    expected = doc.get("data", {}).get("bytes")
    if expected is not None and expected != len(blob):
        raise PegasusError(f"has {len(blob)} bytes but {json_path.name} expects {expected}: "
                           "the two files do not belong together", where=str(data_path))
    try:
        return _graph_from_doc(doc, blob)
    except (KeyError, TypeError, ValueError) as exc:
        raise PegasusError(f"malformed model file: {exc}", where=str(json_path)) from exc


def _graph_from_doc(doc: dict[str, Any], blob: bytes) -> Graph:
    graph = Graph(doc["name"])
    for name, entry in doc["tensors"].items():
        ttype = TensorType(tuple(entry["shape"]), DType(entry["dtype"]))
        data = None
        if "constant" in entry:
            where = entry["constant"]
            raw = blob[where["offset"]: where["offset"] + where["bytes"]]
            data = np.frombuffer(raw, dtype=ttype.dtype.numpy.newbyteorder("<")).astype(ttype.dtype.numpy)
            data = data.reshape(ttype.shape)
        graph.tensors[name] = Tensor(name, ttype, data)
    graph.inputs = [entry["name"] for entry in doc["inputs"]]
    graph.outputs = [entry["name"] for entry in doc["outputs"]]
    for layer in doc["layers"]:
        try:
            opdef = get_op(layer["op"])
        except KeyError:
            raise ValueError(f"layer '{layer['name']}' has unknown op '{layer['op']}'") from None
        attrs = make_attrs(opdef, **layer.get("attributes", {}))
        graph.nodes.append(Node(layer["name"], layer["op"], attrs, list(layer["inputs"]), list(layer["outputs"])))
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
