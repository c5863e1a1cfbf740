"""ONNX: the protobuf reader, external data, converters, constant folding and the import passes; the graph is
then written as NAME.json/.data (what `pegasus import onnx` does)."""

from __future__ import annotations

from pathlib import Path

from fuzz.targets import target


@target("onnx")
def read_onnx(path: Path, scratch: Path) -> None:
    from pegasus.importers.onnx.loader import import_onnx
    from pegasus.ir.serialize import save

    save(import_onnx(path), scratch / "m.json", scratch / "m.data")
