"""Import a TensorFlow model (frozen graph, SavedModel, TF1 MetaGraph + checkpoint) into the pegasus IR.

Steps: read the model as data (reader.py); settle its inputs and outputs (``--inputs``/``--outputs`` as tensor
or signature names, else the SavedModel signature's; ``--subgraphs`` as the union of its cuts); inline the
function calls the outputs need; take the nodes the outputs depend on, not looking past the inputs, the
``--predef-file`` values and the constants (Consts and checkpoint variables), in dependency order; list every
unsupported op of them in one error, and every placeholder they need that is neither an input nor predefined;
fix each input's static shape (an unknown batch is 1, with a note; other unknown dimensions need
``--input-size-list``); then convert node by node through the converter table, constants folding as they go,
nodes on the dead side of a resolved Switch skipped (control_flow.py: those known before conversion are not
even checked, so a training branch may hold any op); and run the import passes.

Names: tensors are named after their nodes (output k > 0 of node ``n`` is ``n:k``); a SavedModel imported
through its signature names its inputs and outputs by the signature's keys (``img``, ``output_0``). The graph
keeps TensorFlow's channels-last shapes (see pegasus/ops/layout.py).

``--mean-values``/``--std-values`` (Acuity: for quantized TensorFlow models) follow TOCO, where they come from:
the input holds values in the quantized domain and the real input is (x - mean) / std, which the imported
graph computes first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode, convert_node
from pegasus.importers.tensorflow import ops as _ops  # noqa: F401  (registers the converters)
from pegasus.importers.tensorflow.context import TABLE, TfContext
from pegasus.importers.tensorflow.control_flow import Deadness, known_values
from pegasus.importers.tensorflow.predef import load_predef  # noqa: F401  (the CLI and tests find it here)
from pegasus.importers.tensorflow.reader import TfModel, in_file, read_tensorflow
from pegasus.ir.builder import GraphBuilder
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph
from pegasus.ir.tensor import TensorType
from pegasus.passes.pipeline import run_import_passes

DEFAULT_BATCH = 1
_PLACEHOLDERS = ("Placeholder", "PlaceholderV2")


# ---- the model's interface ---------------------------------------------------------------------------
def parse_subgraphs(text: str) -> list[tuple[list[str], list[str]]]:
    """'in1,in2#out1,out2;in3#out3' -> [(inputs, outputs), ...] (Acuity's --subgraphs syntax)."""
    subgraphs = []
    for part in (p.strip() for p in text.split(";") if p.strip()):
        ins, sep, outs = part.partition("#")
        names = ([n.strip() for n in ins.split(",") if n.strip()], [n.strip() for n in outs.split(",") if n.strip()])
        if not sep or not names[1]:
            raise PegasusError(f"--subgraphs: '{part}' is not 'input,...#output,...'")
        subgraphs.append(names)
    if not subgraphs:
        raise PegasusError("--subgraphs is empty")
    return subgraphs


def _tensor(model: TfModel, text: str, flag: str, keys: dict[str, str]) -> str:
    """The tensor a user's name means: a signature key, 'node', 'node:0' or 'node:k'."""
    if text in keys:
        return keys[text]
    node, _, index = text.partition(":")
    tensor = node if index in ("", "0") else f"{node}:{index}" if index.isdigit() else text
    if model.producer(tensor) is None and not model.is_constant(tensor):
        known = f" (its signature: {', '.join(keys)})" if keys else ""
        what = "a node" if model.producer(node) is None else f"an output of node '{node}'"
        raise PegasusError(f"{flag}: '{text}' is not {what} of the model{known}")
    return tensor


def _placeholders(model: TfModel) -> list[str]:
    return [n.name for n in model.nodes if n.op_type in _PLACEHOLDERS and not n.where][:20]


def interface(model: TfModel, inputs: Sequence[str] | None, outputs: Sequence[str] | None,
              subgraphs: Sequence[tuple[list[str], list[str]]] | None = None
              ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(graph name, tensor) of each input and output: as given (names, or the union of the subgraphs' cuts),
    else the signature's."""
    if subgraphs:
        outs = list(dict.fromkeys(n for _, o in subgraphs for n in o))
        ins = list(dict.fromkeys(n for i, _ in subgraphs for n in i if n not in outs))
        for given, derived, flag in ((inputs, ins, "--inputs"), (outputs, outs, "--outputs")):
            if given and set(given) != set(derived):
                raise PegasusError(f"{flag} ({' '.join(given)}) differs from what --subgraphs gives "
                                   f"({' '.join(derived)})")
        inputs, outputs = inputs or ins, outputs or outs
    in_keys, out_keys = dict(model.inputs), dict(model.outputs)
    if not inputs and not model.inputs:
        raise PegasusError(f"--inputs is required for a {model.kind} (its placeholders: "
                           f"{' '.join(_placeholders(model)) or 'none'})")
    if not outputs and not model.outputs:
        raise PegasusError(f"--outputs is required for a {model.kind}")
    resolved = []
    for given, declared, keys, flag in ((inputs, model.inputs, in_keys, "--inputs"),
                                        (outputs, model.outputs, out_keys, "--outputs")):
        names = list(given) if given else [key for key, _ in declared]
        pairs = [(name, _tensor(model, name, flag, keys)) for name in names]
        # a signature key names the graph's tensor unless the model has a node called so
        resolved.append([(name if name in keys and model.producer(name) is None else tensor, tensor)
                         for name, tensor in pairs])
    return resolved[0], resolved[1]


def declared_batches(model: TfModel, inputs: Sequence[tuple[str, str]]) -> list[int | None]:
    """The fixed batch size each input declares (None when unknown)."""
    batches = []
    for _, tensor in inputs:
        dims = _declared_shape(model, tensor)
        batches.append(dims[0] if dims else None)
    return batches


def _declared_shape(model: TfModel, tensor: str) -> list[int | None] | None:
    node = model.producer(tensor)
    if node is not None and node.op_type in (*_PLACEHOLDERS, "PlaceholderWithDefault") and "shape" in node.attrs:
        return node.attrs["shape"]
    return model.shapes.get(tensor)


def _input_type(model: TfModel, name: str, tensor: str, given: Sequence[int] | None,
                note: Callable[[str], None] | None) -> TensorType:
    dtype = model.dtypes.get(tensor)
    try:
        dtype = DType(dtype)
    except ValueError:
        raise PegasusError(f"input '{name}' has type {dtype or 'unknown'}, which pegasus cannot take") from None
    if given is not None:
        return TensorType(tuple(int(d) for d in given), dtype)
    dims = _declared_shape(model, tensor)
    if dims is None:
        raise PegasusError(f"input '{name}' has no declared shape: give it with --input-size-list")
    if not isinstance(dims, (list, tuple)) or any(d is not None and type(d) is not int for d in dims):
        raise PegasusError(f"input '{name}' declares shape {str(dims)[:80]!r}, which is not a list of dimensions")
    dims = list(dims)
    for axis, dim in enumerate(dims):
        if dim is not None and dim >= 1:
            continue
        if axis != 0:
            raise PegasusError(f"input '{name}' has an unknown dimension at axis {axis} (shape "
                               f"{['?' if d is None else d for d in dims]}): give its shape with --input-size-list")
        dims[0] = DEFAULT_BATCH
        if note:
            note(f"{name}: batch = {DEFAULT_BATCH}")
    return TensorType(tuple(dims), dtype)


# ---- nodes -------------------------------------------------------------------------------------------
def needed_nodes(model: TfModel, outputs: Sequence[str], stop: set[str]) -> list[SourceNode]:
    """The nodes ``outputs`` depend on (not looking past ``stop`` and constants), each after its inputs."""
    stack, seen, needed = [t for t in outputs if t not in stop], set(), {}
    while stack:
        tensor = stack.pop()
        if tensor in seen or model.is_constant(tensor):
            continue
        seen.add(tensor)
        node = model.producer(tensor)
        if node is not None and id(node) not in needed:
            needed[id(node)] = node
            stack.extend(t for t in node.inputs if t and t not in stop)
    return _topological([node for node in model.nodes if id(node) in needed], model)   # file order where free


def _topological(nodes: list[SourceNode], model: TfModel) -> list[SourceNode]:
    index = {id(node): i for i, node in enumerate(nodes)}
    order, state = [], {}                      # state: 1 visiting, 2 done
    for root in nodes:
        if state.get(id(root)):
            continue
        stack = [(root, iter(root.inputs))]
        state[id(root)] = 1
        while stack:
            node, pending = stack[-1]
            for tensor in pending:
                source = model.producer(tensor) if tensor else None
                if source is None or id(source) not in index:
                    continue
                if state.get(id(source)) == 1:
                    raise PegasusError(f"{source.describe()} depends on itself (a while loop), which pegasus "
                                       "cannot import; cut the graph before it with --outputs/--subgraphs")
                if not state.get(id(source)):
                    state[id(source)] = 1
                    stack.append((source, iter(source.inputs)))
                    break
            else:
                stack.pop()
                state[id(node)] = 2
                order.append(node)
    return order


def _check_placeholders(nodes: Sequence[SourceNode]) -> None:
    missing = [f"'{n.name}' ({n.attrs.get('dtype', '?')})" for n in nodes if n.op_type in _PLACEHOLDERS]
    if missing:
        raise PegasusError(f"placeholder(s) {', '.join(missing)} are needed but are not among --inputs and have no "
                           "value in --predef-file")


def _convert(ctx: TfContext, nodes: Sequence[SourceNode], control: dict[str, list[str]], deadness: Deadness) -> None:
    """Convert in order (nodes known to be dead before conversion are already left out); a node reading a
    tensor that a Switch resolved during conversion leaves dead (by data or control input) is dead too, except a
    Merge, which takes its live input."""
    def dead(name: str) -> bool:
        return name in ctx.dead or deadness.dead(name)

    for node in nodes:
        if any(dead(name) for name in node.inputs if name) or any(dead(name) for name in control.get(node.name, [])):
            live = [(k, name) for k, name in enumerate(node.inputs) if not dead(name)]
            if node.op_type != "Merge" or not live:
                ctx.dead.update(node.outputs)
                continue
            node = dataclasses.replace(node, inputs=[name for _, name in live],
                                       attrs={**node.attrs, "_value_index": live[0][0]})
        convert_node(TABLE, ctx, node)


def _preprocess(builder: GraphBuilder, name: str, mean: float, std: float) -> str:
    """(x - mean) / std on input ``name``; returns the normalized tensor."""
    if not builder.type_of(name).dtype.is_float or std == 0:
        raise PegasusError(f"--mean-values/--std-values: input '{name}' is not a float tensor, or its std is 0")
    dtype = builder.type_of(name).dtype.numpy
    centered = builder.emit("Sub", [name, builder.add_constant(f"{name}/mean", np.array(mean, dtype))],
                            name=f"{name}/subtract_mean")[0]
    return builder.emit("Div", [centered, builder.add_constant(f"{name}/std", np.array(std, dtype))],
                        name=f"{name}/divide_std")[0]


def import_tensorflow(model: str | Path | TfModel, *, inputs: Sequence[str] | None = None,
                      outputs: Sequence[str] | None = None,
                      input_shapes: Sequence[Sequence[int] | None] | None = None, signature: str | None = None,
                      mean_values: Sequence[float] | None = None, std_values: Sequence[float] | None = None,
                      predef: dict[str, np.ndarray] | None = None,
                      subgraphs: Sequence[tuple[list[str], list[str]]] | None = None, name: str | None = None,
                      optimize: bool = True, note: Callable[[str], None] | None = None) -> Graph:
    """Convert a TensorFlow model to a verified pegasus Graph (see the module docstring for the options)."""
    if not isinstance(model, TfModel):
        model = read_tensorflow(model, signature)
    with in_file(model.graph.where):
        ins, outs = interface(model, inputs, outputs, subgraphs)
        if input_shapes and len(input_shapes) != len(ins):
            raise PegasusError(f"--input-size-list gives {len(input_shapes)} entries but the model has {len(ins)} "
                               f"input(s): {' '.join(n for n, _ in ins)}")
        for flag, values in (("--mean-values", mean_values), ("--std-values", std_values)):
            if values is not None and len(values) != len(ins):
                raise PegasusError(f"{flag} gives {len(values)} values for {len(ins)} input(s)")
        predef = {_tensor(model, key, "--predef-file", {}): value for key, value in (predef or {}).items()}
        clash = [name for name, tensor in ins if tensor in predef]
        if clash:
            raise PegasusError(f"--predef-file gives a value for {', '.join(repr(n) for n in clash)}, which is also an "
                               "input of the graph: leave it out of the predef file or out of --inputs")

        stop = {tensor for _, tensor in ins} | set(predef)
        value_of = known_values(model, predef, stop)
        model.expand([tensor for _, tensor in outs], stop, value_of)
        deadness = Deadness(model, value_of, stop)
        nodes = [n for n in needed_nodes(model, [tensor for _, tensor in outs], stop) if not deadness.node_dead(n)]
        TABLE.check_supported([n for n in nodes if n.op_type not in _PLACEHOLDERS])
        _check_placeholders(nodes)

        graph = Graph(name or model.name or "model")
        builder = GraphBuilder(graph)
        renamed: dict[str, str] = {}
        for index, (input_name, tensor) in enumerate(ins):
            builder.add_input(input_name, _input_type(model, input_name, tensor,
                                                      input_shapes[index] if input_shapes else None, note))
            renamed[tensor] = input_name
            if mean_values is not None or std_values is not None:
                mean = float(mean_values[index]) if mean_values is not None else 0.0
                std = float(std_values[index]) if std_values is not None else 1.0
                renamed[tensor] = _preprocess(builder, input_name, mean, std)
        for tensor, value in predef.items():
            dtype = model.dtypes.get(tensor)
            builder.set_constant(tensor, value.astype(dtype) if dtype in {d.value for d in DType} else value)
        for tensor in {t for node in nodes for t in node.inputs if t} | {t for _, t in outs}:
            value = model.value(tensor) if tensor not in stop else None
            if value is not None and value.dtype.kind not in "OSUV":
                if value.dtype.kind == "c":
                    raise PegasusError(f"constant '{tensor}' is {value.dtype.name}; pegasus takes no complex tensors")
                builder.set_constant(tensor, value)
        nodes = [dataclasses.replace(n, inputs=[renamed.get(t, t) for t in n.inputs]) if renamed.keys() & set(n.inputs)
                 else n for n in nodes]
        ctx = TfContext(builder, model.dtypes)
        _convert(ctx, nodes, model.control, deadness)

        for out_name, tensor in outs:
            tensor = renamed.get(tensor, tensor)
            if tensor in ctx.dead or deadness.dead(tensor):
                raise PegasusError(f"output '{out_name}' is on the untaken side of a tf.cond (Switch)")
            if not builder.has(tensor):
                raise PegasusError(f"output '{out_name}' was not produced by the converted graph")
            if out_name != tensor:
                builder.emit("Identity", [tensor], name=out_name, outputs=[out_name])
        graph.outputs = [out_name for out_name, _ in outs]
        return run_import_passes(graph, optimize=optimize)
