"""Import a Keras model (.h5/.hdf5/.keras) into the pegasus IR without running anything from the file.

Steps: read the config and weights as data (reader.py); turn the layer calls into nodes, nested models
inlined and shared layers called once per use (graph.py); among the layers the outputs need, refuse Lambda
layers and custom objects, all named in one error, unless ``allow_unsafe`` (even then nothing is run: a
Lambda converts only when its config maps onto registry ops), and list every unsupported layer class at once
(the shared mechanism), those a TimeDistributed or Bidirectional wraps included; fix each input's static
shape (a dynamic batch becomes 1 and says so; other dynamic dimensions need ``--input-size-list``); convert
node by node; run the import passes (a BatchNormalization after a convolution folds into it there).

``inputs``/``outputs`` cut the model at tensor names, which are layer names (graph.py). A cut input's shape
is the tensor's in the full model unless given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode, convert_nodes, needed_nodes
from pegasus.importers.keras import layers as _layers  # noqa: F401  (registers the converters)
from pegasus.importers.keras.context import TABLE, KerasContext
from pegasus.importers.keras.graph import KerasGraph, KerasNode, domain, flatten, op_type
from pegasus.importers.keras.reader import KerasFile, is_model, read_keras
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

DEFAULT_BATCH = 1
#: what reading a JSON config of the wrong shape raises (a string where a dict belongs, a name where a count does):
#: a safety net around the config walk and the converters, until the config is checked against a schema on reading
_CONFIG_ERRORS = (AttributeError, TypeError, KeyError, ValueError, IndexError)


def _malformed(exc: Exception, path: Path) -> PegasusError:
    detail = " ".join(str(exc).split())[:200]
    return PegasusError(f"the model config is malformed ({type(exc).__name__}: {detail})", where=str(path))
_KERAS_MODULES = ("keras", "tf_keras")


def unsafe_reason(layer: dict) -> str | None:
    """Why ``layer`` (a config) would need code from outside Keras to run, or None."""
    if layer.get("class_name") == "Lambda":
        return "Lambda: Python code"
    module = layer.get("module")
    if isinstance(module, str) and module.split(".")[0] not in _KERAS_MODULES:
        return f"custom class {layer.get('registered_name') or layer.get('class_name')} from module '{module}'"
    registered = layer.get("registered_name")
    if isinstance(registered, str) and ">" in registered:
        return f"custom class {registered}"
    return None


def layers_of(model: KerasGraph, nodes: Sequence[KerasNode]) -> list[tuple[str, dict]]:
    """The layer configs behind ``nodes``: their own, the nested models around them, the layers they wrap."""
    paths = {node.layer for node in nodes}
    return [(where, layer) for where, layer in model.layers
            if where in paths or any(p.startswith(where + "/") or where.startswith(p + "/") for p in paths)]


def refuse_unsafe(layers: Sequence[tuple[str, dict]], allow_unsafe: bool) -> None:
    found = [f"layer '{where}' ({reason})" for where, layer in layers if (reason := unsafe_reason(layer))]
    if found and not allow_unsafe:
        raise PegasusError(f"refusing {len(found)} layer(s) that hold code: {'; '.join(found)}. pegasus never runs "
                           "code from a model file; --allow-unsafe imports such a layer only where its config maps "
                           "onto registry ops (a Lambda naming a Keras activation), still without running it")


def check_supported(layers: Sequence[tuple[str, dict]], nodes: Sequence[KerasNode]) -> None:
    """Every layer class without a converter, those inside wrappers included, in one error; then a call that
    passes a tensor by keyword (a mask, initial states)."""
    TABLE.check_supported(SourceNode(where, op_type(layer), [], [], domain=domain(layer))
                          for where, layer in layers if not is_model(layer))
    for node in nodes:
        if not node.inputs or not all(node.inputs):
            raise PegasusError(f"{node.describe()} is called on no tensor or an unnamed one (the model config's "
                               "inbound nodes are empty or malformed)")
        if node.tensor_keywords:
            raise PegasusError(f"{node.describe()} is called with a tensor for '{node.tensor_keywords[0]}', which "
                               "the import does not support")


def _model_input_types(model: KerasGraph, note: Callable[[str], None],
                       given: dict[str, Sequence[int]]) -> dict[str, TensorType]:
    types = {}
    for spec in model.inputs:
        if spec.name in given:
            shape = tuple(int(d) for d in given[spec.name])
        else:
            shape = list(spec.shape)
            if shape and shape[0] is None:
                shape[0] = DEFAULT_BATCH
                note(f"{spec.name}: dynamic batch = {DEFAULT_BATCH}")
            if any(d is not None and (not isinstance(d, int) or isinstance(d, bool)) for d in shape):
                raise PegasusError(f"input '{spec.name}' has shape {str(list(spec.shape))[:100]}, not whole numbers")
            if any(d is None or int(d) < 1 for d in shape):
                raise PegasusError(f"input '{spec.name}' has shape {list(spec.shape)} (None = any size): give its "
                                   "shape with --input-size-list")
            shape = tuple(int(d) for d in shape)
        types[spec.name] = TensorType(shape, _dtype(spec.name, spec.dtype))
    return types


def _dtype(name: str, text: str) -> DType:
    try:
        return DType.parse(text)
    except ValueError:
        raise PegasusError(f"input '{name}' has dtype {text}, which pegasus cannot hold") from None


def _convert(model: KerasGraph, major: int, allow_unsafe: bool, input_types: dict[str, TensorType],
             outputs: Sequence[str], name: str, path: Path) -> Graph:
    """The graph from ``input_types`` to ``outputs``, once the layers it needs pass the checks; a refusal (a
    Lambda, an unsupported layer, a layer pegasus cannot convert) names the file, as the reader's errors do."""
    try:
        return _converted(model, major, allow_unsafe, input_types, outputs, name)
    except _CONFIG_ERRORS as exc:
        raise _malformed(exc, path) from None
    except PegasusError as exc:
        if exc.where is None:
            exc.where = str(path)
            exc.args = (f"{exc.where}: {exc.message}",)
        raise


def _converted(model: KerasGraph, major: int, allow_unsafe: bool, input_types: dict[str, TensorType],
               outputs: Sequence[str], name: str) -> Graph:
    nodes = needed_nodes(model.nodes, outputs, set(input_types))
    layers = layers_of(model, nodes)
    refuse_unsafe(layers, allow_unsafe)
    check_supported(layers, nodes)
    graph = Graph(name)
    builder = GraphBuilder(graph)
    for input_name, ttype in input_types.items():
        builder.add_input(input_name, ttype)
    convert_nodes(TABLE, KerasContext(builder, major, allow_unsafe), nodes)
    for out in outputs:
        if not builder.has(out):
            raise PegasusError(f"output '{out}' was not produced by the converted graph")
    graph.outputs = list(outputs)
    return graph


def import_keras(model: str | Path | KerasFile, *, inputs: Sequence[str] | None = None,
                 outputs: Sequence[str] | None = None, input_shapes: Sequence[Sequence[int] | None] | None = None,
                 name: str | None = None, optimize: bool = True, note: Callable[[str], None] | None = None,
                 allow_unsafe: bool = False) -> Graph:
    """Convert a Keras model file (or a ``KerasFile`` already read) to a verified pegasus Graph.

    ``inputs``/``outputs`` cut the graph at tensor (layer) names; ``input_shapes`` is per input, in order,
    batch included (None keeps the model's). ``note`` receives one-line remarks for the user.
    """
    if not isinstance(model, KerasFile):
        name = name or Path(model).stem
        try:
            model = read_keras(model)
        except PegasusError:
            raise
        except _CONFIG_ERRORS as exc:   # the config walked to find the weights
            raise _malformed(exc, Path(model)) from None
    notes: list[str] = []   # said once the import has succeeded, so a refusal stays one line
    try:
        keras_graph = flatten(model)
    except PegasusError as exc:
        if exc.where is None:
            exc.where = str(model.path)
            exc.args = (f"{exc.where}: {exc.message}",)
        raise
    except _CONFIG_ERRORS as exc:
        raise _malformed(exc, model.path) from None
    known = {spec.name for spec in keras_graph.inputs} | {o for node in keras_graph.nodes for o in node.outputs}
    model_inputs = [spec.name for spec in keras_graph.inputs]
    input_names = list(inputs) if inputs else model_inputs
    output_names = list(outputs) if outputs else list(keras_graph.outputs)
    for flag, wanted in (("--inputs", input_names), ("--outputs", output_names)):
        for tensor in wanted:
            if tensor not in known:
                raise PegasusError(f"{flag}: '{tensor}' is not a tensor of the model (tensors are named after "
                                   f"layers; the model's inputs: {' '.join(model_inputs)}, outputs: "
                                   f"{' '.join(keras_graph.outputs)})")
    if input_shapes and len(input_shapes) != len(input_names):
        raise PegasusError(f"--input-size-list gives {len(input_shapes)} entries but the model has "
                           f"{len(input_names)} input(s): {' '.join(input_names)}")
    dtypes = {spec.name: spec.dtype for spec in keras_graph.inputs}
    given = {n: tuple(int(d) for d in s) for n, s in zip(input_names, input_shapes or []) if s is not None}
    input_types = {n: TensorType(given[n], _dtype(n, dtypes.get(n, "float32"))) for n in given}
    missing = [n for n in input_names if n not in input_types]
    if missing:
        model_types = _model_input_types(keras_graph, notes.append, given)
        cut = [n for n in missing if n not in model_types]
        if cut:   # a cut's inputs have their shapes in the model: convert it up to them
            full = _convert(keras_graph, model.major, allow_unsafe, model_types, cut, name or "model", model.path)
            model_types.update({n: full.type_of(n) for n in cut})
        input_types.update({n: model_types[n] for n in missing})
    input_types = {n: input_types[n] for n in input_names}
    graph = run_import_passes(_convert(keras_graph, model.major, allow_unsafe, input_types, output_names,
                                       name or model.path.stem, model.path), optimize=optimize)
    for line in notes if note else ():
        note(line)
    return graph
