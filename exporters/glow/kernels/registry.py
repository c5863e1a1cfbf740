"""How kernels register: ``@emitter("Relu")`` makes the decorated function the one implementation of an op
(kernels/strategy.py names it after the op; ops with several implementations register each with
``strategy.implementation``), and the hooks below are keyed by implementation name.

An emitter receives a ``KernelContext``: the layer's node and attributes, an IRBuilder positioned in
the layer's own function, typed views of its input/output tensors, the bundle's math library, and the layer
and ``Choice`` the select stage made (exporters/glow/schedule/select.py). It writes the loop nest computing the
op with every shape baked in as a constant.

An implementation that needs a scratch buffer (QConv's im2col rows, QMatMul's paired rows) declares its size
with ``@workspace(name)``: the memory planner then gives the layer that many bytes of the activations
region, live only during the layer, and the emitter takes them with ``k.scratch(type, size)`` — so the RAM a
bundle needs is in ACTIVATIONS_MEM_SIZE, not hidden on the stack. The size function sees the same
context without a builder or pointers (types, target, layer and choice only).

Channels-last layers (pegasus/ops/layout.py): ``@emitter(..., channels_last=...)`` (or ``channels_last_ops``)
says which ones an op's implementations compute in that layout (True, or a per-layer predicate); the lower stage
wraps any other channels-last layer in transposes (exporters/glow/lower.py). An implementation that reads its
constant weights in another order registers a ``@packer(name)`` that re-lays them, which the pack stage applies
after selection (exporters/glow/pipeline.py).

An implementation that finishes its output positions in row-major order, reading only the inputs of the positions
it has not finished, declares it with ``@streams(name)``: a function of the same context as a workspace size
returning the layer's ``Stream`` (or None when this layer's loops do not stream). The memory planner may then
write the layer's output over the bytes of an input that dies there (exporters/glow/memory/plan.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.strategy import FAMILIES, Choice, Query, hook, register
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.ir.graph import Node

Emitter = Callable[[KernelContext], None]
#: whether a channels-last layer runs in the op's emitter: (node, graph) -> bool
Supports = Callable[[Node, Any], bool]
#: the weights an implementation reads, re-laid by the pack stage: (query, choice) -> {input position: array}
Packer = Callable[[Query, Choice], dict[int, Any]]
Sizer = Callable[[KernelContext], int]
_CHANNELS_LAST: dict[str, Supports] = {}


def family_of(fn: Callable[..., Any]) -> str:
    """The family (kernels/strategy.py ``FAMILIES``) of an emitter, from the folder or the name of its module."""
    parts = fn.__module__.split(".")
    for family in FAMILIES:
        if family in parts[:-1]:
            return family
    return "integer" if parts[-1].startswith(("integer_", "quantize")) else "reference"


def emitter(*ops: str, channels_last: bool | Supports = False) -> Callable[[Emitter], Emitter]:
    """Register ``fn`` as the one implementation of each of ``ops``, named after the op (kernels/strategy.py).
    ``channels_last`` says it also reads the ops' ``channels_last`` attribute (pegasus/ops/layout.py) itself:
    True for every layer, or a predicate ``(node, graph) -> bool`` naming the layers it computes channels last.
    The exporter wraps any other channels-last layer in transposes (exporters/glow/lower.py)."""
    def decorate(fn: Emitter) -> Emitter:
        for op in ops:
            register(op, (op,), fn, family=family_of(fn))
        if channels_last:
            channels_last_ops(*ops, supports=channels_last)
        return fn
    return decorate


def channels_last_ops(*ops: str, supports: bool | Supports = True) -> None:
    """Say that some implementation of each of ``ops`` computes channels-last layers: all (True) or those
    ``supports(node, graph)`` names."""
    for op in ops:
        if op in _CHANNELS_LAST:
            raise ValueError(f"channels-last support of {op} registered twice")
        _CHANNELS_LAST[op] = supports if callable(supports) else (lambda node, graph: True)


def supports_channels_last(node: Node, graph: Any) -> bool:
    """Whether ``node`` (a channels-last layer of ``graph``) runs channels last in an implementation of its op
    (the kernels must be registered: exporters/glow/schedule/select.py imports them all)."""
    supports = _CHANNELS_LAST.get(node.op)
    return supports is not None and supports(node, graph)


def packer(*names: str) -> Callable[[Packer], Packer]:
    """Register how implementations ``names`` want their constant weights laid out: ``fn(query, choice)`` returns
    the re-laid arrays of the layer's head by input position, or none for a layer it leaves as it is. The pack
    stage (exporters/glow/pipeline.py) replaces those inputs with the re-laid constants after selection, so
    NAME.weights.bin holds what the kernel reads. (A block's ``pack`` hook, kernels/strategy.py ``hook``, returns
    ``[(node name, arrays, suffix), ...]`` for several nodes, which this wraps for the head.)"""
    def decorate(fn: Packer) -> Packer:
        def laid(query: Query, choice: Choice) -> list[tuple[str, dict[int, Any], str]]:
            node = query.node
            return [(node.name, fn(query, choice),
                     "channels_last" if getattr(node.attrs, "channels_last", False) else "packed")]
        hook("pack", *names)(laid)
        return fn
    return decorate


def workspace(*names: str) -> Callable[[Sizer], Sizer]:
    """Register the scratch bytes implementations ``names`` take with ``KernelContext.scratch`` (a sum of
    16-byte aligned pieces)."""
    return hook("workspace", *names)


def sizing_context(query: Query, choice: Choice | None = None) -> KernelContext:
    """A context without builder or pointers, the layer's head's types (its outputs the layer's when it ends in
    another node: a pooling): what a workspace size or a stream is decided from."""
    node = query.node
    types_in = [query.type_of(n) for n in node.inputs]
    types_out = [query.type_of(n) for n in node.outputs]
    refs = [[TensorRef(None, t) if t is not None else None for t in types] for types in (types_in, types_out)]
    return KernelContext(node, node.attrs, None, refs[0], refs[1], None, query.target, layer=query.layer,
                         choice=choice, graph=query.graph)


@dataclass(frozen=True)
class Stream:
    """How a streaming kernel walks its layer's first input X and first output Y, both (1, D1..Dn, C) with the
    positions in row-major order: output position o (along each axis of ``axes``, conv.py's ``Axis``) reads
    only input positions from ``max(0, o * stride - pad)`` on along every axis, and the kernel finishes the
    positions in order — once it writes a byte of output position p (``out_bytes`` each), it reads only
    inputs that positions p and later read (``in_bytes`` per input position). A load whose value is thrown
    away (a padding tap clamped into the input) does not count as a read."""

    axes: tuple[Any, ...]
    in_bytes: int
    out_bytes: int


Streamer = Callable[[KernelContext], Stream | None]


def streams(*names: str) -> Callable[[Streamer], Streamer]:
    """Register ``fn(context) -> Stream | None``: whether (and how) implementations ``names`` stream a layer
    (the context is a workspace sizer's: types and target only)."""
    return hook("stream", *names)


#: the dimensions of a layer's tensors its kernel reads from the layer's parameter block at run time instead of
#: baking them into its instructions: (input position, axis) pairs of the head node (kernels/parameters.py)
RuntimeDims = Callable[[KernelContext], tuple[tuple[int, int], ...]]


def runtime_dims(*names: str) -> Callable[[RuntimeDims], RuntimeDims]:
    """Register ``fn(context) -> ((input position, axis), ...)``: the input dimensions implementations ``names``
    read at run time for a layer (``KernelContext.dim``; the context is a workspace sizer's). Layers that differ
    only in those dimensions then share one function (exporters/glow/codegen.py): DenseNet-121's 1x1 layers of
    one block differ only in their input channels."""
    return hook("runtime_dims", *names)


#: the kernel of a fused layer (exporters/glow/fuse.py): ``fn(context, layer)``, the context's outputs the
#: layer's (its last node's), its inputs and attributes the head's
GroupEmitter = Callable[[KernelContext, Any], None]


def group_emitter(*ops: str) -> Callable[[GroupEmitter], GroupEmitter]:
    """Register ``fn`` as the one implementation, ``<op>+group``, of the fused layers headed by ``ops`` (fuse.py
    says which nodes join)."""
    def decorate(fn: GroupEmitter) -> GroupEmitter:
        for op in ops:
            kind = f"{op}+group"
            register(kind, (kind,), lambda k, fn=fn: fn(k, k.layer), family="fused")
        return fn
    return decorate
