"""Prepares an imported graph for code generation (on a copy; the user's model is not changed).

- every graph output must be written by a layer: an output that is a constant, a graph input or
  another output gets an explicit Identity copy (the bundle fills the output placeholder itself).
  A constant output keeps its name as the placeholder; the others get a ``_copy`` suffix.
- a channels-last layer (pegasus/ops/layout.py) that its op's kernel computes channels last
  (``kernels.registry.supports_channels_last``) stays as it is, its constant weights re-laid in the order
  that kernel reads them (``kernels.registry.packer``: e.g. conv_channels_last.py's (k..., C/group, M)),
  so NAME.weights.bin holds that layout. Any other channels-last layer runs channels first between two
  transposes: correct for every op, at the cost of a buffer and a pass each way.
- a QMatMul of 8-bit rows by a constant 8-bit matrix (a Dense / fully connected layer) is computed as the
  1x1 channels-last QConv it equals (rows as positions, the matrix's columns as output channels): that
  kernel reads each column's weights contiguously along the reduction (SMLAD pairs on Cortex-M, PMADDWD on
  x86) where the matrix product walks across columns. Two Reshapes (aliases: no copy) keep the tensors'
  names and shapes; the result is bit for bit the QMatMul's (the same sums, bias and requantisation).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from pegasus.exporters.glow.kernels.registry import packed_weights, supports_channels_last
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ops.layout import first_shape, to_first_perm, to_last_perm
from pegasus.ops.registry import make_attrs


def materialize_outputs(graph: Graph) -> bool:
    produced = {out for node in graph.nodes for out in node.outputs}
    changed = False
    seen: set[str] = set()
    for position, name in enumerate(list(graph.outputs)):
        needs_copy = name not in produced or name in graph.inputs or name in seen
        seen.add(name)
        if not needs_copy:
            continue
        tensor = graph.tensors[name]
        if tensor.is_constant and name not in graph.outputs[:position]:
            # the placeholder keeps the output's name; the constant moves aside
            source = graph.unique_tensor_name(f"{name}_value")
            graph.tensors[source] = Tensor.constant(source, tensor.data)
            for node in graph.nodes:
                node.inputs = [source if n == name else n for n in node.inputs]
            target = name
        else:
            source, target = name, graph.unique_tensor_name(f"{name}_copy")
            graph.outputs[position] = target
        graph.tensors[target] = Tensor(target, tensor.type)
        graph.nodes.append(Node(graph.unique_node_name(f"{target}_output_copy"), "Identity", make_attrs("Identity"),
                                [source], [target]))
        changed = True
    return changed


def _pack_weights(graph: Graph, node: Node, target=None) -> None:
    """Replace the constant weights of a channels-last ``node`` by the re-laid ones its kernel reads (new
    constants: a weight another layer shares keeps its own layout there)."""
    for position, array in packed_weights(node, graph, target).items():
        name = graph.add_constant(f"{node.inputs[position]}_channels_last", array)
        node.inputs = [name if i == position else n for i, n in enumerate(node.inputs)]


def channels_last_layers(graph: Graph, target=None) -> bool:
    """Channels-last layers with a channels-last kernel get their weights re-laid for it; each other one
    runs channels first, between transposes."""
    changed = False
    nodes: list[Node] = []
    for node in graph.nodes:
        if not getattr(node.attrs, "channels_last", False):
            nodes.append(node)
            continue
        changed = True
        if supports_channels_last(node, graph):
            _pack_weights(graph, node, target)
            nodes.append(node)
            continue
        x, y = node.inputs[0], node.outputs[0]
        x_type, y_type = graph.type_of(x), graph.type_of(y)
        x_first, y_first = (graph.unique_tensor_name(f"{name}_channels_first") for name in (x, y))
        for name, ttype in ((x_first, x_type), (y_first, y_type)):
            graph.tensors[name] = Tensor(name, TensorType(first_shape(ttype.shape, True), ttype.dtype, ttype.quant))
        nodes.append(Node(graph.unique_node_name(f"{node.name}_to_channels_first"), "Transpose",
                          make_attrs("Transpose", perm=to_first_perm(x_type.rank)), [x], [x_first]))
        nodes.append(Node(node.name, node.op, replace(node.attrs, channels_last=False),
                          [x_first, *node.inputs[1:]], [y_first, *node.outputs[1:]]))
        nodes.append(Node(graph.unique_node_name(f"{node.name}_to_channels_last"), "Transpose",
                          make_attrs("Transpose", perm=to_last_perm(y_type.rank)), [y_first], [y]))
    graph.nodes = nodes
    return changed


BYTES = (DType.INT8, DType.UINT8)


def _dense_as_conv(graph: Graph, node: Node) -> list[Node] | None:
    """The nodes computing QMatMul ``node`` as a 1x1 channels-last QConv, or None when it is not a dense
    layer of 8-bit rows by a constant 8-bit matrix."""
    if node.op != "QMatMul":
        return None
    a, b = (graph.type_of(name) for name in node.inputs[:2])
    if (a.rank != 2 or b.rank != 2 or a.dtype not in BYTES or b.dtype not in BYTES
            or not graph.tensors[node.inputs[1]].is_constant):
        return None
    (rows, depth), columns = a.shape, b.shape[1]
    y = node.outputs[0]
    x4, y4 = (graph.unique_tensor_name(f"{name}_as_conv") for name in (node.inputs[0], y))
    graph.tensors[x4] = Tensor(x4, TensorType((1, rows, 1, depth), a.dtype, a.quant))
    y_type = graph.type_of(y)
    graph.tensors[y4] = Tensor(y4, TensorType((1, rows, 1, columns), y_type.dtype, y_type.quant))
    weights = graph.add_constant(f"{node.inputs[1]}_as_conv",
                                 np.ascontiguousarray(graph.value_of(node.inputs[1]).T)[:, :, None, None])
    requant = {field: getattr(node.attrs, field) for field in
               ("multiplier", "shift", "out_zero_point", "out_dtype", "lo", "hi", "rounding")}
    conv = make_attrs("QConv", kernel_shape=(1, 1), channels_last=True, x_zero_point=node.attrs.a_zero_point,
                      w_zero_point=node.attrs.b_zero_point, **requant)
    shape = (graph.add_constant(f"{node.name}_shape", np.array(s, np.int32)) for s in ((1, rows, 1, depth),
                                                                                        (rows, columns)))
    x_shape, y_shape = shape
    return [Node(graph.unique_node_name(f"{node.name}_rows"), "Reshape", make_attrs("Reshape"),
                 [node.inputs[0], x_shape], [x4]),
            Node(node.name, "QConv", conv, [x4, weights, *node.inputs[2:]], [y4]),
            Node(graph.unique_node_name(f"{node.name}_columns"), "Reshape", make_attrs("Reshape"), [y4, y_shape], [y])]


def dense_layers_as_convs(graph: Graph) -> bool:
    """Every dense QMatMul computed as a 1x1 QConv (module docstring)."""
    nodes: list[Node] = []
    for node in graph.nodes:
        nodes += _dense_as_conv(graph, node) or [node]
    changed = len(nodes) != len(graph.nodes)
    graph.nodes = nodes
    return changed


def lower_for_export(graph: Graph, target=None) -> Graph:
    """The graph code is generated from; ``target`` (exporters.glow.target.Target) lets packers lay weights
    out for its instructions (e.g. 16-bit pairs for Cortex-M's DSP extension)."""
    lowered = copy.deepcopy(graph)
    dense_layers_as_convs(lowered)
    channels_last_layers(lowered, target)
    materialize_outputs(lowered)
    return lowered
