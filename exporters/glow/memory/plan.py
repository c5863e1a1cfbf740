"""Static memory plan of a bundle: where every tensor lives in Glow's three buffers.

- constant weights: every constant, in first-use order, 64-byte aligned (16 below 16 KiB); constants of
  at most 16 bytes (quantization scales and zero points, scalars) go into the code instead (region "code");
- mutable weights: the placeholders (graph inputs, then outputs), 64-byte aligned, at the offsets the
  header names;
- activations: every intermediate tensor. Tensors are grouped into buffers first: an ``alias`` op
  (Reshape, Flatten, Squeeze...) reuses its input's bytes, and an ``inplace`` op may write over an
  input that dies at that layer, as may a line-buffered block over its input (``Layer.writes_over``,
  row_chains.py; its output may be smaller). Buffers whose lifetimes do not overlap then share addresses: a
  greedy best-fit by size, largest first (the usual static planner of AOT compilers). Every buffer
  starts 64-byte aligned; the region ends with its last byte in use (no padding after it).

Streaming layers: a layer whose kernel finishes its output positions in row-major order
(``kernels.registry.Stream``) may write its output over an input that dies there, the output starting
``delta`` bytes below the input. Output position p (``out_bytes`` each) is written after every read of
the positions before it, and from then on the kernel reads only input positions from ``first(q)`` on for
q >= p, where ``first(q)`` is q's window origin clamped into the input (flat, ``in_bytes`` each). So the
writes never reach a byte still to be read when ``(p + 1) * out_bytes <= delta + min(first(q), q >= p) *
in_bytes`` for every p (``overlap_bytes``: for a 3x3 stride-1 depthwise layer on 25x5x64 int8, 448 bytes —
a row and two positions —, for a 1x1 stride-1 layer with Cout <= Cin, one output position). The pair then
takes max(out, delta + in) bytes instead of out + in. The planner places such an output either clear of
its input or at least ``delta`` below it, tries that spot (and the input's spot above a placed output)
besides the first fit, and keeps the one that grows the region least; offsets may go below zero and are
shifted at the end. A chain of streaming layers (a depthwise-separable network) thus slides downward by
its deltas instead of taking two tensors at every layer.

``reuse_input_memory`` (export glow --reuse-input-memory): the inputs, outputs and every other buffer are
planned together in the mutable region (ACTIVATIONS_MEM_SIZE is 0), the inputs as buffers that die at
their last use — so later tensors take their bytes and the inference overwrites the caller's inputs.
TFLite Micro's arena does the same; Glow (the default) keeps the inputs intact.

What a bundle can hold: the kernels index a tensor's elements, and the code offsets into each buffer, with
signed 32-bit integers, so a tensor of more than 2**31 - 1 elements or bytes, or a buffer larger than that,
is refused (``check_limits``), as are buffers adding up past a 32-bit CPU's 4 GiB address space.

A layer whose kernel needs scratch memory (``kernels.registry.workspace``) gets a buffer of its own in the
activations region, live during that layer only (``workspace_name``): RAM the kernels use is planned and
counted like any tensor's, not taken from the stack.

Concat by construction (``concat_in_place``: hosted targets, float tensors): a Concat whose inputs are
contiguous runs of its output (every axis before the concatenation axis of size 1) gets each input's
buffer moved into its output's at that input's byte offset (64-byte aligned offsets only), so the layers
producing the inputs write straight into the joined tensor and the Concat copies nothing (its kernel
compares the pointers: kernels/reference/shape_ops.py). DenseNet's dense blocks thus become one buffer each, every
layer writing its channels after the ones before. An input moves only when every tensor of its buffer is
written by the Concat's layer and that buffer holds nothing but the input (and the tensors written over
before it); a tensor written over the joined output after the Concat (an in-place layer) must come after
the last read of every moved tensor. The merged buffer lives from the first of its tensors to the last.

The plan is made for a list of layers (``fuse.Layer``, the units code is generated in; by default one
per node): lifetimes count in layers, a layer reads its inputs (a fused residual sum's other operand among
them, live until the layer ran: fuse.py) and writes its outputs, and the tensors inside a fused layer are
never allocated (they have no location). The plan keeps its layers, so code generation runs exactly the
units it was planned for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pegasus.errors import PegasusError
from pegasus.exporters.glow.fuse import Layer, single_layers
from pegasus.exporters.glow.kernels.registry import Stream
from pegasus.exporters.glow.llvm.tensors import strides_of
from pegasus.ir.graph import Graph
from pegasus.ops.common import normalize_axis
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
    offsets: dict[str, int] = field(default_factory=dict)   # tensors not at the buffer's start (Concat inputs)


@dataclass
class MemoryPlan:
    locations: dict[str, Location]
    constant_size: int
    mutable_size: int
    activations_size: int
    buffers: list[Buffer] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)   # the units planned for, in execution order
    reuses_inputs: bool = False   # every buffer in the mutable region, over the inputs (module docstring)
    #: layers' parameter blocks (kernels/parameters.py): (offset, bytes) in the constant region, after the
    #: graph's constants; code generation adds them (``add_parameters``)
    parameters: list[tuple[int, bytes]] = field(default_factory=list)
    _constants_end: int = 0   # constant_size before the first block

    def add_parameters(self, data: bytes) -> int:
        """Place a layer's parameter block at the end of the constant region; its offset."""
        if not self.parameters:
            self._constants_end = self.constant_size
        offset = align(self.constant_size, SMALL_ALIGN)
        self.parameters.append((offset, bytes(data)))
        self.constant_size = offset + len(data)
        return offset

    def clear_parameters(self) -> None:
        """Drop the blocks an earlier code generation added (the module is being generated again)."""
        if self.parameters:
            self.constant_size = self._constants_end
            self.parameters.clear()

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


def _group_buffers(graph: Graph, layers: list[Layer], reuse_inputs: bool) -> dict[str, Buffer]:
    """Map every tensor a layer reads or writes (but constants) to its buffer (aliases and in-place
    writes share one); buffer lifetimes are layer indices. An in-place write over a graph input only with
    ``reuse_inputs``."""
    placeholders = set(graph.inputs) | set(graph.outputs)   # sets: linear in the graph (a 100k-layer chain)
    inputs, outputs = set(graph.inputs), set(graph.outputs)
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
            over = layer.writes_over if position == 0 else None   # a smaller output may take it too
            source = over or (layer.inputs[0] if layer.inputs and position == 0 and opdef else "")
            shared = of.get(source) if source else None
            size = graph.type_of(out).nbytes
            can_share = (shared is not None and not (shared.placeholder and out in placeholders)
                         and (size == graph.type_of(source).nbytes or (over and size <= shared.size)))
            if can_share and opdef and opdef.alias:
                pass
            elif (can_share and (over or opdef.inplace) and last_use.get(source) == index
                  and source not in outputs
                  and (reuse_inputs or shared.tensors[0] not in inputs)):   # only a buffer's first can be one
                pass   # (without reuse_inputs the caller's input stays intact)
            else:
                shared = None
            if shared is None:
                new_buffer(out, index)
            else:
                shared.tensors.append(out)
                shared.placeholder = shared.placeholder or (out if out in placeholders else None)
                of[out] = shared
    for name, buffer in of.items():
        end = end_of_graph if name in outputs else last_use.get(name, buffer.start)
        buffer.end = max(buffer.end, end)
    return of


def concat_slices(graph: Graph, layer: Layer) -> list[int] | None:
    """The byte offsets of a Concat layer's inputs in its float output when each input is one contiguous run of
    it (the axes before the concatenation axis all of size 1) and the inputs are distinct tensors; else None."""
    node = layer.nodes[0]
    if layer.fused or node.op != "Concat" or not node.outputs[0] or "" in node.inputs:
        return None
    y = graph.type_of(node.outputs[0])
    axis = normalize_axis(node.attrs.axis, y.rank)
    if not y.dtype.is_float or any(d != 1 for d in y.shape[:axis]) or len(set(node.inputs)) != len(node.inputs):
        return None
    run = math.prod(y.shape[axis + 1:]) * y.dtype.itemsize
    starts = np.cumsum([0] + [graph.type_of(x).shape[axis] * run for x in node.inputs[:-1]])
    return [int(start) for start in starts]


def _concat_in_place(graph: Graph, layers: list[Layer], of: dict[str, Buffer]) -> None:
    """Move Concat inputs' buffers into their outputs' (module docstring), in layer order: a dense block's
    joined tensors nest, each at the start of the next."""
    written = {name: index for index, layer in enumerate(layers) for name in layer.outputs if name}
    last_read = {name: index for index, layer in enumerate(layers) for name in layer.present_inputs()}
    last_read.update({name: len(layers) for name in graph.outputs})
    for index, layer in enumerate(layers):
        starts = concat_slices(graph, layer)
        whole = of.get(layer.outputs[0]) if starts is not None else None
        if whole is None or whole.placeholder or whole.tensors[0] != layer.outputs[0]:
            continue
        later = [written[name] for name in whole.tensors if written.get(name, -1) > index]
        for x, start in zip(layer.inputs, starts):
            part = of.get(x)
            if (part is None or part is whole or part.placeholder or part.workspace or start % ALIGN
                    or part.size != graph.type_of(x).nbytes or part.offsets.get(x, 0)
                    or any(written.get(name, len(layers)) > index for name in part.tensors)
                    or any(at <= last_read.get(name, -1) for at in later for name in part.tensors)):
                continue
            for name in part.tensors:
                whole.offsets[name] = start + part.offsets.get(name, 0)
                of[name] = whole
            whole.tensors += part.tensors
            whole.start, whole.end = min(whole.start, part.start), max(whole.end, part.end)


def workspace_name(layer: Layer) -> str:
    """The location name of ``layer``'s workspace in ``MemoryPlan.locations``."""
    return f"{layer.nodes[0].name}:workspace"


def overlap_bytes(stream: Stream) -> int:
    """The least ``offset(input) - offset(output)`` at which a streaming layer may write its output over its
    input (module docstring): max over output positions p of (p + 1) * out_bytes - min(first(q), q >= p) *
    in_bytes."""
    axes = stream.axes
    origins = np.meshgrid(*[np.maximum(0, np.arange(axis.out, dtype=np.int64) * axis.stride - axis.pad)
                            for axis in axes], indexing="ij")
    first = sum(origin * stride for origin, stride in zip(origins, strides_of(tuple(a.size for a in axes))))
    still_read = np.minimum.accumulate(np.ravel(first)[::-1])[::-1]
    written = np.arange(1, still_read.size + 1, dtype=np.int64) * stream.out_bytes
    return max(0, int(np.max(written - still_read * stream.in_bytes)))


def _overlaps(graph: Graph, layers: list[Layer], of: dict[str, Buffer], streams: dict[int, Stream],
              movable_placeholders: bool) -> dict[tuple[int, int], int]:
    """{(id(output buffer), id(input buffer)): least delta, aligned} for the streaming layers whose first
    input's buffer dies there, read by no other input of the layer, and whose output's buffer starts there
    (placeholders only when they are planned with the rest, ``movable_placeholders``)."""
    links = {}
    for index, stream in streams.items():
        layer = layers[index]
        source, out = layer.inputs[0], layer.outputs[0]
        read, written = of.get(source), of.get(out)
        if read is None or written is None or read is written or read.end != index or written.start != index:
            continue
        if written.tensors[0] != out or any(name in read.tensors for name in layer.present_inputs()[1:]):
            continue
        if not movable_placeholders and (read.placeholder or written.placeholder):
            continue
        links[(id(written), id(read))] = align(overlap_bytes(stream))
    return links


Group = list[tuple[Buffer, int]]   # buffers placed together, at offsets relative to the group's


class _Placer:
    """Offsets for buffers that must not share a byte while both live, but where the streaming ``links``
    allow ({(id(output buffer), id(input buffer)): least delta}): offsets may go below zero (``bottom``)."""

    def __init__(self, links: dict[tuple[int, int], int]) -> None:
        self.links = links
        self.partners: dict[int, list[Buffer]] = {}
        self.placed: list[tuple[Buffer, int]] = []
        self.at: dict[int, int] = {}
        self.bottom = self.top = 0

    def refused(self, group: Group) -> list[tuple[int, int]]:
        """(lo, hi): the group's offset must be <= lo or >= hi, for each placed buffer a member meets."""
        refused = []
        for buffer, rel in group:
            for other, at in self.placed:
                if other.start > buffer.end or buffer.start > other.end:
                    continue
                lo = at - self.links.get((id(buffer), id(other)), buffer.size)   # written over ``other``
                hi = at + self.links.get((id(other), id(buffer)), other.size)    # ``other`` written over it
                refused.append((lo - rel, hi - rel))
        return sorted(refused)

    def spots(self, group: Group) -> list[int]:
        """The group's lowest fitting offset (first fit), then the fitting ones next to placed partners."""
        refused = self.refused(group)
        offset = self.bottom - min(rel for _, rel in group)
        for lo, hi in refused:
            if offset <= lo:
                break
            offset = max(offset, align(hi))
        spots = [offset]
        for buffer, rel in group:
            for other in self.partners.get(id(buffer), []):
                if id(other) in self.at:
                    below = (id(buffer), id(other)) in self.links
                    delta = self.links[(id(buffer), id(other))] if below else self.links[(id(other), id(buffer))]
                    spots.append(self.at[id(other)] + (-delta if below else delta) - rel)
        return [spots[0]] + [at for at in spots[1:] if all(at <= lo or at >= hi for lo, hi in refused)]

    def put(self, group: Group, offset: int) -> None:
        for buffer, rel in group:
            self.placed.append((buffer, offset + rel))
            self.at[id(buffer)] = offset + rel
            self.bottom, self.top = min(self.bottom, offset + rel), max(self.top, offset + rel + buffer.size)

    def undo(self, count: int, bottom: int, top: int) -> None:
        for buffer, _ in self.placed[count:]:
            del self.at[id(buffer)]
        del self.placed[count:]
        self.bottom, self.top = bottom, top

    def best(self, group: Group) -> int:
        """The group's spot that grows the region least (ties: the first fit)."""
        def size_after(offset: int) -> int:
            return max(self.top, max(offset + rel + b.size for b, rel in group)) - min(
                self.bottom, min(offset + rel for _, rel in group))
        return min(self.spots(group), key=size_after)

    def place(self, buffer: Buffer) -> None:
        """``buffer``, and with it its unplaced streaming partners: the buffer at each of its spots, or tied to
        one partner (the output ``delta`` below the input) at that pair's first fit, each partner then at its
        best spot; keeps the choice that grows the region least."""
        waiting = [other for other in self.partners.get(id(buffer), []) if id(other) not in self.at]
        starts = [[(buffer, 0)]]
        for other in waiting:
            out, source = (buffer, other) if (id(buffer), id(other)) in self.links else (other, buffer)
            starts.append([(out, 0), (source, self.links[(id(out), id(source))])])
        mark = (len(self.placed), self.bottom, self.top)
        best = None
        for group in starts:
            for offset in self.spots(group):
                self.put(group, offset)
                steps = [(group, offset)]
                for other in waiting:
                    if id(other) not in self.at:
                        steps.append(([(other, 0)], self.best([(other, 0)])))
                        self.put(*steps[-1])
                if best is None or self.top - self.bottom < best[0]:
                    best = (self.top - self.bottom, steps)
                self.undo(*mark)
        for step in best[1]:
            self.put(*step)


def _place(buffers: list[Buffer], links: dict[tuple[int, int], int]) -> tuple[dict[int, int], int]:
    """Offsets (by id) of ``buffers``, largest first, and the region's size (module docstring)."""
    placer = _Placer(links)
    for out, source in links:
        placer.partners.setdefault(out, [])
        placer.partners.setdefault(source, [])
    by_id = {id(b): b for b in buffers}
    for out, source in links:
        placer.partners[out].append(by_id[source])
        placer.partners[source].append(by_id[out])
    for buffer in sorted(buffers, key=lambda b: (-b.size, b.start, b.tensors[0])):
        if id(buffer) not in placer.at:
            placer.place(buffer)
    return {key: at - placer.bottom for key, at in placer.at.items()}, placer.top - placer.bottom


def plan_memory(graph: Graph, layers: list[Layer] | None = None, workspaces: dict[int, int] | None = None,
                streams: dict[int, Stream] | None = None, reuse_input_memory: bool = False,
                concat_in_place: bool = False) -> MemoryPlan:
    """Plan ``graph`` run as ``layers`` (default: one layer per node, unfused); ``workspaces`` gives the
    scratch bytes of layers (by index) whose kernels need some, ``streams`` the layers (by index) whose
    kernels stream (``kernels.registry.Stream``); ``reuse_input_memory`` plans every buffer in the mutable
    region, the inputs' bytes reused once they are read; ``concat_in_place`` builds Concats in place (module
    docstring)."""
    layers = single_layers(graph) if layers is None else layers
    constant_locations, constant_size = _place_constants(graph)
    placeholders = list(dict.fromkeys(graph.inputs + graph.outputs))
    mutable_locations, mutable_size = _stack(placeholders, {n: graph.type_of(n).nbytes for n in placeholders},
                                             MUTABLE)
    locations = {**constant_locations}
    of = _group_buffers(graph, layers, reuse_input_memory)
    if concat_in_place:
        _concat_in_place(graph, layers, of)
    buffers = list({id(b): b for b in of.values()}.values())
    if reuse_input_memory:   # a placeholder no layer writes (fed by a constant) lives throughout
        buffers += [Buffer([name], graph.type_of(name).nbytes, -1, len(layers), name)
                    for name in placeholders if name not in of]
    buffers += [Buffer([workspace_name(layers[index])], size, index, index, workspace=True)
                for index, size in sorted((workspaces or {}).items()) if size]
    links = _overlaps(graph, layers, of, streams or {}, reuse_input_memory)
    movable = [b for b in buffers if reuse_input_memory or not b.placeholder]
    offsets, size = _place(movable, links)
    region = MUTABLE if reuse_input_memory else ACTIVATIONS
    for buffer in buffers:
        if id(buffer) in offsets:
            for name in buffer.tensors:
                locations[name] = Location(region, offsets[id(buffer)] + buffer.offsets.get(name, 0),
                                           buffer.size if buffer.workspace else graph.type_of(name).nbytes)
        else:
            base = mutable_locations[buffer.placeholder]
            for name in buffer.tensors:
                locations[name] = Location(MUTABLE, base.offset, graph.type_of(name).nbytes)
    if reuse_input_memory:
        mutable_size, size = size, 0
    for name in placeholders:  # placeholders fed straight from a constant or another placeholder
        locations.setdefault(name, mutable_locations[name])
    return MemoryPlan(locations, constant_size, mutable_size, size, buffers, layers, reuse_input_memory)


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
