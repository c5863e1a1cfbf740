"""Turns a Keras model config into the shared mechanism's ``SourceNode``s: one per layer call.

- Functional models: each layer lists its calls (``inbound_nodes``); a call's inputs are references
  (layer, node index, tensor index) to earlier calls' outputs. Keras 2 writes a call as a list of
  ``[layer, node, tensor, kwargs]``; Keras 3 as ``{"args", "kwargs"}`` holding ``__keras_tensor__``
  dicts with a ``keras_history``. Node indices count a nested model's own construction node where Keras
  did: Keras 2 in every reference to a nested Functional (or a Sequential built on an InputLayer),
  Keras 3 only in a model's ``input_layers``/``output_layers`` and only for a nested Functional.
- Sequential models chain their layers.
- Nested models (a Model or Sequential used as a layer, e.g. a MobileNet backbone) are inlined: their
  inputs are the caller's tensors, their layers are named ``<call>/<layer>`` (``backbone/conv1``) and
  their outputs take the caller's names, so a nested model costs no extra layer.
- Shared layers (one layer called on several inputs) become one node per call; they share weights.

Names: a call's first output tensor is the layer's name (``conv2d_3``); a shared layer's later calls
and extra outputs (an LSTM's states) are ``<layer>_1``, ``<layer>_2``... skipping names that other layers
of the model own. The node is named after its first output, so ``.quantize`` entries and dumps use the
names the user gave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pegasus.errors import PegasusError
from pegasus.importers.common.converters import SourceNode
from pegasus.importers.keras.reader import (
    KerasFile,
    LayerPath,
    is_model,
    is_operation,
    layer_name,
    model_layers,
    wrapped_model,
)

Ref = tuple[str, int, int]   # (layer, call, output index)

#: a layer reference's tensor index above this is refused (each index up to it gets a tensor name)
MAX_TENSOR_INDEX = 4096


@dataclass
class KerasNode(SourceNode):
    """A layer call. ``attrs`` is the layer's Keras config; ``weights`` its arrays in ``layer.weights``
    order; ``layer`` the layer's path (its calls share it, and the constants made from its weights)."""

    weights: list[np.ndarray] = field(default_factory=list)
    layer: str = ""
    #: keyword arguments the call passes tensors to (a mask, initial states): refused by the loader
    tensor_keywords: list[str] = field(default_factory=list)


@dataclass
class KerasInput:
    name: str
    shape: tuple[int | None, ...]
    dtype: str


@dataclass
class KerasGraph:
    inputs: list[KerasInput]
    outputs: list[str]
    nodes: list[KerasNode]
    #: every layer of the model, including those a wrapper (TimeDistributed, Bidirectional) holds, as
    #: (where, config): what the Lambda/custom-object check and the supported-class check look at
    layers: list[tuple[str, dict[str, Any]]]


@dataclass
class _Call:
    """One call as the config writes it: its tensor inputs, the keywords given tensors, and (Keras 3) the
    positional arguments with each tensor replaced by ``{"input": k}`` (a keras.ops call's constants)."""

    refs: list[list]
    keywords: list[str]
    args: list | None = None
    #: Keras 2's TFOpLambda: every argument by its name (TensorFlow's own), tensors as ``{"input": k}``
    kwargs: dict | None = None
    #: the call's keyword arguments that are not tensors (``use_causal_mask=True``), for the converter
    options: dict = field(default_factory=dict)


def domain(layer: dict) -> str:
    """'ops' for a Keras 3 operation (``x + 3.0``, ``keras.ops.relu``) recorded in a functional model: its
    module is keras.src.ops.*, or, in a legacy .h5 config without modules, its config has neither the
    ``trainable`` flag nor the dtype a layer's has. 'tf' for Keras 2's TFOpLambda and SlicingOpLambda (a
    TensorFlow function called on a Keras tensor, ``x + 3.0``, ``x[:, 0]`` in tf.keras)."""
    if layer.get("class_name") in ("TFOpLambda", "SlicingOpLambda"):
        return "tf"
    return "ops" if is_operation(layer) else ""


def op_type(layer: dict) -> str:
    """The converter key: the class name, or the TensorFlow function a TFOpLambda calls (``math.multiply``)."""
    if domain(layer) == "tf":
        return str(layer.get("config", {}).get("function", "TFOpLambda"))
    return str(layer.get("class_name"))


def flatten(file: KerasFile) -> KerasGraph:
    if not is_model(file.config):
        raise PegasusError(f"the file holds a {file.config.get('class_name')} object, not a Functional or "
                           "Sequential model", where=str(file.path))
    flat = _Flattener(file)
    outputs = flat.model(file.config, "", (), None, None)
    return KerasGraph(flat.inputs, outputs, flat.nodes, flat.layers)


#: layer class -> the keyword arguments of its call that are further inputs, in the order the converter
#: reads them after the positional ones (Keras 2 passes MultiHeadAttention's value as ``value=``)
KEYWORD_INPUTS = {"MultiHeadAttention": ("value", "key")}


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and value.get("class_name") == "__keras_tensor__"


def _tensors_in(value: Any) -> list[list]:
    """The keras_history of every Keras 3 tensor in ``value`` (nested lists/dicts), in order."""
    if _is_tensor(value):
        return [value["config"]["keras_history"]]
    if isinstance(value, dict):
        return [h for item in value.values() for h in _tensors_in(item)]
    if isinstance(value, (list, tuple)):
        return [h for item in value for h in _tensors_in(item)]
    return []


def _template(value: Any, counter: list[int]) -> Any:
    """``value`` with each Keras 3 tensor replaced by ``{"input": k}``, k counting in order."""
    if _is_tensor(value):
        counter[0] += 1
        return {"input": counter[0] - 1}
    if isinstance(value, (list, tuple)):
        return [_template(item, counter) for item in value]
    if isinstance(value, dict):
        return {k: _template(v, counter) for k, v in value.items()}
    return value


def _io_refs(value: Any) -> list[list]:
    """A model's input_layers/output_layers: one [layer, node, tensor] or a (nested) list/dict of them."""
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str) and isinstance(value[1], int):
        return [value]
    if isinstance(value, dict):
        return [r for item in value.values() for r in _io_refs(item)]
    if isinstance(value, list):
        return [r for item in value for r in _io_refs(item)]
    raise PegasusError(f"cannot read the model's input/output list {value!r}")


class _Flattener:
    def __init__(self, file: KerasFile):
        self.file = file
        self.keras3 = file.major >= 3
        self.nodes: list[KerasNode] = []
        self.inputs: list[KerasInput] = []
        self.layers: list[tuple[str, dict[str, Any]]] = []
        self.used: set[str] = set()

    # ---- helpers ---------------------------------------------------------------------------------
    def model(self, config: dict, prefix: str, path: LayerPath, feeds: list[str] | None,
              out_names: list[str] | None) -> list[str]:
        if config.get("class_name") == "Sequential":
            return self.sequential(config, prefix, path, feeds, out_names)
        return self.functional(config, prefix, path, feeds, out_names)

    def add_input(self, layer: dict, name: str, fallback: dict | None = None) -> str:
        cfg = layer.get("config", {})
        shape = cfg.get("batch_shape") or cfg.get("batch_input_shape")
        if shape is None and fallback is not None:
            shape = fallback.get("batch_input_shape") or fallback.get("batch_shape")
        if shape is None:
            raise PegasusError(f"input '{name}' has no shape in the model config")
        dtype = cfg.get("dtype") or (fallback or {}).get("dtype") or "float32"
        if isinstance(dtype, dict):   # a Keras 3 dtype policy
            dtype = dtype.get("config", {}).get("name", "float32")
        self.inputs.append(KerasInput(name, tuple(shape), str(dtype)))
        self.used.add(name)
        return name

    def fresh(self, base: str, reserved: set[str]) -> str:
        """``base`` if free, else ``base_1``, ``base_2``... not owned by another layer of the model."""
        name, i = base, 0
        while name in self.used or (i and name in reserved):
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def layer_node(self, layer: dict, path: LayerPath, call: int, inputs: list[str], outputs: list[str],
                   info: _Call | None, node_name: str) -> None:
        full = "/".join(path + (layer_name(layer),))
        where = "" if node_name == full and not call else f"Keras layer '{full}'" + (f", call {call + 1}"
                                                                                      if call else "")
        attrs = dict(layer.get("config", {}))
        if domain(layer) and info is not None and info.args is not None:
            attrs["args"] = info.args
        if domain(layer) and info is not None and info.kwargs is not None:
            attrs["kwargs"] = info.kwargs
        if info is not None and info.options:
            attrs["call_options"] = info.options
        node = KerasNode(node_name, op_type(layer), list(inputs), list(outputs), attrs,
                         domain=domain(layer), where=where,
                         weights=self.file.weights.get(path + (layer_name(layer),), []), layer=full,
                         tensor_keywords=info.keywords if info else [])
        self.nodes.append(node)

    def note_layer(self, layer: dict, path: LayerPath) -> None:
        """Record ``layer`` (and any layer a wrapper holds) for the checks before conversion."""
        where = "/".join(path + (layer_name(layer),))
        self.layers.append((where, layer))
        cfg = layer.get("config", {})
        for key in ("layer", "backward_layer"):
            inner = cfg.get(key) if isinstance(cfg, dict) else None
            if isinstance(inner, dict) and "class_name" in inner:
                self.note_layer({**inner, "name": layer_name(inner)}, path + (layer_name(layer),))

    def call(self, layer: dict, node_name: str, path: LayerPath, call: int, inputs: list[str],
             names: list[str], info: _Call | None = None) -> list[str]:
        """Emit one call of ``layer`` on ``inputs`` as layer ``node_name`` writing ``names`` (its own name, or the
        caller's for a nested model's output); a nested model is inlined under ``<node_name>/``."""
        if is_model(layer):
            self.layers.append(("/".join(path + (layer_name(layer),)), layer))
            return self.model(layer, node_name + "/", path + (layer_name(layer),), inputs, names)
        inner = wrapped_model(layer)
        if inner is not None:
            return self.time_distributed_model(layer, inner, node_name, path, inputs, names)
        self.note_layer(layer, path)
        self.layer_node(layer, path, call, inputs, names, info, node_name)
        return names

    def time_distributed_model(self, layer: dict, inner: dict, node_name: str, path: LayerPath, inputs: list[str],
                               names: list[str]) -> list[str]:
        """A TimeDistributed over a model: batch and time merged into one axis (``TimeDistributedMerge``), the
        model inlined under ``<node_name>/`` on that, and the axes split again (``TimeDistributedSplit``, which
        reads the wrapper's input for the sizes), each node taking the wrapper's name and path."""
        full = "/".join(path + (layer_name(layer),))
        self.layers.append((full, layer))
        self.layers.append((full + "/" + layer_name(inner), inner))
        if len(inputs) != 1:
            raise PegasusError(f"TimeDistributed layer '{full}' is called on {len(inputs)} tensors")
        merged = self.fresh(f"{node_name}/merge", set())
        self.nodes.append(KerasNode(merged, "TimeDistributedMerge", list(inputs), [merged], {}, layer=full,
                                    where=f"Keras layer '{full}'"))
        stepped = self.model(inner, node_name + "/", path + (layer_name(layer),), [merged], None)
        if len(stepped) != 1:
            raise PegasusError(f"TimeDistributed layer '{full}' wraps a model with {len(stepped)} outputs")
        self.nodes.append(KerasNode(node_name, "TimeDistributedSplit", [stepped[0], inputs[0]], list(names[:1]), {},
                                    layer=full, where=f"Keras layer '{full}'"))
        return names[:1]

    def alias(self, source: str, name: str, path: LayerPath) -> str:
        """An Identity writing ``name`` (a nested model output that is its input, or an output listed twice)."""
        self.nodes.append(KerasNode(name, "Identity", [source], [name], {}, where="/".join(path), layer=name))
        return name

    # ---- Sequential -------------------------------------------------------------------------------
    def sequential(self, config: dict, prefix: str, path: LayerPath, feeds: list[str] | None,
                   out_names: list[str] | None) -> list[str]:
        layers = model_layers(config)
        head = layers[0] if layers and layers[0].get("class_name") == "InputLayer" else None
        body = layers[1:] if head else layers
        if feeds is not None:
            if len(feeds) != 1:
                raise PegasusError(f"Sequential model '{'/'.join(path)}' is called on {len(feeds)} tensors")
            current = feeds[0]
        elif head is not None:
            current = self.add_input(head, layer_name(head))
        elif body:
            current = self.add_input({}, f"{layer_name(body[0])}_input", fallback=body[0].get("config", {}))
        else:
            raise PegasusError("the Sequential model has no layers")
        reserved = {prefix + layer_name(layer) for layer in body}
        for i, layer in enumerate(body):
            last = i == len(body) - 1
            own = self.fresh(prefix + layer_name(layer), reserved)
            name = out_names[0] if last and out_names else own
            current = self.call(layer, own, path, 0, [current], [name])[0]
        if out_names and current != out_names[0]:
            current = self.alias(current, out_names[0], path)
        return [current]

    # ---- Functional -------------------------------------------------------------------------------
    def functional(self, config: dict, prefix: str, path: LayerPath, feeds: list[str] | None,
                   out_names: list[str] | None) -> list[str]:
        conf = config.get("config", {})
        layers = model_layers(config)
        by_name = {layer_name(layer): layer for layer in layers}
        where = f" of nested model '{'/'.join(path)}'" if path else ""

        def resolve(ref: list, io: bool) -> Ref:
            if not (isinstance(ref, (list, tuple)) and len(ref) >= 3 and
                    all(isinstance(v, int) and not isinstance(v, bool) for v in ref[1:3])):
                raise PegasusError(f"the model config{where} has a malformed layer reference {str(ref)[:80]}")
            name, node, tensor = str(ref[0]), int(ref[1]), int(ref[2])
            if name not in by_name:
                raise PegasusError(f"the model config{where} refers to layer '{name}', which it does not define")
            layer = by_name[name]
            return name, node - self._node_offset(layer, io), tensor

        inputs = [resolve(r, True) for r in _io_refs(conf.get("input_layers", []))]
        outputs = [resolve(r, True) for r in _io_refs(conf.get("output_layers", []))]
        tensors: dict[Ref, str] = {}
        if feeds is not None and len(feeds) != len(inputs):
            raise PegasusError(f"nested model '{'/'.join(path)}' takes {len(inputs)} inputs, is called on {len(feeds)}")
        for k, ref in enumerate(inputs):
            layer = by_name[ref[0]]
            tensors[ref] = feeds[k] if feeds is not None else self.add_input(layer, prefix + ref[0])
        wanted: dict[Ref, str] = {}
        for k, ref in enumerate(outputs):
            if out_names and ref not in wanted and ref not in tensors:
                wanted[ref] = out_names[k]

        calls: list[tuple[dict, int, list[Ref]]] = []
        infos: dict[tuple[str, int], _Call] = {}
        count: dict[tuple[str, int], int] = {}
        for layer in layers:
            if layer.get("class_name") == "InputLayer":
                continue
            for c, data in enumerate(layer.get("inbound_nodes", [])):
                info = infos[(layer_name(layer), c)] = self._call_refs(data, layer, path)
                refs = [resolve(r, False) for r in info.refs]
                calls.append((layer, c, refs))
                count.setdefault((layer_name(layer), c), 1)
                if is_model(layer):
                    count[(layer_name(layer), c)] = len(_io_refs(layer["config"].get("output_layers", [])))
        for ref in [r for _, _, refs in calls for r in refs] + outputs:
            key = (ref[0], ref[1])
            if not 0 <= ref[2] < MAX_TENSOR_INDEX:
                raise PegasusError(f"the model config{where} refers to output {ref[2]} of layer '{ref[0]}' (a layer "
                                   f"has at most {MAX_TENSOR_INDEX} outputs here)")
            count[key] = max(count.get(key, 1), ref[2] + 1)

        reserved = {prefix + name for name in by_name}
        own: dict[tuple[str, int], list[str]] = {}   # the call's own names (its layer's, its tensors')
        names: dict[tuple[str, int], list[str]] = {}
        for layer, c, _ in calls:   # named in call order, so names do not depend on the emission order
            lname = layer_name(layer)
            own[(lname, c)] = [self.fresh(prefix + lname, reserved) for _ in range(count[(lname, c)])]
            names[(lname, c)] = [wanted.get((lname, c, t)) or own[(lname, c)][t] for t in range(count[(lname, c)])]
        pending = calls
        while pending:
            waiting = []
            for layer, c, refs in pending:
                if all(r in tensors for r in refs):
                    lname = layer_name(layer)
                    written = self.call(layer, own[(lname, c)][0], path, c, [tensors[r] for r in refs],
                                        names[(lname, c)], infos[(lname, c)])
                    for t, name in enumerate(written):
                        tensors[(lname, c, t)] = name
                else:
                    waiting.append((layer, c, refs))
            if len(waiting) == len(pending):
                layer, c, refs = waiting[0]
                missing = next(r for r in refs if r not in tensors)
                raise PegasusError(f"layer '{layer_name(layer)}'{where} reads output {missing[2]} of call "
                                   f"{missing[1]} of layer '{missing[0]}', which the model never makes")
            pending = waiting

        result = []
        for k, ref in enumerate(outputs):
            if ref not in tensors:
                raise PegasusError(f"the model's output {list(ref)}{where} is never computed")
            name = tensors[ref]
            if out_names and name != out_names[k]:
                name = self.alias(name, out_names[k], path)
            result.append(name)
        return result

    def _node_offset(self, layer: dict, io: bool) -> int:
        """How many construction nodes of a nested model the file's node indices count (see the docstring)."""
        if not is_model(layer):
            return 0
        if self.keras3:
            return 1 if io and layer.get("class_name") == "Functional" else 0
        if layer.get("class_name") == "Sequential":
            first = model_layers(layer)[:1]
            return 1 if first and first[0].get("class_name") == "InputLayer" else 0
        return 1

    def _call_refs(self, data: Any, layer: dict, path: LayerPath) -> _Call:
        """One call's inputs (either format), the keywords it gives tensors and its argument template."""
        inputs = KEYWORD_INPUTS.get(str(layer.get("class_name")), ())
        if isinstance(data, dict):
            kwargs = data.get("kwargs") or {}
            keywords = [k for k, v in kwargs.items() if _tensors_in(v) and k not in inputs]
            args = data.get("args", [])
            extra = [h for k in inputs if k in kwargs for h in _tensors_in(kwargs[k])]
            options = {k: v for k, v in kwargs.items() if not _tensors_in(v)}
            return _Call(_tensors_in(args) + extra, keywords, _template(args, [0]), options=options)
        if data and isinstance(data[0], str):   # a TFOpLambda's call: [first argument, kwargs]
            return _tf_op_call(data)
        refs, keywords, named, options = [], [], None, {}
        for item in data:
            if not (isinstance(item, list) and len(item) >= 3 and isinstance(item[0], str)):
                full = "/".join(path + (layer_name(layer),))
                raise PegasusError(f"cannot read a call of layer '{full}' in the model config: {item!r}")
            kwargs = item[3] if len(item) > 3 and isinstance(item[3], dict) else {}
            keywords += [k for k, v in kwargs.items() if _is_ref(v) and k not in inputs]
            refs.append(item[:3])
            refs += [kwargs[k][:3] for k in inputs if _is_ref(kwargs.get(k))]
            options.update({k: v for k, v in kwargs.items() if not _is_ref(v)})
            if domain(layer) == "tf":   # a TensorFlow function of a list of tensors (tf.concat): its keywords
                named = {k: v for k, v in kwargs.items() if k != "name"}
        return _Call(refs, keywords, None, named, options)


def _is_ref(value: Any) -> bool:
    """A Keras 2 tensor reference [layer, node, tensor] in a call's keyword arguments."""
    return isinstance(value, list) and len(value) >= 3 and isinstance(value[0], str) and isinstance(value[1], int)


def _tf_op_call(data: list) -> _Call:
    """Keras 2 writes a TFOpLambda call as [layer, node, tensor, kwargs] (or ["_CONSTANT_VALUE", -1, value,
    kwargs] when the first argument is a number): the positional template is the first argument then the
    keyword arguments but ``name``, each tensor becoming ``{"input": k}``; ``kwargs`` keeps the keyword
    arguments by name (Keras 2 records a positional argument under its name too: ``reduce_sum(x, -1)`` is
    ``{"axis": -1}``)."""
    kwargs = data[3] if len(data) > 3 and isinstance(data[3], dict) else {}
    refs: list[list] = []

    def slot(value: Any) -> Any:
        if _is_ref(value) and value[0] != "_CONSTANT_VALUE":
            refs.append(list(value[:3]))
            return {"input": len(refs) - 1}
        return value[2] if _is_ref(value) else value

    args = [slot(list(data[:3]))]
    named = {k: slot(v) for k, v in kwargs.items() if k != "name"}
    return _Call(refs, [], args + list(named.values()), named)
