"""Lowers a planned graph to one LLVM module: an internal function per layer of the plan (``fuse.Layer``:
one node, or a convolution fused with its element-wise and pooling consumers), called in order by the
bundle's entry point ``int NAME(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations)``.

Each layer function takes typed pointers to its tensors (and an ``i8*`` to its planned workspace, when its
kernel has one), then an ``i8*`` to its parameter block in the weights (kernels/parameters.py: per-channel
requantisation tables; ``undef`` for a layer without one); pointers whose byte ranges overlap no other
argument are marked ``noalias`` so LLVM can vectorise freely. Layers whose functions are the same text share
one (``_shared``). A layer whose emitter would see exactly what an earlier one's saw (``_layer_key``: its ops
and attributes, its tensors' types and constant bounds, which arguments are ``noalias``, its workspace size;
its kernel reads nothing else) is not generated again: it calls that function with the same parameter block
bytes; only layers without a key are compared as text. Sizes a kernel reads at run time from the parameter block
(``registry.runtime_dims``) are left out of the key and put first in each layer's own block (DenseNet-121's 245
layers are 153 keys: its 1x1 layers of a block differ only in their input channels). The module has no globals
with mutable state and calls nothing outside itself (math functions come from ``llvm.mathlib``).
"""

from __future__ import annotations

import json
import re

import numpy as np
from llvmlite import ir

from pegasus.errors import PegasusError
from pegasus.exporters.glow.fuse import Layer, single_layers
from pegasus.exporters.glow.generated_text import bundle_name
from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.parameters import LayerParameters, dims_table
from pegasus.exporters.glow.kernels.registry import Stream, sizing_context
from pegasus.exporters.glow.kernels.strategy import Choice, Query, get_implementation, implementations_of, run_hook
from pegasus.exporters.glow.llvm.mathlib import MathLib
from pegasus.exporters.glow.llvm.tensors import TensorRef, constant_bounds
from pegasus.exporters.glow.llvm.types import llvm_type
from pegasus.exporters.glow.memory.plan import ACTIVATIONS, CODE, CONSTANT, MUTABLE, Location, MemoryPlan
from pegasus.exporters.glow.schedule.select import select_layers
from pegasus.exporters.glow.target import Target
from pegasus.ir.graph import Graph
from pegasus.ops.registry import attrs_to_dict, get_op

BYTE_PTR = ir.IntType(8).as_pointer()
REGION_ARG = {CONSTANT: 0, MUTABLE: 1, ACTIVATIONS: 2}


#: layers whose stages read the graph: never shared by key, no run-time dimensions
BLOCKS = ("RowChain", "PooledPair")


def check_emitters(graph: Graph) -> None:
    """Refuse, before any work, a graph with an op that no implementation computes (naming op and layer)."""
    missing = [f"{node.op} (layer '{node.name}')" for node in graph.nodes if not implementations_of(node.op)]
    if missing:
        raise PegasusError(f"no code generator for {len(missing)} layer(s): " + "; ".join(missing))


def _overlaps(a: Location, b: Location) -> bool:
    return a.region == b.region != CODE and a.offset < b.offset + b.size and b.offset < a.offset + a.size


def build_module(graph: Graph, plan: MemoryPlan, target: Target, name: str,
                 choices: list[Choice] | None = None) -> ir.Module:
    """The module of ``plan``'s layers, each computed by its implementation in ``choices`` (by default what the
    select stage chooses: exporters/glow/pipeline.py passes its own)."""
    check_emitters(graph)
    layers = plan.layers or single_layers(graph)
    if choices is None:
        choices = [selection.choice for selection in select_layers(graph, layers, target)]
    module = ir.Module(name=bundle_name(name))   # the module ID line and the entry symbol: an identifier only
    module.triple = target.triple
    math = MathLib(module, target)
    entry = ir.Function(module, ir.FunctionType(ir.IntType(32), [BYTE_PTR] * 3), name=name)
    for arg, arg_name in zip(entry.args, ("constantWeight", "mutableWeight", "activations")):
        arg.name = arg_name
        arg.add_attribute("noalias")
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    plan.clear_parameters()
    code_constants: dict[str, ir.GlobalVariable] = {}
    bodies: dict[str, list[ir.Function]] = {}
    made: dict[str, tuple[ir.Function, bytes]] = {}
    for index, (unit, choice) in enumerate(zip(layers, choices)):
        present = [n for n in unit.inputs + unit.outputs if n]
        workspace = plan.workspace_of(unit)
        args = []
        for tensor in present:
            loc = plan.locations[tensor]
            if loc.region == CODE:
                args.append(_code_constant(module, graph, tensor, code_constants))
                continue
            raw = builder.gep(entry.args[REGION_ARG[loc.region]], [ir.Constant(ir.IntType(32), loc.offset)],
                              inbounds=True)
            args.append(builder.bitcast(raw, llvm_type(graph.type_of(tensor).dtype).as_pointer()))
        if workspace is not None:
            args.append(builder.gep(entry.args[REGION_ARG[workspace.region]],
                                    [ir.Constant(ir.IntType(32), workspace.offset)], inbounds=True))
        dims = _runtime_dims(graph, unit, target, choice)
        key = _layer_key(graph, plan, unit, present, workspace, set(dims))
        if key not in made:
            layer = _layer_function(module, graph, plan, index, unit, present, workspace is not None)
            parameters = LayerParameters(layer.args[-1], dims)
            if _planned_alias(plan, unit):   # nothing to compute: its output already is its input's bytes
                layer.append_basic_block("entry")
                ir.IRBuilder(layer.entry_basic_block).ret_void()
            else:
                _emit_layer_body(layer, graph, unit, choice, present, math, target,
                                 workspace.size if workspace else 0, parameters,
                                 lambda function: _shared(module, function, bodies))
                # a size left out of the key but baked in would make the layers sharing the function wrong
                assert parameters.dims_read == set(dims), \
                    f"layer '{unit.nodes[0].name}': its kernel read {parameters.dims_read} of {set(dims)}"
            # a keyed function equals no earlier one (their keys differ): only the others are compared as text
            made[key or f"{index}"] = (layer if key else _shared(module, layer, bodies), bytes(parameters.data))
        function, data = made[key or f"{index}"]
        if dims:   # this layer's own sizes, then the tables the shared function's kernel laid out
            sizes = dims_table(dims)
            data = sizes + data[len(sizes):]
        if data:
            args.append(builder.gep(entry.args[REGION_ARG[CONSTANT]],
                                    [ir.Constant(ir.IntType(32), plan.add_parameters(data))], inbounds=True))
        else:
            args.append(ir.Constant(BYTE_PTR, ir.Undefined))
        builder.call(function, args)
    builder.ret(ir.Constant(ir.IntType(32), 0))
    forbid_library_calls(module)
    return module


def _runtime_dims(graph: Graph, unit: Layer, target: Target, choice: Choice) -> dict[tuple[int, int], int]:
    """(input position, axis) -> size of the dimensions the layer's kernel reads at run time from its parameter
    block (its implementation's ``runtime_dims`` hook: kernels/registry.py)."""
    head = unit.nodes[0]
    found = run_hook(choice.impl, "runtime_dims", (), sizing_context(Query(graph, unit, target), choice))
    return {(position, axis): graph.type_of(head.inputs[position]).shape[axis] for position, axis in found}


def _layer_key(graph: Graph, plan: MemoryPlan, unit: Layer, present: list[str], workspace: Location | None,
               dims: set[tuple[int, int]] = frozenset()) -> str:
    """What the layer's emitter sees, as text: equal keys make equal functions and parameter blocks but for the
    run-time dimensions ``dims`` (left out of the key: the kernel reads them from the parameter block). '' (never
    shared this way) for a row-by-row block (its stages read the graph), a layer with quantized or integer
    variable tensors (integer kernels carry their multipliers in attributes, which on most targets go to the
    layer's parameter block, so their functions are merged by text) or attributes that are not plain values.
    Whether each tensor is a constant is part of the key (a channels-last convolution runs natively only when
    its weights are)."""
    if unit.kind in BLOCKS or any(
            graph.type_of(name).quant is not None
            or not (graph.type_of(name).dtype.is_float or graph.tensors[name].is_constant) for name in present):
        return ""
    try:   # each node's op, attributes and which of its inputs and outputs are given (optional ones may not be)
        attrs = json.dumps([(node.op, attrs_to_dict(node.attrs), [bool(n) for n in node.inputs],
                             [bool(n) for n in node.outputs]) for node in unit.nodes])
    except TypeError:
        return ""
    hidden = {(unit.nodes[0].inputs[position], axis) for position, axis in dims}
    types = [(tuple(None if (name, axis) in hidden else size for axis, size in enumerate(graph.type_of(name).shape)),
              graph.type_of(name).dtype.name, graph.tensors[name].is_constant, constant_bounds(graph, name))
             for name in present]
    return repr((attrs, types, _noalias(plan, present), workspace.size if workspace else None,
                 _planned_alias(plan, unit), [name in present[:i] for i, name in enumerate(present)]))


def _noalias(plan: MemoryPlan, present: list[str]) -> list[bool]:
    """Which of a layer's tensor arguments overlap no other argument (codegen marks them ``noalias``)."""
    locations = [plan.locations[n] for n in present]
    flags = []
    for position, loc in enumerate(locations):
        others = [other for j, other in enumerate(locations) if j != position and present[j] != present[position]]
        flags.append(not any(_overlaps(loc, other) for other in others) and present.count(present[position]) == 1)
    return flags


def _shared(module: ir.Module, function: ir.Function, bodies: dict[str, list[ir.Function]]) -> ir.Function:
    """The layer function to call for ``function``: an earlier one whose IR is the same text but for its name
    (same kernel, shapes, parameter tables read through its arguments) and whose ``noalias`` arguments are
    ``noalias`` here too (it promises no more than this call keeps), ``function`` being dropped from the
    module; or ``function`` itself (``bodies`` remembers it). DenseNet-121's 607 layers are 375 distinct
    functions, DS-CNN's nine int8 layers five: LLVM optimises and compiles each once."""
    text = str(function).replace(f'@"{function.name}"(', "@(", 1)
    head, body = text.split("\n", 1)
    kin = bodies.setdefault(_metadata_by_content(module, head.replace(" noalias", "") + "\n" + body), [])
    mine = [("noalias" in arg.attributes) for arg in function.args]
    for kept in kin:
        if all(here or "noalias" not in arg.attributes for arg, here in zip(kept.args, mine)):
            del module.globals[function.name]
            return kept
    kin.append(function)
    return function


def _planned_alias(plan: MemoryPlan, unit: Layer) -> bool:
    """An alias layer (Reshape, Flatten, Identity...) whose output the plan put on its input's bytes: its
    emitter would copy only when the two differ, which the plan already rules out."""
    node = unit.nodes[0]
    return (not unit.fused and get_op(node.op).alias and bool(node.inputs) and bool(node.outputs[0])
            and plan.locations.get(node.inputs[0]) == plan.locations.get(node.outputs[0]))


METADATA_REFERENCE = re.compile(r"!\d+")


def _metadata_by_content(module: ir.Module, text: str) -> str:
    """``text`` with each metadata reference (``!12``: a loop's ID, numbered in creation order) replaced by
    what that node says, its own operands described one level down (self-references as ``self``): equal
    functions whose loops were numbered apart compare equal."""
    nodes = {md.get_reference(): md for md in module.metadata}

    def content(reference: str, depth: int) -> str:
        node = nodes.get(reference)
        if node is None:
            return reference
        body = str(node).split("=", 1)[1]
        return METADATA_REFERENCE.sub(lambda m: "self" if m.group(0) == reference else
                                      (content(m.group(0), depth - 1) if depth else "!"), body)

    return METADATA_REFERENCE.sub(lambda m: content(m.group(0), 1), text)


def forbid_library_calls(module: ir.Module) -> None:
    """Mark every defined function "no-builtins": LLVM then keeps copy/fill loops as loops instead of
    turning them into memcpy/memset calls the bare target may lack. (llvmlite's attribute list does not
    know this string attribute, so it is admitted for each function explicitly.)"""
    for function in module.functions:
        if not function.is_declaration:
            function.attributes._known = function.attributes._known | {'"no-builtins"'}
            function.attributes.add('"no-builtins"')


def _code_constant(module: ir.Module, graph: Graph, tensor: str, made: dict[str, ir.GlobalVariable]) -> ir.Value:
    """A tiny constant (memory_plan.CODE) as internal read-only data of the object, created once per tensor
    (``made``): tensors whose names differ only in characters a symbol cannot hold get symbols of their own."""
    if tensor not in made:
        symbol = module.get_unique_name("const." + re.sub(r"[^A-Za-z0-9_.]", "_", tensor))
        element = llvm_type(graph.type_of(tensor).dtype)
        data = np.ascontiguousarray(graph.value_of(tensor)).reshape(-1)
        values = data.view(f"<u{data.dtype.itemsize}") if not data.dtype.kind == "f" else data
        array_ty = ir.ArrayType(element, max(1, data.size))
        items = [ir.Constant(element, float(v) if data.dtype.kind == "f" else int(v)) for v in values]
        variable = ir.GlobalVariable(module, array_ty, name=symbol)
        variable.initializer = ir.Constant(array_ty, items or [ir.Constant(element, 0)])
        variable.global_constant = True
        variable.linkage = "internal"
        variable.unnamed_addr = True
        made[tensor] = variable
    return made[tensor].gep([ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 0)])


def _layer_function(module: ir.Module, graph: Graph, plan: MemoryPlan, index: int, unit: Layer,
                    present: list[str], workspace: bool):
    types = [llvm_type(graph.type_of(n).dtype).as_pointer() for n in present]
    types += [BYTE_PTR] if workspace else []
    types += [BYTE_PTR]   # the parameter block
    safe = re.sub(r"\W", "_", unit.op.lower())
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name=f"layer{index}_{safe}")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")  # each layer is optimised on its own: export time stays linear
    for arg, free in zip(function.args, _noalias(plan, present)):
        if free:
            arg.add_attribute("noalias")
    if workspace:   # planned apart from every tensor live during the layer
        function.args[-2].add_attribute("noalias")
    function.args[-1].add_attribute("noalias")   # read-only tables no store can reach
    return function


def _emit_layer_body(function: ir.Function, graph: Graph, unit: Layer, choice: Choice, present: list[str],
                     math: MathLib, target: Target, workspace_size: int, parameters: LayerParameters, share) -> None:
    """The layer's function body, written by the implementation the select stage chose for it."""
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    refs = {name: TensorRef(arg, graph.type_of(name), constant_bounds(graph, name))
            for name, arg in zip(present, function.args)}
    inputs = [refs[n] if n else None for n in unit.inputs]
    outputs = [refs[n] if n else None for n in unit.outputs]
    head = unit.nodes[0]
    k = KernelContext(head, head.attrs, builder, inputs, outputs, math, target,
                      function.args[-2] if workspace_size else None, workspace_size, parameters=parameters,
                      layer=unit, choice=choice, graph=graph, refs=refs, share=share)
    get_implementation(choice.impl).emit(k)
    builder.ret_void()


def layer_workspaces(graph: Graph, layers: list[Layer], target: Target,
                     choices: list[Choice] | None = None) -> dict[int, int]:
    """Scratch bytes each layer's implementation needs on ``target`` (its ``workspace`` hook; layers without a
    workspace left out). ``choices``: the select stage's (default: selected here — only for layers whose
    implementations read no packed weights, e.g. float layers: the pipeline passes its own)."""
    if choices is None:
        choices = [selection.choice for selection in select_layers(graph, layers, target)]
    sizes = {}
    for index, (unit, choice) in enumerate(zip(layers, choices)):
        size = run_hook(choice.impl, "workspace", 0, sizing_context(Query(graph, unit, target), choice))
        if size:
            sizes[index] = size
    return sizes


def layer_streams(graph: Graph, layers: list[Layer], target: Target,
                  choices: list[Choice] | None = None) -> dict[int, Stream]:
    """The layers whose implementation streams on ``target`` (its ``stream`` hook, kernels/registry.py);
    ``choices`` as for ``layer_workspaces``."""
    if choices is None:
        choices = [selection.choice for selection in select_layers(graph, layers, target)]
    found = {}
    for index, (unit, choice) in enumerate(zip(layers, choices)):
        stream = run_hook(choice.impl, "stream", None, sizing_context(Query(graph, unit, target), choice))
        if stream is not None:
            found[index] = stream
    return found
