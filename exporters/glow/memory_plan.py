"""Static memory plan of a bundle: where every tensor lives in Glow's three buffers.

- constant weights: every constant, in first-use order, 64-byte aligned (16 below 16 KiB); constants of
  at most 16 bytes (quantization scales and zero points, scalars) go into the code instead (region "code");
- mutable weights: the placeholders (graph inputs, then outputs), 64-byte aligned, at the offsets the
  header names;
- activations: every intermediate tensor. Tensors are grouped into buffers first: an ``alias`` op
  (Reshape, Flatten, Squeeze...) reuses its input's bytes, and an ``inplace`` op may write over an
  input that dies at that layer. Buffers whose lifetimes do not overlap then share addresses: a
  greedy best-fit by size, largest first (the usual static planner of AOT compilers).

What a bundle can hold: the kernels index a tensor's elements, and the code offsets into each buffer, with
signed 32-bit integers, so a tensor of more than 2**31 - 1 elements or bytes, or a buffer larger than that,
is refused (``check_limits``), as are buffers adding up past a 32-bit CPU's 4 GiB address space.

A layer whose kernel needs scratch memory (``kernels.registry.workspace``) gets a buffer of its own in the
activations region, live during that layer only (``workspace_name``): RAM the kernels use is planned and
counted like any tensor's, not taken from the stack.

The plan is made for a list of layers (``fuse.Layer``, the units code is generated in; by default one
per node): lifetimes count in layers, a layer reads its inputs and writes its outputs, and the tensors
inside a fused layer are never allocated (they have no location). The plan keeps its layers, so code
generation runs exactly the units it was planned for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pegasus.errors import PegasusError
from pegasus.exporters.glow.fuse import Layer, single_layers
from pegasus.ir.graph import Graph
from pegasus.ops.registry import get_op

ALIGN = 64
CONSTANT, MUTABLE, ACTIVATIONS = "constant", "mutable", "activations"
#: constants of at most this many bytes (scales, zero points, scalars) are compiled into the code as
#: immediates/read-only data instead of taking a slot in the constant weights buffer
CODE, CODE_CONSTANT_LIMIT = "code", 16
#: constants below this size are 16-byte aligned in the constant buffer (enough for any SIMD load of
#: the targets); larger ones start on a 64-byte boundary (cache lines, Glow's MEM_ALIGN)
SMALL_CONSTANT, SMALL_ALIGN = 16384, 16
#: the largest element count, byte size and buffer offset the generated code's 32-bit indices reach
MAX_INDEX = 2**31 - 1
#: bytes a 32-bit CPU addresses (4 GiB)
ADDRESS_SPACE_32 = 2**32


def align(value: int, to: int = ALIGN) -> int:
    return -(-value // to) * to


@dataclass(frozen=True)
class Location:
    region: str
    offset: int
    size: int


@dataclass
class Buffer:
    """Tensors sharing one allocation, and the layer indices between which it must stay intact."""

    tensors: list[str]
    size: int
    start: int
    end: int
    placeholder: str | None = None
    workspace: bool = False


@dataclass
class MemoryPlan:
    locations: dict[str, Location]
    constant_size: int
    mutable_size: int
    activations_size: int
    buffers: list[Buffer] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)   # the units planned for, in execution order

    def workspace_of(self, layer: Layer) -> Location | None:
        """Where ``layer``'s kernel scratch lies in the activations, if it has any."""
        return self.locations.get(workspace_name(layer))

    def workspaces(self) -> dict[str, int]:
        """Scratch bytes by layer (its first node's name), for the layers that have some."""
        return {layer.nodes[0].name: loc.size for layer in self.layers if (loc := self.workspace_of(layer))}


def _stack(names: list[str], sizes: dict[str, int], region: str) -> tuple[dict[str, Location], int]:
    offset, placed = 0, {}
    for name in names:
        if name in placed:
            continue
        placed[name] = Location(region, offset, sizes[name])
        offset = align(offset + sizes[name])
    return placed, offset


def _place_constants(graph: Graph) -> tuple[dict[str, Location], int]:
    """Constants in first-use order: tiny ones into the code, small ones 16-byte aligned, others 64."""
    offset, placed = 0, {}
    for tensor in graph.constants():
        size = tensor.type.nbytes
        if size <= CODE_CONSTANT_LIMIT:
            placed[tensor.name] = Location(CODE, 0, size)
            continue
        offset = align(offset, SMALL_ALIGN if size < SMALL_CONSTANT else ALIGN)
        placed[tensor.name] = Location(CONSTANT, offset, size)
        offset += size
    return placed, offset  # the buffer itself is MEM_ALIGN-aligned by the caller; its size needs no padding


def _group_buffers(graph: Graph, layers: list[Layer]) -> dict[str, Buffer]:
    """Map every tensor a layer reads or writes (but constants) to its buffer (aliases and in-place
    writes share one); buffer lifetimes are layer indices."""
    placeholders = list(dict.fromkeys(graph.inputs + graph.outputs))
    last_use: dict[str, int] = {}
    for index, layer in enumerate(layers):
        for name in layer.present_inputs():
            last_use[name] = index
    end_of_graph = len(layers)
    of: dict[str, Buffer] = {}

    def new_buffer(name: str, start: int) -> Buffer:
        buffer = Buffer([name], graph.type_of(name).nbytes, start, start,
                        name if name in placeholders else None)
        of[name] = buffer
        return buffer

    for name in graph.inputs:
        new_buffer(name, -1)
    for index, layer in enumerate(layers):
        opdef = get_op(layer.nodes[0].op) if not layer.fused else None
        for position, out in enumerate(layer.outputs):
            if not out:
                continue
            source = layer.inputs[0] if layer.inputs and position == 0 and opdef else ""
            shared = of.get(source) if source else None
            can_share = (shared is not None and graph.type_of(out).nbytes == graph.type_of(source).nbytes
                         and not (shared.placeholder and out in placeholders))
            if can_share and opdef.alias:
                pass
            elif (can_share and opdef.inplace and last_use.get(source) == index and source not in graph.outputs
                  and not any(t in graph.inputs for t in shared.tensors)):  # the caller's input stays intact
                pass
            else:
                shared = None
            if shared is None:
                new_buffer(out, index)
            else:
                shared.tensors.append(out)
                shared.placeholder = shared.placeholder or (out if out in placeholders else None)
                of[out] = shared
    for name, buffer in of.items():
        end = end_of_graph if name in graph.outputs else last_use.get(name, buffer.start)
        buffer.end = max(buffer.end, end)
    return of


def workspace_name(layer: Layer) -> str:
    """The location name of ``layer``'s workspace in ``MemoryPlan.locations``."""
    return f"{layer.nodes[0].name}:workspace"


def plan_memory(graph: Graph, layers: list[Layer] | None = None,
                workspaces: dict[int, int] | None = None) -> MemoryPlan:
    """Plan ``graph`` run as ``layers`` (default: one layer per node, unfused); ``workspaces`` gives the
    scratch bytes of layers (by index) whose kernels need some."""
    layers = single_layers(graph) if layers is None else layers
    constant_locations, constant_size = _place_constants(graph)
    placeholders = list(dict.fromkeys(graph.inputs + graph.outputs))
    mutable_locations, mutable_size = _stack(placeholders, {n: graph.type_of(n).nbytes for n in placeholders},
                                             MUTABLE)
    locations = {**constant_locations}
    of = _group_buffers(graph, layers)
    buffers = list({id(b): b for b in of.values()}.values())
    buffers += [Buffer([workspace_name(layers[index])], size, index, index, workspace=True)
                for index, size in sorted((workspaces or {}).items()) if size]
    placed: list[tuple[Buffer, int]] = []
    for buffer in sorted(buffers, key=lambda b: (-b.size, b.start, b.tensors[0])):
        if buffer.placeholder:
            base = mutable_locations[buffer.placeholder]
            for name in buffer.tensors:
                locations[name] = Location(MUTABLE, base.offset, graph.type_of(name).nbytes)
            continue
        offset = 0
        clashes = sorted((off, off + b.size) for b, off in placed if b.start <= buffer.end and buffer.start <= b.end)
        for lo, hi in clashes:
            if offset + buffer.size <= lo:
                break
            offset = max(offset, align(hi))
        placed.append((buffer, offset))
        for name in buffer.tensors:
            locations[name] = Location(ACTIVATIONS, offset, buffer.size if buffer.workspace else
                                       graph.type_of(name).nbytes)
    activations_size = align(max((off + b.size for b, off in placed), default=0))
    for name in placeholders:  # placeholders fed straight from a constant or another placeholder
        locations.setdefault(name, mutable_locations[name])
    return MemoryPlan(locations, constant_size, mutable_size, activations_size, buffers, layers)


def oversized_tensors(graph: Graph) -> list[str]:
    """Tensors with more than MAX_INDEX elements or bytes, largest first."""
    sizes = {name: tensor.type.nbytes for name, tensor in graph.tensors.items()
             if max(tensor.type.size, tensor.type.nbytes) > MAX_INDEX}
    return sorted(sizes, key=lambda name: -sizes[name])


def describe_size(graph: Graph, name: str) -> str:
    ttype = graph.type_of(name)
    return f"tensor '{name}' {ttype} ({ttype.size:,} elements, {ttype.nbytes:,} bytes)"


def _more(names: list[str]) -> str:
    return {0: "", 1: " (and 1 more tensor)"}.get(len(names) - 1, f" (and {len(names) - 1} more tensors)")


def check_limits(graph: Graph, plan: MemoryPlan, address_bits: int) -> None:
    """Refuse, with one line, a tensor or buffer the generated code cannot address (see the module's note)."""
    too_big = oversized_tensors(graph)
    if too_big:
        raise PegasusError(f"{describe_size(graph, too_big[0])}{_more(too_big)} is too large for a bundle: at most "
                           f"{MAX_INDEX:,} elements and bytes per tensor (32-bit indices)")
    buffers = {"CONSTANT_MEM_SIZE (weights)": plan.constant_size, "MUTABLE_MEM_SIZE (inputs/outputs)":
               plan.mutable_size, "ACTIVATIONS_MEM_SIZE": plan.activations_size}
    for label, size in buffers.items():
        if size > MAX_INDEX:
            raise PegasusError(f"{label} would be {size:,} bytes: a bundle's buffers hold at most {MAX_INDEX:,} "
                               "bytes (32-bit offsets)")
    total = sum(buffers.values())
    if address_bits == 32 and total > ADDRESS_SPACE_32:
        raise PegasusError(f"the bundle's buffers need {total:,} bytes (weights {plan.constant_size:,}, inputs/outputs "
                           f"{plan.mutable_size:,}, activations {plan.activations_size:,}): more than the 4 GiB "
                           f"({ADDRESS_SPACE_32:,} bytes) a 32-bit CPU addresses")
