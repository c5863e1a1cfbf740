"""LLVM emitters, registered against registry op names: ``@emitter("Relu")``.

An emitter receives a ``KernelContext``: the layer's node and attributes, an IRBuilder positioned in
the layer's own function, typed views of its input/output tensors, and the bundle's math library.
It writes the loop nest computing the op with every shape baked in as a constant.

A kernel that needs a scratch buffer (QConv's im2col rows, QMatMul's paired rows) declares its size with
``@workspace("QConv")``: the memory planner then gives the layer that many bytes of the activations
region, live only during the layer, and the emitter takes them with ``k.scratch(type, size)`` — so the RAM a
bundle needs is in ACTIVATIONS_MEM_SIZE, not hidden on the stack. The size function sees the same
context without a builder or pointers (types and target only).

Channels-last layers (pegasus/ops/layout.py): ``@emitter(..., channels_last=...)`` says which ones an
emitter computes in that layout (True, or a per-layer predicate); a kernel that reads its constant
weights in another order registers a ``@packer`` that re-lays them, which the exporter applies before
code generation (exporters/glow/lower.py). Other channels-last layers run channels first, between
transposes.

A kernel that finishes its output positions in row-major order, reading only the inputs of the positions it
has not finished, declares it with ``@streams("QConv")``: a function of the same context as a workspace size
returning the layer's ``Stream`` (or None when this layer's loops do not stream). The memory planner may then
write the layer's output over the bytes of an input that dies there (exporters/glow/memory_plan.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.llvm.tensors import TensorRef
from pegasus.ir.graph import Node
from pegasus.ir.tensor import TensorType

Emitter = Callable[[KernelContext], None]
#: whether a channels-last layer runs in the op's emitter: (node, graph) -> bool
Supports = Callable[[Node, Any], bool]
#: the weights a channels-last kernel reads, re-laid at export: (node, graph) -> {input position: array}
Packer = Callable[[Node, Any], dict[int, Any]]
_EMITTERS: dict[str, Emitter] = {}
_CHANNELS_LAST: dict[str, Supports] = {}
_PACKERS: dict[str, Packer] = {}
_FIRST_PACKERS: dict[str, Packer] = {}
Sizer = Callable[[KernelContext], int]
_WORKSPACES: dict[str, Sizer] = {}


def _register(table: dict[str, Any], ops: tuple[str, ...], fn: Any, what: str) -> None:
    """Put ``fn`` in ``table`` under each of ``ops``, refusing an op that already has one (a second registration
    would silently replace the first)."""
    for op in ops:
        if op in table:
            raise ValueError(f"{what} for {op} registered twice")
        table[op] = fn


def emitter(*ops: str, channels_last: bool | Supports = False) -> Callable[[Emitter], Emitter]:
    """Register ``fn`` as the emitter of ``ops``. ``channels_last`` says it also reads the ops'
    ``channels_last`` attribute (pegasus/ops/layout.py) itself: True for every layer, or a predicate
    ``(node, graph) -> bool`` naming the layers it computes channels last. The exporter wraps any other
    channels-last layer in transposes (exporters/glow/lower.py)."""
    def decorate(fn: Emitter) -> Emitter:
        _register(_EMITTERS, ops, fn, "emitter")
        for op in ops:
            if channels_last:
                _CHANNELS_LAST[op] = channels_last if callable(channels_last) else (lambda node, graph: True)
        return fn
    return decorate


def supports_channels_last(node: Node, graph: Any) -> bool:
    """Whether ``node`` (a channels-last layer of ``graph``) runs channels last in its op's emitter."""
    import pegasus.exporters.glow.kernels  # noqa: F401  (registers every family)

    supports = _CHANNELS_LAST.get(node.op)
    return supports is not None and supports(node, graph)


def packer(*ops: str, channels_first: bool = False) -> Callable[[Packer], Packer]:
    """Register how a channels-last kernel of ``ops`` (``channels_first``: a channels-first one) wants its
    constant weights laid out: ``fn(node, graph, target)`` returns the re-laid arrays by input position, or
    none for a layer it leaves as it is (``target``: the bundle's, or None when no target is known — then the
    layout may not depend on one). The exporter replaces those inputs with the re-laid constants before code
    generation (exporters/glow/lower.py), so NAME.weights.bin holds what the kernel reads."""
    def decorate(fn: Packer) -> Packer:
        _register(_FIRST_PACKERS if channels_first else _PACKERS, ops, fn,
                  "channels-first packer" if channels_first else "channels-last packer")
        return fn
    return decorate


def packed_weights(node: Node, graph: Any, target: Any = None) -> dict[int, Any]:
    """The re-laid weights of ``node`` (channels last or first, as its ``channels_last`` says) whose kernel has
    a ``packer`` for that layout (else none)."""
    import pegasus.exporters.glow.kernels  # noqa: F401

    table = _PACKERS if getattr(node.attrs, "channels_last", False) else _FIRST_PACKERS
    pack = table.get(node.op)
    return pack(node, graph, target) if pack is not None else {}


def get_emitter(op: str) -> Emitter | None:
    import pegasus.exporters.glow.kernels  # noqa: F401  (registers every family)

    return _EMITTERS.get(op)


def emitted_ops() -> list[str]:
    import pegasus.exporters.glow.kernels  # noqa: F401

    return sorted(_EMITTERS)


def workspace(*ops: str) -> Callable[[Sizer], Sizer]:
    """Register the scratch bytes an op's emitter takes with ``KernelContext.scratch`` (a sum of 16-byte
    aligned pieces)."""
    def decorate(fn: Sizer) -> Sizer:
        _register(_WORKSPACES, ops, fn, "workspace")
        return fn
    return decorate


def _sizing_context(node: Node, types_in: list[TensorType | None], types_out: list[TensorType | None],
                    target: Any) -> KernelContext:
    """A context without builder or pointers: what a workspace size or a stream is decided from."""
    refs = [[TensorRef(None, t) if t is not None else None for t in types] for types in (types_in, types_out)]
    return KernelContext(node, node.attrs, None, refs[0], refs[1], None, target)


def workspace_bytes(node: Node, types_in: list[TensorType | None], types_out: list[TensorType | None],
                    target: Any) -> int:
    """The workspace ``node``'s emitter needs on ``target`` (0 for ops without one)."""
    import pegasus.exporters.glow.kernels  # noqa: F401

    sizer = _WORKSPACES.get(node.op)
    return 0 if sizer is None else sizer(_sizing_context(node, types_in, types_out, target))


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
_STREAMS: dict[str, Streamer] = {}


def streams(*ops: str) -> Callable[[Streamer], Streamer]:
    """Register ``fn(context) -> Stream | None``: whether (and how) the emitter of ``ops`` streams a layer
    (the context is a workspace sizer's: types and target only)."""
    def decorate(fn: Streamer) -> Streamer:
        _register(_STREAMS, ops, fn, "stream")
        return fn
    return decorate


def stream_of(node: Node, types_in: list[TensorType | None], types_out: list[TensorType | None],
              target: Any) -> Stream | None:
    """The ``Stream`` of ``node``'s emitter on ``target``, None when it does not stream."""
    import pegasus.exporters.glow.kernels  # noqa: F401

    streamer = _STREAMS.get(node.op)
    return None if streamer is None else streamer(_sizing_context(node, types_in, types_out, target))


#: the dimensions of a layer's tensors its kernel reads from the layer's parameter block at run time instead of
#: baking them into its instructions: (input position, axis) pairs of the head node (kernels/parameters.py)
RuntimeDims = Callable[[KernelContext], tuple[tuple[int, int], ...]]
_RUNTIME_DIMS: dict[str, RuntimeDims] = {}


def runtime_dims(*ops: str) -> Callable[[RuntimeDims], RuntimeDims]:
    """Register ``fn(context) -> ((input position, axis), ...)``: the input dimensions the emitter of ``ops``
    reads at run time for a layer (``KernelContext.dim``; the context is a workspace sizer's). Layers that differ
    only in those dimensions then share one function (exporters/glow/codegen.py): DenseNet-121's 1x1 layers of
    one block differ only in their input channels."""
    def decorate(fn: RuntimeDims) -> RuntimeDims:
        _register(_RUNTIME_DIMS, ops, fn, "runtime_dims")
        return fn
    return decorate


def runtime_dims_of(node: Node, types_in: list[TensorType | None], types_out: list[TensorType | None],
                    target: Any) -> tuple[tuple[int, int], ...]:
    """The (input position, axis) pairs ``node``'s emitter reads at run time on ``target`` (none by default)."""
    import pegasus.exporters.glow.kernels  # noqa: F401

    reader = _RUNTIME_DIMS.get(node.op)
    return () if reader is None else tuple(reader(_sizing_context(node, types_in, types_out, target)))


#: the kernel of a fused layer (exporters/glow/fuse.py): ``fn(context, layer)``, the context's outputs the
#: layer's (its last node's), its inputs and attributes the head's
GroupEmitter = Callable[[KernelContext, Any], None]
_GROUPS: dict[str, GroupEmitter] = {}


def group_emitter(*ops: str) -> Callable[[GroupEmitter], GroupEmitter]:
    """Register ``fn`` as the kernel of the fused layers headed by ``ops`` (fuse.py says which nodes join)."""
    def decorate(fn: GroupEmitter) -> GroupEmitter:
        _register(_GROUPS, ops, fn, "group emitter")
        return fn
    return decorate


def get_group_emitter(op: str) -> GroupEmitter | None:
    import pegasus.exporters.glow.kernels  # noqa: F401

    return _GROUPS.get(op)
