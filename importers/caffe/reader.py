"""Read a Caffe network (text ``.prototxt``) and its weights (binary ``.caffemodel``) as data.

- ``read_prototxt``: the text parsed with protobuf's ``text_format`` against pegasus's own declarations
  (proto.py). A syntax error, or a misspelt field of a supported layer, is one error with its line and
  column. A field pegasus does not declare is tolerated only inside layers of types it cannot convert
  (the loader lists those all at once instead), so their parameter messages need no declaration.
- ``network_layers``: the layers Caffe builds for inference (the TEST phase's include/exclude rules
  applied), current ``layer`` and legacy V1 ``layers`` alike, each with its line in the file.
- ``network_inputs``: ``input:`` with ``input_shape``/``input_dim``, and ``Input`` layers.
- ``read_caffemodel``: each layer's blobs as float32 arrays (``data``, ``double_data`` or NVCaffe's float16
  ``raw_data``) with the shape the file declares, by layer name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import message as pb_message
from google.protobuf import text_format

from pegasus.errors import PegasusError
from pegasus.fileio import require_file
from pegasus.importers.caffe.proto import message_classes
from pegasus.limits import check_tensor, element_count

#: V1 layer enum names whose type name is not their CamelCase form
_V1_NAMES = {"ABSVAL": "AbsVal", "ARGMAX": "ArgMax", "BNLL": "BNLL", "HDF5_DATA": "HDF5Data",
             "HDF5_OUTPUT": "HDF5Output", "IM2COL": "Im2col", "LRN": "LRN", "MVN": "MVN", "RELU": "ReLU",
             "SOFTMAX_LOSS": "SoftmaxWithLoss", "TANH": "TanH"}


@dataclass
class CaffeLayer:
    """One layer as the file gives it; ``message`` is its LayerParameter (or V1LayerParameter)."""

    name: str
    type: str
    bottoms: list[str]
    tops: list[str]
    message: Any
    line: int

    def param(self, field_name: str) -> Any:
        """The layer's ``field_name`` parameter message; its defaults when unset or unknown to V1 layers."""
        if field_name in self.message.DESCRIPTOR.fields_by_name:
            return getattr(self.message, field_name)
        return getattr(message_classes()["LayerParameter"](), field_name)


@dataclass
class Blob:
    """A caffemodel blob: float32 values and the shape the file declares (``legacy``: the old 4-D
    num/channels/height/width form, which Caffe matches against any shape padded to 4-D with 1s)."""

    data: np.ndarray
    shape: tuple[int, ...]
    legacy: bool = False


@dataclass
class Network:
    """A parsed prototxt. ``deferred`` is the strict parse's error when only the lenient parse succeeded:
    the loader raises it unless the file has layer types pegasus cannot convert (which it lists instead)."""

    message: Any
    path: Path
    text: str
    deferred: PegasusError | None = None


def _parse_error(path: Path, exc: text_format.ParseError) -> PegasusError:
    line, column = exc.GetLine(), exc.GetColumn()
    text = re.sub(r"^\d+:\d+ : ", "", str(exc))
    return PegasusError(f"line {line}, column {column}: {text}" if line else text, where=str(path))


def read_prototxt(path: str | Path, proto: str = "caffe") -> Network:
    """Parse a text prototxt; a syntax error or an unknown field is reported with its line and column."""
    path = require_file(path, "Caffe prototxt")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PegasusError("not a text prototxt (a binary .caffemodel goes to --weights)", where=str(path)) from None
    net_class = message_classes(proto)["NetParameter"]
    net, deferred = net_class(), None
    try:
        text_format.Parse(text, net)
    except text_format.ParseError as strict:
        if "has no field named" not in str(strict):
            raise _parse_error(path, strict) from None
        net = net_class()
        try:
            text_format.Parse(text, net, allow_unknown_field=True)
        except text_format.ParseError:
            raise _parse_error(path, strict) from None
        deferred = _parse_error(path, strict)
    if not net.layer and not net.layers:
        raise PegasusError("no layers found (is this a Caffe prototxt?)", where=str(path))
    return Network(net, path, text, deferred)


def _layer_lines(text: str, field_name: str) -> list[int]:
    """Line of each top-level ``field_name { ... }`` entry, in order (comments and strings skipped)."""
    lines, depth, line, i, n = [], 0, 1, 0, len(text)
    pattern = re.compile(rf"{field_name}\s*:?\s*\{{")
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch in "\"'":
            end = i + 1
            while end < n and text[end] != ch:
                end += 2 if text[end] == "\\" else 1
            line += text.count("\n", i, end)
            i = end + 1
            continue
        elif ch in "{<":
            depth += 1
        elif ch in "}>":
            depth -= 1
        elif depth == 0 and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and pattern.match(text, i):
            lines.append(line)
        i += 1
    return lines


def _state_meets(rule: Any, phase: int) -> bool:
    """Caffe's NetState rule check for the inference state (phase TEST, level 0, no stages)."""
    if rule.HasField("phase") and rule.phase != phase:
        return False
    if rule.HasField("min_level") and rule.min_level > 0:
        return False
    if rule.HasField("max_level") and rule.max_level < 0:
        return False
    return not rule.stage


def _included(message: Any, phase: int) -> bool:
    if message.include:
        return any(_state_meets(rule, phase) for rule in message.include)
    return not any(_state_meets(rule, phase) for rule in message.exclude)


def _v1_type(message: Any) -> str:
    enum_name = message.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number[message.type].name
    return _V1_NAMES.get(enum_name) or "".join(word.capitalize() for word in enum_name.split("_"))


def network_layers(net: Network) -> list[CaffeLayer]:
    """The layers Caffe instantiates for inference, in file order (current and V1 layers)."""
    message = net.message
    phase = message.state.phase
    layers = []
    for field_name, type_of in (("layer", lambda m: m.type), ("layers", _v1_type)):
        entries = getattr(message, field_name)
        lines = _layer_lines(net.text, field_name)
        for index, entry in enumerate(entries):
            line = lines[index] if len(lines) == len(entries) else 0
            if not _included(entry, phase):
                continue
            name = entry.name or f"{type_of(entry)}_{index}"
            layers.append(CaffeLayer(name, type_of(entry), list(entry.bottom), list(entry.top), entry, line))
    return layers


def network_inputs(net: Network, layers: list[CaffeLayer]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of each network input: ``input`` + ``input_shape``/``input_dim``, then Input layers."""
    message, where = net.message, str(net.path)
    inputs = []
    dims = list(message.input_dim)
    if dims and len(dims) != 4 * len(message.input):
        raise PegasusError(f"input_dim gives {len(dims)} values for {len(message.input)} inputs (4 per input)",
                           where=where)
    for index, name in enumerate(message.input):
        if index < len(message.input_shape):
            shape = tuple(int(d) for d in message.input_shape[index].dim)
        elif dims:
            shape = tuple(int(d) for d in dims[4 * index:4 * index + 4])
        else:
            raise PegasusError(f"input '{name}' has no shape (give input_shape or input_dim)", where=where)
        inputs.append((name, shape))
    for layer in layers:
        if layer.type != "Input":
            continue
        shapes = list(layer.param("input_param").shape)
        if len(shapes) not in (1, len(layer.tops)):
            raise PegasusError(f"Input layer '{layer.name}' (line {layer.line}) gives {len(shapes)} shapes for "
                               f"{len(layer.tops)} tops", where=where)
        for index, top in enumerate(layer.tops):
            inputs.append((top, tuple(int(d) for d in shapes[index if len(shapes) > 1 else 0].dim)))
    for name, shape in inputs:
        if not shape or any(d < 1 for d in shape):
            raise PegasusError(f"input '{name}' has shape {list(shape)}: every dimension must be positive",
                               where=where)
    return inputs


# ---- the caffemodel -------------------------------------------------------------------------------
#: raw_data_type -> the little-endian float type of NVCaffe's raw_data
_RAW_TYPES = {0: np.float64, 1: np.float32, 2: np.float16}


def _declared_shape(blob: Any, stored: int) -> tuple[tuple[int, ...], bool]:
    """(shape, legacy) as the blob declares it; ``stored`` values stand for an undeclared legacy shape."""
    if blob.HasField("shape"):
        return tuple(int(d) for d in blob.shape.dim), False
    if any(blob.HasField(f) for f in ("num", "channels", "height", "width")):
        return (blob.num, blob.channels, blob.height, blob.width), True
    return (stored,), True


def _blob(blob: Any, layer: str, index: int, where: str) -> Blob:
    """One blob's values, its declared shape checked first: integer dimensions (Python ints, no wrap-around),
    none negative, the float32 tensor within the budget, and exactly the values the shape needs stored."""
    what = f"blob {index} of layer '{layer}'"
    if blob.raw_data:
        raw = _RAW_TYPES.get(blob.raw_data_type)
        if raw is None:
            raise PegasusError(f"{what} stores raw data of type {blob.raw_data_type}, which is not a float type",
                               where=where)
        itemsize = np.dtype(raw).itemsize
        if len(blob.raw_data) % itemsize:
            raise PegasusError(f"{what} has {len(blob.raw_data)} bytes of raw_data, not a whole number of "
                               f"{np.dtype(raw).name} values ({itemsize} bytes each)", where=where)
        stored, source = len(blob.raw_data) // itemsize, "raw_data"
    else:
        stored, source = (len(blob.double_data), "double_data") if len(blob.double_data) else (len(blob.data), "data")
    shape, legacy = _declared_shape(blob, stored)
    count = element_count(shape, what, where)
    check_tensor(shape, 4, what, where)
    if count != stored:
        raise PegasusError(f"{what} has {stored} values in {source} for shape {list(shape)} ({count} values)",
                           where=where)
    if source == "raw_data":
        data = np.frombuffer(blob.raw_data, dtype=np.dtype(raw).newbyteorder("<")).astype(np.float32)
    elif source == "double_data":
        data = np.asarray(blob.double_data, dtype=np.float64).astype(np.float32)
    else:
        data = np.asarray(blob.data, dtype=np.float32)
    return Blob(data.reshape(shape), shape, legacy)


def read_caffemodel(path: str | Path, proto: str = "caffe") -> dict[str, list[Blob]]:
    """The blobs of every layer of a binary caffemodel, by layer name (current and V1 layers)."""
    path = require_file(path, "Caffe weights")
    data = path.read_bytes()
    net = message_classes(proto)["NetParameter"]()
    try:
        net.ParseFromString(data)
    except pb_message.DecodeError as exc:
        raise PegasusError(f"not a binary caffemodel ({exc}; is the file truncated?)", where=str(path)) from None
    if not data or not (net.layer or net.layers):
        raise PegasusError(f"not a binary caffemodel (no layers in {len(data)} bytes)", where=str(path))
    blobs: dict[str, list[Blob]] = {}
    for entry in list(net.layer) + list(net.layers):
        if entry.blobs:
            blobs[entry.name] = [_blob(b, entry.name, i, str(path)) for i, b in enumerate(entry.blobs)]
    return blobs
