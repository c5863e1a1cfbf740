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

Read with ruamel.yaml (round trip), so a user's comments survive when pegasus rewrites the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from pegasus.errors import PegasusError
from pegasus.fileio import require_file


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


@dataclass
class InputMeta:
    ports: list[PortMeta]
    databases: list[Path]  # dataset file per database; one database feeds all ports unless separated
    separated: bool
    path: Path


def _yaml() -> YAML:
    yaml = YAML()  # round-trip mode keeps comments and key order
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def read_yaml(path: str | Path) -> Any:
    path = require_file(path, "YAML file")
    try:
        return _yaml().load(path.read_text())
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PegasusError(f"YAML syntax error at {line}{problem}", where=str(path)) from exc


def _floats(value: Any, key: str, where: str) -> list[float]:
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise PegasusError(f"preprocess '{key}' must be a number or a list of numbers, got {value!r}",
                           where=where) from None


def load_input_meta(path: str | Path) -> InputMeta:
    path = Path(path)
    doc = read_yaml(path)
    where = str(path)
    try:
        databases = doc["input_meta"]["databases"]
    except (KeyError, TypeError):
        raise PegasusError("missing input_meta.databases (is this an inputmeta file?)", where=where) from None
    ports: list[PortMeta] = []
    sources: list[Path] = []
    for db in databases:
        if db.get("path"):
            sources.append((path.parent / str(db["path"])).resolve())
        for port in db.get("ports", []):
            pre = port.get("preprocess") or {}
            if "lid" not in port or "shape" not in port:
                raise PegasusError("every port needs 'lid' (the input name) and 'shape'", where=where)
            ports.append(PortMeta(
                name=str(port["lid"]), shape=[int(d) for d in port["shape"]],
                layout=str(port.get("layout", "nchw")).lower(), dtype=str(port.get("dtype", "float32")),
                category=str(port.get("category", "image")), reverse_channel=bool(pre.get("reverse_channel", False)),
                mean=_floats(pre.get("mean", 0.0), "mean", where), scale=_floats(pre.get("scale", 1.0), "scale", where),
                resize=bool(pre.get("resize", True))))
    for port in ports:
        if port.layout not in ("nchw", "nhwc"):
            raise PegasusError(f"port '{port.name}': layout must be nchw or nhwc, got '{port.layout}'", where=where)
    return InputMeta(ports, sources, separated=len(databases) > 1, path=path)


def input_meta_document(ports: list[PortMeta], sources: list[str]) -> dict[str, Any]:
    """The YAML structure for ``ports``: one database for all, or one per port when separated."""
    def port_doc(port: PortMeta) -> dict[str, Any]:
        return {"lid": port.name, "category": port.category, "dtype": port.dtype, "layout": port.layout,
                "shape": list(port.shape),
                "preprocess": {"reverse_channel": port.reverse_channel, "mean": list(port.mean),
                               "scale": list(port.scale), "resize": port.resize}}

    if len(sources) <= 1:
        databases = [{"path": sources[0] if sources else "", "type": "TEXT", "ports": [port_doc(p) for p in ports]}]
    else:
        databases = [{"path": src, "type": "TEXT", "ports": [port_doc(p)]} for src, p in zip(sources, ports)]
    return {"input_meta": {"databases": databases}}


def dump_yaml(doc: Any) -> str:
    from io import StringIO

    stream = StringIO()
    _yaml().dump(doc, stream)
    return stream.getvalue()
