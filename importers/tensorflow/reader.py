"""Reads a TensorFlow model as data: a frozen GraphDef (``.pb``, or text ``.pbtxt``), a SavedModel folder, or a
TF1 MetaGraph (``.meta``) beside its checkpoint. Nothing of the model is run and no Python object of it is
restored, so SavedModels written by older TensorFlow versions read even where ``tf.saved_model.load`` fails.

- SavedModel: ``saved_model.pb`` holds MetaGraphDefs; the one tagged ``serve`` (or the only one) is read. Its
  signature (``--signature``, default ``serving_default``) names the inputs and outputs; in a TF2 SavedModel
  the signature's output is a ``StatefulPartitionedCall`` of a function in the graph's library, inlined as
  data (nodes.py).
- Variables (``VarHandleOp``, TF1's ``VariableV2``) take their values from the checkpoint (``variables/
  variables`` of a SavedModel, the ``.meta`` file's prefix for a MetaGraph), read as data too (checkpoint.py),
  never by TensorFlow's C++ reader. Which checkpoint key holds which variable is read from the graph's own
  restore op (the saver_def's ``restore_op_name``: a ``RestoreV2`` whose values are assigned to the variables,
  in a function for TF2 and in the graph for TF1); a variable the restore op does not name is looked up by its
  own name.

The result is a ``TfModel``: ``SourceNode``s in file order, constants, the dtypes (and TF1 shapes) known for
tensors, and the signature's inputs and outputs as (key, tensor name) pairs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.fileio import read_model_input, require_file
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.tensorflow.checkpoint import Checkpoint
from pegasus.importers.tensorflow.nodes import GraphReader, ReadGraph, graph_ref
from pegasus.importers.tensorflow.tfapi import tensorflow

VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")
#: ops that pass a value (or a variable) through unchanged, looked through when matching restores to variables
_PASS_THROUGH = ("Identity", "ReadVariableOp", "Snapshot")
_SKIP_SIGNATURES = ("__saved_model_init_op",)


@dataclass
class TfModel:
    """A TensorFlow graph read as data. ``expand`` inlines the function calls some tensors need; ``value`` gives
    a tensor's constant value (a Const, or a variable read from the checkpoint when first asked)."""

    name: str
    kind: str                                    # "frozen graph", "SavedModel", "MetaGraph"
    graph: GraphReader
    inputs: list[tuple[str, str]] = field(default_factory=list)    # the signature's (key, tensor)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    restore_op: str = ""                         # the saver's restore op (a tensor name)
    _keys: dict[str, str] | None = None          # variable tensor -> checkpoint key, worked out when first needed

    @property
    def nodes(self) -> list[SourceNode]:
        return self.graph.out.nodes

    @property
    def dtypes(self) -> dict[str, str]:
        return self.graph.out.dtypes

    @property
    def shapes(self) -> dict[str, list[int | None] | None]:
        return self.graph.out.shapes

    @property
    def control(self) -> dict[str, list[str]]:
        return self.graph.out.control

    def producer(self, tensor: str) -> SourceNode | None:
        return self.graph.out.producer.get(tensor)

    def is_constant(self, tensor: str) -> bool:
        """A Const, or a variable the checkpoint holds."""
        if tensor in self.graph.out.constants:
            return True
        node = self.producer(tensor)
        return node is not None and node.op_type in VARIABLE_OPS and tensor in self._variable_keys()

    def expand(self, tensors, stop=(), value_of=None) -> None:
        self.graph.expand(tensors, stop, value_of)

    def value(self, tensor: str) -> np.ndarray | None:
        constants = self.graph.out.constants
        if tensor not in constants and self.is_constant(tensor):
            constants[tensor] = np.asarray(self.checkpoint.get_tensor(self._variable_keys()[tensor]))
        return constants.get(tensor)

    def _variable_keys(self) -> dict[str, str]:
        if self._keys is None:
            self._keys = {}
            if self.checkpoint is not None:
                if self.restore_op:
                    self.graph.expand([self.restore_op])
                self._keys = _variable_keys(self.graph.out, self.checkpoint)
        return self._keys


# ---- formats -------------------------------------------------------------------------------------------
def _other_format(data: bytes) -> str:
    """A hint when the bytes are another framework's model file."""
    if data[4:8] == b"TFL3":
        return " (it is a TFLite model: use 'pegasus import tflite')"
    if data[:8] == b"\x89HDF\r\n\x1a\n":
        return " (it is an HDF5 file, e.g. a Keras .h5 model: use 'pegasus import keras')"
    if data[:4] == b"PK\x03\x04":
        return " (it is a zip file, e.g. a .keras model: use 'pegasus import keras')"
    # an ONNX ModelProto starts with its ir_version (field 1, a varint: 0x08), then names its producer; a GraphDef
    # or MetaGraphDef starts with a message field (0x0a)
    if data[:1] == b"\x08" and any(tag in data[:256].lower() for tag in (b"onnx", b"pytorch", b"tf2onnx", b"keras")):
        return " (it looks like an ONNX model: use 'pegasus import onnx')"
    return ""


def _parse(message_class, data: bytes, path: Path, what: str):
    api = tensorflow()
    message = message_class()
    text = path.suffix == ".pbtxt"
    try:
        if text:
            api.text_format.Parse(data.decode(), message)
        else:
            message.ParseFromString(data)
    except (api.DecodeError, api.text_format.ParseError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PegasusError(f"not a TensorFlow {what}{_other_format(data)}: {detail}", where=str(path)) from None
    return message


def _check_graph(graph_def, path: Path, what: str, data: bytes) -> None:
    """A protobuf parse succeeds on many byte strings; a real graph has named nodes with op types."""
    if not graph_def.node or any(not node.name or not node.op for node in graph_def.node):
        detail = "it has no nodes" if not graph_def.node else "a node has no name or op"
        raise PegasusError(f"not a TensorFlow {what}{_other_format(data)}: {detail}", where=str(path))


def read_tensorflow(path: str | Path, signature: str | None = None) -> TfModel:
    """Read a frozen graph file, a SavedModel folder (or its saved_model.pb) or a TF1 ``.meta`` file."""
    with in_file(str(path)):
        return _read(Path(path), signature)


@contextlib.contextmanager
def in_file(where: str | None) -> Iterator[None]:
    """A plain error raised inside (a node's problem: its op, its attribute) names the model file too, unless
    it names it (or a file in its folder) already."""
    try:
        yield
    except PegasusError as exc:
        if exc.where is None and type(exc) is PegasusError and where and where not in exc.message:
            raise PegasusError(exc.message, where=where) from None
        raise


def _read(path: Path, signature: str | None) -> TfModel:
    if path.is_dir() or path.name in ("saved_model.pb", "saved_model.pbtxt"):
        return _read_saved_model(path if path.is_dir() else path.parent, signature)
    path = require_file(path, "TensorFlow model")
    data = path.read_bytes()
    if not data:
        raise PegasusError("not a TensorFlow model: the file is empty", where=str(path))
    if _other_format(data):
        raise PegasusError(f"not a TensorFlow model{_other_format(data)}", where=str(path))
    api = tensorflow()
    if path.suffix == ".meta":
        meta = _parse(api.MetaGraphDef, data, path, "MetaGraphDef")
        _check_graph(meta.graph_def, path, "MetaGraphDef", data)
        return _from_meta_graph(meta, path.stem, "MetaGraph", path.with_suffix(""), signature, path)
    graph_def = _parse(api.GraphDef, data, path, "GraphDef (frozen .pb)")
    _check_graph(graph_def, path, "GraphDef (frozen .pb)", data)
    reader = GraphReader(api, graph_def.library, str(path))
    reader.read_graph(graph_def)
    return TfModel(path.stem, "frozen graph", reader)


def _read_saved_model(folder: Path, signature: str | None) -> TfModel:
    api = tensorflow()
    files = [folder / "saved_model.pb", folder / "saved_model.pbtxt"]
    found = next((f for f in files if f.is_file()), None)
    if found is None:
        raise PegasusError("not a SavedModel folder: it has no saved_model.pb", where=str(folder))
    data = read_model_input(found, "SavedModel file")
    saved = _parse(api.SavedModel, data, found, "SavedModel")
    if not saved.meta_graphs:
        raise PegasusError(f"not a TensorFlow SavedModel{_other_format(data)}: it has no MetaGraphDef",
                           where=str(found))
    serving = [m for m in saved.meta_graphs if "serve" in m.meta_info_def.tags]
    if not serving and len(saved.meta_graphs) > 1:
        tags = "; ".join(",".join(m.meta_info_def.tags) or "(none)" for m in saved.meta_graphs)
        raise PegasusError(f"no MetaGraphDef is tagged 'serve' (tag sets: {tags})", where=str(found))
    meta = (serving or list(saved.meta_graphs))[0]
    _check_graph(meta.graph_def, found, "SavedModel", data)
    return _from_meta_graph(meta, folder.name, "SavedModel", folder / "variables" / "variables", signature, folder)


def _from_meta_graph(meta, name: str, kind: str, checkpoint: Path, signature: str | None, where: Path) -> TfModel:
    api = tensorflow()
    reader = GraphReader(api, meta.graph_def.library, str(where))
    read = reader.read_graph(meta.graph_def)
    model = TfModel(name, kind, reader, restore_op=graph_ref(meta.saver_def.restore_op_name))
    _signature(model, meta, signature, where)
    if any(n.op_type in VARIABLE_OPS for n in read.nodes):
        model.checkpoint = _checkpoint(api, checkpoint, where, kind == "SavedModel")
    return model


def _signature(model: TfModel, meta, wanted: str | None, where: Path) -> None:
    signatures = {key: value for key, value in meta.signature_def.items() if key not in _SKIP_SIGNATURES}
    if wanted is None:
        if not signatures:
            return
        wanted = "serving_default" if "serving_default" in signatures or len(signatures) != 1 else next(
            iter(signatures))
    if wanted not in signatures:
        known = ", ".join(sorted(signatures)) or "none"
        raise PegasusError(f"--signature {wanted}: the model has no such signature (its signatures: {known})",
                           where=str(where))
    chosen = signatures[wanted]
    for infos, target in ((chosen.inputs, model.inputs), (chosen.outputs, model.outputs)):
        for key in sorted(infos):
            info = infos[key]
            if info.WhichOneof("encoding") != "name":
                raise PegasusError(f"signature {wanted}: '{key}' is a composite tensor "
                                   f"({info.WhichOneof('encoding')}), which pegasus cannot import", where=str(where))
            target.append((key, graph_ref(info.name)))


# ---- variables -----------------------------------------------------------------------------------------
def _checkpoint(api, prefix: Path, where: Path, inside: bool) -> Checkpoint:
    """The checkpoint at ``prefix``; ``inside``: a SavedModel's, whose variables folder may not be a link."""
    if not Path(f"{prefix}.index").exists() and not Path(f"{prefix}.index").is_symlink():
        raise PegasusError(f"the graph has variables but their checkpoint {prefix}.index is missing", where=str(where))
    if inside and prefix.parent.is_symlink():
        raise PegasusError(f"the checkpoint folder {prefix.parent} is a symbolic link; pegasus reads checkpoints "
                           "only from the model's own folder", where=str(where))
    return Checkpoint(api, prefix)


def _variable_keys(read: ReadGraph, checkpoint: Checkpoint) -> dict[str, str]:
    """Variable tensor -> checkpoint key, from the restore ops' assignments, else the variable's own name."""
    producer = read.producer

    def source(tensor: str) -> str:
        seen = set()        # pass-through nodes reading each other in a cycle (a damaged graph) end the walk
        while tensor in producer and producer[tensor].op_type in _PASS_THROUGH and tensor not in seen:
            seen.add(tensor)
            tensor = producer[tensor].inputs[0]
        return tensor

    keys: dict[str, str] = {}
    stored = checkpoint.keys()
    for node in read.nodes:
        if node.op_type not in ("Assign", "AssignVariableOp") or len(node.inputs) < 2:
            continue
        value = source(node.inputs[1])
        restore = producer.get(value)
        if restore is None or restore.op_type not in ("RestoreV2", "Restore", "RestoreSlice"):
            continue
        names = read.constants.get(restore.inputs[1]) if len(restore.inputs) > 1 else None
        if names is None:
            continue
        names = np.asarray(names).reshape(-1)
        index = restore.outputs.index(value) if restore.op_type == "RestoreV2" else 0
        if index < names.size:
            key = names[index]
            keys[source(node.inputs[0])] = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    keys = {tensor: key for tensor, key in keys.items() if key in stored}
    for variable in (n for n in read.nodes if n.op_type in VARIABLE_OPS):
        tensor = variable.outputs[0]
        if tensor in keys:
            continue
        candidates = [variable.name, str(variable.attrs.get("shared_name") or "")]
        candidates += [f"{c}/.ATTRIBUTES/VARIABLE_VALUE" for c in candidates if c]
        found = next((c for c in candidates if c in stored), None)
        if found:
            keys[tensor] = found
    return keys
