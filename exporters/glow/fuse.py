"""Layer fusion: the units of code a bundle is generated and planned in.

A ``Layer`` is one or more graph nodes computed by a single layer function. Fusion groups a
convolution with the layers that consume its output on the spot (``FUSIONS``):

    Conv → zero or more unary element-wise layers (Relu, Clip, Sigmoid...) → at most one MaxPool/AveragePool
    Conv → element-wise layers, one of them (at most) a residual Add/Sum → no pooling
    QConv → at most one MaxPool
    BatchNormalization (float) → zero or more unary element-wise layers (kernels/reference/normalization.py)

The element-wise layers become an epilogue applied to each convolution accumulator before it is stored
or pooled, and the pooling reduces convolution values computed in registers (a QConv's requantised
integers: kernels/fused/integer_conv_pool.py), so the tensors between the nodes of a group are never written to
memory and the memory planner never allocates them. The kernel of a group is its head op's
``kernels.registry.group_emitter``. A chain
only grows through a tensor that exactly one node reads and that is not a graph output. A pooling joins a
convolution of its own layout (channels first, or channels last: kernels/reference/pool_channels_last.py). The graph
itself is untouched: the reference interpreter still runs every node, and a fused bundle must give
the same outputs.

Residual sums (ResNet's ``relu(conv(...) + shortcut)``): a float Conv group may take one Add or Sum
(the ``residual_sum`` op fact) of the chain's value and another tensor R of the same shape and dtype
(no broadcasting), as onnxruntime's NCHWc Conv takes its "Sum" input. The kernel loads R at each stored
vector's own index and lanes and adds it in the epilogue's order (value + R, then the layers after), so
the sum rounds as the unfused Add's does and the separate passes over the tensor (Add, then Relu: about
600 us of ResNet-50's 38 ms here) go. The first convolution of the sum's operands in the graph's order takes
it; when R is computed later (the other convolution of a projection block), the group runs right after the
layer computing R (nothing else reads the group's inner tensors, so nothing waits for it, and R cannot
depend on it). So ResNet-50's projection blocks add the strided shortcut into the 1x1 expansion, whose R is
then the shortcut just computed: added in the shortcut instead (7x7 1024 -> 2048 stride 2, 8 MB of weights
streamed) the layer took 3,708 kcycles against 3,467 + 33 unfused. R is the layer's last input
(``Layer.residual``), live until the layer ran; the output never takes R's bytes (conv.py's and
conv_plane.py's tail tiles overlap their neighbours and would read R again where it was written over).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pegasus.exporters.glow.kernels  # noqa: F401  (registers the implementations fusion asks about)
from pegasus.exporters.glow.kernels.reference.elementwise import UNARY
from pegasus.exporters.glow.kernels.strategy import Query, prefers_pooling_apart
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ops.facts import has_fact, ops_with
from pegasus.ops.registry import get_op

#: dtypes a fused float group computes in: the epilogue and the pooling then see exactly the values the
#: unfused layers would read back from memory (float16 would be rounded in between)
FUSED_DTYPES = (DType.FLOAT32, DType.FLOAT64)


@dataclass(frozen=True)
class Fusion:
    """Which layers may join a group headed by an op."""

    dtypes: tuple[DType, ...]   # the head's output dtypes the group computes in
    epilogue: bool              # whether unary element-wise layers may join
    pools: tuple[str, ...]      # the poolings that may end the group
    residual: bool = False      # whether a residual sum may join (module docstring; then no pooling)
    #: whether to ask the head's implementation on the target if it runs faster with its pooling as a layer of
    #: its own (a group kernel that pools in registers would give up a faster kernel for the head:
    #: kernels/strategy.py ``prefers_pooling_apart``)
    pools_apart: bool = False


#: the ops that head groups. A QConv's output is requantised integers: their max is exact, while an
#: element-wise layer or an average on them would need a requantisation of its own in the kernel
FUSIONS = {
    "Conv": Fusion(FUSED_DTYPES, True, ops_with("fusable_pool"), residual=True, pools_apart=True),
    "QConv": Fusion((DType.INT8, DType.UINT8, DType.INT16), False, ("MaxPool",)),
    "BatchNormalization": Fusion(FUSED_DTYPES, True, ()),
}


@dataclass
class Layer:
    """One layer function of the bundle: ``nodes`` run in order, the first one's inputs in (then the
    residual operand, if any), the last one's outputs out; the tensors in between live only in registers."""

    nodes: list[Node]

    @property
    def inputs(self) -> list[str]:
        residual = self.residual
        return self.nodes[0].inputs + ([residual] if residual else [])

    @property
    def residual(self) -> str | None:
        """The other operand of the group's residual sum (module docstring), None without one."""
        for previous, node in zip(self.nodes, self.nodes[1:]):
            if has_fact(node.op, "residual_sum"):
                return next(name for name in node.inputs if name and name != previous.outputs[0])
        return None

    @property
    def outputs(self) -> list[str]:
        return self.nodes[-1].outputs

    def present_inputs(self) -> list[str]:
        return [name for name in self.inputs if name]

    @property
    def fused(self) -> bool:
        return len(self.nodes) > 1

    @property
    def kind(self) -> str:
        """What the select stage chooses an implementation for: the op, or ``<head op>+group`` when fused."""
        return f"{self.nodes[0].op}+group" if self.fused else self.nodes[0].op

    @property
    def op(self) -> str:
        """The layer's name in generated code: its ops joined (``conv_relu_maxpool``)."""
        return "_".join(node.op for node in self.nodes)

    @property
    def writes_over(self) -> str | None:
        """An input whose bytes the layer's output may take when that input dies at the layer, beyond what
        its op says (``OpDef.inplace``: single nodes). None: none (row_chains.RowChain says otherwise)."""
        return None

    @property
    def pool(self) -> Node | None:
        last = self.nodes[-1]
        return last if self.fused and has_fact(last.op, "fusable_pool") else None

    @property
    def epilogue(self) -> list[Node]:
        """The element-wise nodes applied to the head's values (the residual sum among them)."""
        return [node for node in self.nodes[1:] if not has_fact(node.op, "fusable_pool")]


def single_layers(graph: Graph) -> list[Layer]:
    """One layer per node: the graph as it is, unfused."""
    return [Layer([node]) for node in graph.nodes]


def _can_follow(graph: Graph, layer: Layer, node: Node, target=None) -> bool:
    """Whether ``node`` can join ``layer`` (whose last output it reads) in a bundle for ``target`` (None: any)."""
    fusion = FUSIONS[layer.nodes[0].op]
    if layer.pool is not None:
        return False
    if has_fact(node.op, "residual_sum") and fusion.residual and layer.residual is None:
        return _adds_residual(graph, node, layer.outputs[0])
    if [n for n in node.inputs if n] != [layer.outputs[0]]:
        return False
    if node.op in fusion.pools:   # MaxPool's Indices need the whole tensor
        same_layout = layer.nodes[0].attrs.channels_last == node.attrs.channels_last
        apart = fusion.pools_apart and prefers_pooling_apart(Query(graph, Layer([layer.nodes[0]]), target))
        return (same_layout and all(not name for name in node.outputs[1:]) and not apart
                and layer.residual is None)   # the pooling kernels stage or reduce: no store to add R at
    source, result = graph.type_of(node.inputs[0]), graph.type_of(node.outputs[0])
    return (fusion.epilogue and node.op in UNARY and get_op(node.op).elementwise and len(node.outputs) == 1
            and result.dtype == source.dtype and result.shape == source.shape)


def _adds_residual(graph: Graph, node: Node, tail: str) -> bool:
    """Whether ``node`` sums ``tail`` and one other tensor, all three of one type (no broadcasting)."""
    operands = [name for name in node.inputs if name]
    if len(operands) != 2 or operands.count(tail) != 1 or len(node.outputs) != 1:
        return False
    other = next(name for name in operands if name != tail)
    types = [graph.type_of(name) for name in (tail, other, node.outputs[0])]
    return all((t.shape, t.dtype) == (types[0].shape, types[0].dtype) for t in types)


def _starts_group(graph: Graph, node: Node) -> bool:
    fusion = FUSIONS.get(node.op)
    return (fusion is not None and len(node.outputs) == 1
            and graph.type_of(node.outputs[0]).dtype in fusion.dtypes)


def fuse_layers(graph: Graph, target=None) -> list[Layer]:
    """The graph's nodes as layers, each Conv with the element-wise layers and pooling that can join it on
    ``target`` (``Fusion.pools_apart``; None: a pooling joins wherever a kernel can compute it).
    A group runs at its convolution's place (every node of it reads only the previous one's output), or, when
    its residual operand is computed later, right after the layer computing it (module docstring)."""
    readers = Counter(name for node in graph.nodes for name in node.inputs if name)
    reader_of = {name: node for node in graph.nodes for name in node.inputs if name}
    outputs = set(graph.outputs)
    computed = set(graph.inputs) | {name for name, tensor in graph.tensors.items() if tensor.is_constant}
    waiting: dict[str, list[Layer]] = {}   # residual operand -> the groups to run once it is computed
    taken: set[int] = set()
    layers: list[Layer] = []

    def place(layer: Layer) -> None:
        layers.append(layer)
        for name in layer.outputs:
            computed.add(name)
            for deferred in waiting.pop(name, []):
                place(deferred)

    for node in graph.nodes:
        if id(node) in taken:
            continue
        layer = Layer([node])
        while _starts_group(graph, node):
            tail = layer.outputs[0]
            follower = reader_of.get(tail)
            if (readers[tail] != 1 or tail in outputs or follower is None or id(follower) in taken
                    or not _can_follow(graph, layer, follower, target)):
                break
            layer.nodes.append(follower)
            taken.add(id(follower))
        if layer.residual is None or layer.residual in computed:
            place(layer)
        else:
            waiting.setdefault(layer.residual, []).append(layer)
    assert not waiting, f"residual operands never computed: {sorted(waiting)}"
    return layers


def headed_layer(graph: Graph, node: Node, target=None) -> Layer | None:
    """The layer ``fuse_layers`` heads with ``node`` (None: it joins another's): pooled_pair.py asks whether two
    convolutions each end with their pooling. For an export without fusion (``target.fused`` False) every node is a
    layer of its own."""
    if target is not None and not getattr(target, "fused", True):
        return Layer([node])
    return next((layer for layer in fuse_layers(graph, target) if layer.nodes[0] is node), None)
