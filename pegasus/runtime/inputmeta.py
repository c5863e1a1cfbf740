"""The input meta file (NAME_inputmeta.yml): how each model input is fed and preprocessed.

Layout follows Acuity's inputmeta so its users recognise it::

    input_meta:
      databases:
      - path: dataset.txt        # one sample per line, paths relative to this file
        type: TEXT
        ports:
        - lid: data              # the model input's tensor name
          category: image        # image | frequency | undefined (raw tensors)
          dtype: float32
          layout: nchw           # nchw | nhwc
          shape: [1, 1, 28, 28]
          preprocess:
            reverse_channel: false   # true: feed BGR
            mean: [0.0]              # per channel
            scale: [0.00392157]      # per channel: out = (x - mean) * scale
            resize: true             # resize images to the input's spatial size

``pegasus generate inputmeta`` writes it (``input_meta_document`` + ``dump_yaml``); inference and
calibration read it (``load_input_meta``). Read with ruamel.yaml (round trip), so a user's comments
survive when pegasus rewrites the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from pegasus import yamlsafe
from pegasus.errors import PegasusError

LAYOUTS = ("nchw", "nhwc")
IMAGE_CHANNELS = (1, 3, 4)  # grayscale, RGB, RGBA
MAX_IMAGE_CHANNELS = max(IMAGE_CHANNELS)

HEADER = """\
Input meta{about}: how each model input is fed and preprocessed. Edit it freely;
comments are kept when pegasus rewrites this file.

Each port is one model input (lid = its tensor name). Images (PNG/JPEG/BMP) are preprocessed as
    out = (x - mean) * scale        per channel, x = pixel value 0..255
channels in RGB order (reverse_channel: true feeds BGR); mean and scale list one value per channel in
the order the model sees them (after reverse_channel); one value applies to every channel.
resize: true scales images to the input's height and width; false rejects images of another size.
layout says where the channel axis lies in shape: nchw = [batch, channels, height, width],
nhwc = [batch, height, width, channels]. .npy/.pb/.tensor samples are fed as they are.
path: the dataset file (relative to this file, or absolute): one sample per line, paths relative
to the dataset file; with one database for several inputs, each line names one file per port, in
port order; with one database per input (separated), line i of every dataset is sample i."""


@dataclass
class PortMeta:
    """Preprocessing of one model input."""

    name: str
    shape: list[int]
    layout: str = "nchw"
    dtype: str = "float32"
    category: str = "image"
    reverse_channel: bool = False
    mean: list[float] = field(default_factory=lambda: [0.0])
    scale: list[float] = field(default_factory=lambda: [1.0])
    resize: bool = True

    @property
    def channels(self) -> int:
        """Channels of a 4-D input (by its layout); other inputs count as one channel."""
        if len(self.shape) != 4:
            return 1
        return self.shape[1] if self.layout == "nchw" else self.shape[3]


@dataclass
class InputMeta:
    ports: list[PortMeta]
    databases: list[Path]  # dataset file per database; one database feeds all ports unless separated
    separated: bool
    path: Path


def guess_layout(shape: list[int], recorded: str | None = None) -> str:
    """Where a 4-D input's channel axis lies, from its shape: nhwc when the last axis holds 1, 3 or 4 image
    channels and axis 1 is too large to be a channel count (``1x96x96x3``, ``1x49x10x1``), nchw in the mirror
    case (``1x3x224x224``); otherwise (``1x4x4x3``, or a 2-channel ``1x2x4x4``) the layout the importer
    recorded for the model, else nchw. Other ranks: nchw (the field is unused there)."""
    if len(shape) == 4:
        if shape[3] in IMAGE_CHANNELS and shape[1] > MAX_IMAGE_CHANNELS:
            return "nhwc"
        if shape[1] in IMAGE_CHANNELS and shape[3] > MAX_IMAGE_CHANNELS:
            return "nchw"
        if recorded in LAYOUTS:
            return recorded
    return "nchw"


def default_port(name: str, shape: list[int], dtype: str, recorded_layout: str | None = None) -> PortMeta:
    """A port as ``generate inputmeta`` starts it (and as a sample file without an input meta is read): layout
    from ``guess_layout``, 4-D inputs with 1, 3 or 4 channels are images; mean 0, scale 1 per channel."""
    port = PortMeta(name=name, shape=list(shape), layout=guess_layout(shape, recorded_layout), dtype=dtype)
    port.category = "image" if len(shape) == 4 and port.channels in IMAGE_CHANNELS else "undefined"
    port.mean, port.scale = [0.0] * port.channels, [1.0] * port.channels  # one slot per channel to edit
    return port


def _yaml() -> YAML:
    return yamlsafe.make_yaml()  # round-trip mode keeps comments and key order; no aliases, tags or deep nesting


def read_yaml(path: str | Path) -> Any:
    """A user's YAML file (input meta, .quantize) in round-trip mode, through pegasus's one YAML reader."""
    return yamlsafe.load(path)


#: the largest |mean| and |scale|: (pixel - mean) * scale stays a finite float32 for any pixel 0..255 and
#: beyond any preprocessing a real model uses
MAX_PREPROCESS = 1e15


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_PREPROCESS  # NaN fails too


def _floats(value: Any, key: str, where: str) -> list[float]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not all(_finite(v) for v in values):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise PegasusError(f"preprocess '{key}' must be a finite number (|value| <= {MAX_PREPROCESS:g}) or a list "
                           f"of them, got {shown}", where=where)
    return [float(v) for v in values]


def _mapping(value: Any, what: str, where: str) -> dict:
    if not isinstance(value, dict):
        raise PegasusError(f"{what} must be a mapping (key: value lines), got {type(value).__name__}", where=where)
    return value


def _list(value: Any, what: str, where: str) -> list:
    if not isinstance(value, list):
        raise PegasusError(f"{what} must be a list ('- ' items), got {type(value).__name__}", where=where)
    return value


def _port(entry: Any, where: str) -> PortMeta:
    entry = _mapping(entry, "each port", where)
    if "lid" not in entry or "shape" not in entry:
        raise PegasusError("every port needs 'lid' (the input name) and 'shape'", where=where)
    name = str(entry["lid"])
    shape = _list(entry["shape"], f"port '{name}': shape", where)
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in shape):
        shown = repr(shape) if len(repr(shape)) <= 60 else repr(shape)[:57] + "..."
        raise PegasusError(f"port '{name}': shape must be a list of integers >= 0, got {shown}", where=where)
    shape = [int(d) for d in shape]
    pre = _mapping(entry.get("preprocess") or {}, f"port '{name}': preprocess", where)
    port = PortMeta(
        name=name, shape=shape, layout=str(entry.get("layout", "nchw")).lower(),
        dtype=str(entry.get("dtype", "float32")), category=str(entry.get("category", "image")),
        reverse_channel=bool(pre.get("reverse_channel", False)), mean=_floats(pre.get("mean", 0.0), "mean", where),
        scale=_floats(pre.get("scale", 1.0), "scale", where), resize=bool(pre.get("resize", True)))
    if port.layout not in LAYOUTS:
        raise PegasusError(f"port '{name}': layout must be nchw or nhwc, got '{port.layout}'", where=where)
    for key, values in (("mean", port.mean), ("scale", port.scale)):
        if len(values) not in (1, port.channels):
            raise PegasusError(f"port '{name}': {len(values)} {key} values for {port.channels} channel(s) "
                               f"(shape {shape}, layout {port.layout}); give one per channel or one for all",
                               where=where)
    return port


def load_input_meta(path: str | Path) -> InputMeta:
    path = Path(path)
    doc = read_yaml(path)
    where = str(path)
    try:
        databases = doc["input_meta"]["databases"]
    except (KeyError, TypeError):
        raise PegasusError("missing input_meta.databases (is this an inputmeta file?)", where=where) from None
    databases = [_mapping(db, "each database", where) for db in _list(databases, "input_meta.databases", where)]
    ports: list[PortMeta] = []
    sources: list[Path] = []
    for db in databases:
        if db.get("path"):
            sources.append((path.parent / str(db["path"])).resolve())
        db_ports = [_port(entry, where) for entry in _list(db.get("ports") or [], "ports", where)]
        if len(databases) > 1 and (len(db_ports) != 1 or not db.get("path")):
            raise PegasusError("with several databases (one per input) each needs a 'path' and exactly one port",
                               where=where)
        ports.extend(db_ports)
    names = [port.name for port in ports]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PegasusError(f"port(s) {duplicates} listed more than once", where=where)
    return InputMeta(ports, sources, separated=len(databases) > 1, path=path)


def _flow(values: list) -> CommentedSeq:
    seq = CommentedSeq(values)
    seq.fa.set_flow_style()  # [a, b, c] on one line, as users write shapes and means
    return seq


def _port_doc(port: PortMeta) -> CommentedMap:
    pre = CommentedMap([("reverse_channel", port.reverse_channel), ("mean", _flow(list(port.mean))),
                        ("scale", _flow(list(port.scale))), ("resize", port.resize)])
    pre.yaml_add_eol_comment("true: channels in BGR order", "reverse_channel")
    doc = CommentedMap([("lid", port.name), ("category", port.category), ("dtype", port.dtype),
                        ("layout", port.layout), ("shape", _flow(list(port.shape))), ("preprocess", pre)])
    doc.yaml_add_eol_comment("image | undefined (tensor files, no preprocessing)", "category")
    doc.yaml_add_eol_comment("nchw | nhwc: where the channel axis is in shape", "layout")
    doc.yaml_add_eol_comment("out = (x - mean) * scale, per channel", "preprocess")
    return doc


def input_meta_document(ports: list[PortMeta], sources: list[str], about: str = "") -> CommentedMap:
    """The YAML structure for ``ports``: one database for all, or one per port when separated.

    ``about`` (e.g. the model file) goes into the explanatory comment at the top.
    """
    if len(sources) <= 1:
        databases = [CommentedMap([("path", sources[0] if sources else ""), ("type", "TEXT"),
                                   ("ports", [_port_doc(p) for p in ports])])]
    else:
        databases = [CommentedMap([("path", src), ("type", "TEXT"), ("ports", [_port_doc(p)])])
                     for src, p in zip(sources, ports)]
    doc = CommentedMap([("input_meta", CommentedMap([("databases", databases)]))])
    doc.yaml_set_start_comment(HEADER.format(about=f" for {about}" if about else ""))
    return doc


def dump_yaml(doc: Any) -> str:
    stream = StringIO()
    _yaml().dump(doc, stream)
    return stream.getvalue()
