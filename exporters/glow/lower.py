"""The lower stage of the export pipeline (exporters/glow/pipeline.py): prepares an imported graph for grouping
and code generation (on a copy; the user's model is not changed).

- every graph output must be written by a layer: an output that is a constant, a graph input or
  another output gets an explicit Identity copy (the bundle fills the output placeholder itself).
  A constant output keeps its name as the placeholder; the others get a ``_copy`` suffix.
- a channels-last layer (pegasus/ops/layout.py) that an implementation of its op computes channels last
  (``kernels.registry.supports_channels_last``) stays as it is (the pack stage re-lays its constant weights for
  the implementation selected later: exporters/glow/pipeline.py). Any other channels-last layer runs channels
  first between two transposes: correct for every op, at the cost of a buffer and a pass each way.
- a QMatMul of 8-bit rows by a constant 8-bit matrix (a Dense / fully connected layer) is computed as the
  1x1 channels-last QConv it equals (rows as positions, the matrix's columns as output channels): that
  kernel reads each column's weights contiguously along the reduction (SMLAD pairs on Cortex-M, PMADDWD on
  x86) where the matrix product walks across columns. Two Reshapes (aliases: no copy) keep the tensors'
  names and shapes; the result is bit for bit the QMatMul's (the same sums, bias and requantisation).
- float rewrites (``float_rewrites``), the same arithmetic up to float rounding (onnxruntime's optimiser does
  the same): a Mul/Add/Sub by a per-channel constant after a channels-first float Conv folds into its weights
  and bias, and after a BatchNormalization into its scale and B (channels-last convolutions have this done at
  import: pegasus/passes/fold_channel_affine.py); so Caffe's Scale layers vanish and the Relu after them
  joins the convolution (fuse.py). An AveragePool without padding reading a 1x1 stride-1 float Conv (and
  nothing else reading the conv) runs before it: averaging commutes with a per-position linear map whose
  bias the window's weights (summing to 1) keep, and the convolution then computes 1/(kh*kw) of the
  positions (DenseNet's transition layers: 2x2 windows, a quarter of the multiplications).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

import pegasus.exporters.glow.kernels  # noqa: F401  (registers the implementations: which run channels last)
from pegasus.exporters.glow.kernels.registry import supports_channels_last
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ops.facts import has_fact, op_facts
from pegasus.ops.layout import first_shape, to_first_perm, to_last_perm
from pegasus.ops.registry import make_attrs
from pegasus.passes.cse import eliminate_common_subexpressions
from pegasus.passes.fold_channel_affine import scale_per_output, set_input


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


def relay_inputs(graph: Graph, node: Node, arrays: dict[int, np.ndarray], suffix: str) -> None:
    """``node``'s inputs at the positions of ``arrays`` replaced by new constants holding them, named
    ``{input}_{suffix}`` (new constants: a weight another layer shares keeps its own layout there)."""
    for position, array in sorted(arrays.items()):
        name = graph.add_constant(f"{node.inputs[position]}_{suffix}", array)
        node.inputs = [name if i == position else n for i, n in enumerate(node.inputs)]


def channels_last_layers(graph: Graph) -> bool:
    """Channels-last layers that no implementation computes channels last run channels first, between
    transposes (the others' weights are re-laid by the pack stage: exporters/glow/pipeline.py)."""
    changed = False
    nodes: list[Node] = []
    for node in graph.nodes:
        if not getattr(node.attrs, "channels_last", False):
            nodes.append(node)
            continue
        changed = True
        if supports_channels_last(node, graph):
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
    rows_attrs, columns_attrs = make_attrs("Reshape", shape=(1, rows, 1, depth)), make_attrs("Reshape", shape=(rows,
                                                                                                              columns))
    return [Node(graph.unique_node_name(f"{node.name}_rows"), "Reshape", rows_attrs, [node.inputs[0], x_shape], [x4]),
            Node(node.name, "QConv", conv, [x4, weights, *node.inputs[2:]], [y4]),
            Node(graph.unique_node_name(f"{node.name}_columns"), "Reshape", columns_attrs, [y4, y_shape], [y])]


def dense_layers_as_convs(graph: Graph) -> bool:
    """Every dense QMatMul computed as a 1x1 QConv (module docstring)."""
    nodes: list[Node] = []
    for node in graph.nodes:
        nodes += _dense_as_conv(graph, node) or [node]
    changed = len(nodes) != len(graph.nodes)
    graph.nodes = nodes
    return changed


FLOATS = (DType.FLOAT32, DType.FLOAT64)


def channel_vector(value: np.ndarray | None, channels: int, rank: int) -> np.ndarray | None:
    """A float constant as a (channels,) float64 vector when it broadcasts along axis 1 of a rank-``rank``
    tensor only ((C, 1, 1), (1, C, 1, 1) or one value), else None."""
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > rank or rank < 2:
        return None
    if value.size == 1:
        return np.full(channels, value.reshape(()), dtype=np.float64)
    shape = (1,) * (rank - value.ndim) + value.shape
    if shape[1] != channels or any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    return value.reshape(channels).astype(np.float64)


def _affine_after(graph: Graph, node: Node, readers: dict[str, list[Node]]) -> tuple[Node, str, np.ndarray] | None:
    """(the affine node, its kind, its per-channel vector) when ``node``'s float output, no graph output, is
    read by one Mul/Add/Sub by a per-channel constant, which keeps its shape and dtype; else None."""
    out = node.outputs[0]
    ttype = graph.type_of(out)
    found = readers.get(out, [])
    if len(found) != 1 or out in graph.outputs or ttype.dtype not in FLOATS \
            or not has_fact(found[0].op, "channel_affine"):
        return None
    affine = found[0]
    result = graph.type_of(affine.outputs[0])
    if len(affine.inputs) != 2 or (result.shape, result.dtype) != (ttype.shape, ttype.dtype):
        return None
    positions, kind = op_facts(affine.op).channel_affine
    for position in positions:
        if affine.inputs[position] == out and affine.inputs[1 - position] != out:
            vector = channel_vector(graph.value_of(affine.inputs[1 - position]), ttype.shape[1], ttype.rank)
            if vector is not None:
                return affine, kind, vector
    return None


def _constants(graph: Graph, node: Node, positions: tuple[int, ...]) -> list[np.ndarray] | None:
    values = [graph.value_of(node.inputs[i]) if i < len(node.inputs) and node.inputs[i] else None for i in positions]
    return None if any(v is None for v in values) else values


def _fold_into_conv(graph: Graph, conv: Node, kind: str, v: np.ndarray) -> bool:
    """Conv weights (M, C/group, k...) and bias as the affine after it makes them."""
    found = _constants(graph, conv, (1,))
    if conv.attrs.channels_last or found is None:
        return False
    weight = found[0]
    bias = graph.value_of(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(v.size)
    if bias is None:
        return False
    bias = bias.astype(np.float64)
    if kind == "scale":
        set_input(graph, conv, 1, scale_per_output(weight.astype(np.float64), conv, v), weight.dtype)
        bias = bias * v
    else:
        bias = bias + (v if kind == "shift" else -v)
    set_input(graph, conv, 2, bias, weight.dtype)
    return True


def _fold_into_batchnorm(graph: Graph, norm: Node, kind: str, v: np.ndarray) -> bool:
    """BatchNormalization's scale and B (per channel: (x - mean) * scale / sqrt(var + eps) + B)."""
    found = _constants(graph, norm, (1, 2))
    if norm.attrs.training_mode or found is None or any(p.shape != v.shape for p in found):
        return False
    scale, offset = found
    if kind == "scale":
        set_input(graph, norm, 1, scale * v, scale.dtype)
        set_input(graph, norm, 2, offset * v, offset.dtype)
    else:
        set_input(graph, norm, 2, offset + (v if kind == "shift" else -v), offset.dtype)
    return True


AFFINE_FOLDS = {"Conv": _fold_into_conv, "BatchNormalization": _fold_into_batchnorm}


def fold_channel_affines(graph: Graph) -> bool:
    """Each per-channel Mul/Add/Sub after a float Conv or BatchNormalization folded into it (module docstring);
    the layer takes over the affine's output."""
    readers = graph.consumers()
    changed = False
    for node in list(graph.nodes):
        while node.op in AFFINE_FOLDS and len(node.outputs) == 1 and node.outputs[0]:
            found = _affine_after(graph, node, readers)
            if found is None or not AFFINE_FOLDS[node.op](graph, node, *found[1:]):
                break
            affine, source = found[0], node.outputs[0]
            graph.remove_nodes([affine])
            node.outputs[0] = affine.outputs[0]
            del graph.tensors[source]   # the readers of the affine's output stay its readers
            changed = True
    return changed


def _pointwise(conv: Node, graph: Graph) -> bool:
    """A channels-first float Conv with a 1x1 kernel, stride 1 and no padding."""
    weight = graph.tensors[conv.inputs[1]]
    return (conv.op == "Conv" and not conv.attrs.channels_last and graph.type_of(conv.outputs[0]).dtype in FLOATS
            and all(d == 1 for d in weight.type.shape[2:]) and all(s == 1 for s in conv.attrs.strides)
            and not any(conv.attrs.pads) and conv.attrs.auto_pad in ("NOTSET", "VALID"))


def _plain_average(pool: Node) -> bool:
    """An AveragePool whose every window lies inside the input (its weights sum to 1)."""
    attrs = pool.attrs
    return (pool.op == "AveragePool" and not attrs.channels_last and not any(attrs.pads) and not attrs.ceil_mode
            and attrs.auto_pad in ("NOTSET", "VALID") and all(d == 1 for d in attrs.dilations)
            and not any(pool.outputs[1:]))


def pool_before_pointwise_conv(graph: Graph) -> bool:
    """Every plain AveragePool that alone reads a 1x1 Conv computed before it: the pool takes the Conv's place
    in the order, reading the Conv's input, and the Conv takes the pool's, writing the pool's output."""
    readers = graph.consumers()
    changed = False
    nodes = graph.nodes
    for position, conv in enumerate(nodes):
        out = conv.outputs[0] if conv.op == "Conv" and conv.outputs else ""
        found = readers.get(out, []) if out else []
        if len(found) != 1 or out in graph.outputs or not _plain_average(found[0]) or not _pointwise(conv, graph):
            continue
        pool, x, y = found[0], conv.inputs[0], found[0].outputs[0]
        pooled = graph.unique_tensor_name(f"{x}_pooled")
        x_type, y_type = graph.type_of(x), graph.type_of(y)
        graph.tensors[pooled] = Tensor(pooled, TensorType(x_type.shape[:2] + y_type.shape[2:], x_type.dtype))
        del graph.tensors[out]
        pool.inputs, pool.outputs = [x], [pooled]
        conv.inputs, conv.outputs = [pooled, *conv.inputs[1:]], [y]
        later = next(i for i in range(position + 1, len(nodes)) if nodes[i] is pool)
        nodes[position], nodes[later] = pool, conv
        changed = True
    return changed


def float_rewrites(graph: Graph) -> bool:
    """The float rewrites of the module docstring, in place."""
    folded = fold_channel_affines(graph)
    moved = pool_before_pointwise_conv(graph)
    return folded or moved


def lower_for_export(graph: Graph, target=None) -> Graph:
    """The lower stage (exporters/glow/pipeline.py): the graph layers are grouped from, with the registry's
    weight layouts (the pack stage re-lays them later), so the reference interpreter also runs it, its tensors
    named as the code's (``pegasus run --compare-layers``). ``target`` is not read: the rewrites are the same
    for every target."""
    lowered = copy.deepcopy(graph)
    float_rewrites(lowered)
    eliminate_common_subexpressions(lowered)     # the import's merge ran before its BN folding; this one after
    # the float rewrites (which can make two layers equal), and for graphs imported without the passes
    dense_layers_as_convs(lowered)
    channels_last_layers(lowered)
    materialize_outputs(lowered)
    return lowered
