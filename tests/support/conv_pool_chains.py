"""QConv + MaxPool chains the integer conv-pool fusion tests build, reused by the halfword-pair tests."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor
from pegasus.ir.verify import verify
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.support.bundle_cases import Case, add_layer
from tests.support.integer_cases import RNG, conv

P22 = {"kernel_shape": (2, 2), "strides": (2, 2)}


def chain(pool: dict, *args, **kwargs) -> tuple[Case, dict]:
    """(a QConv case of ``conv(*args, **kwargs)``, the MaxPool attributes): its bias within a few sums' spread
    and its gain lowered until at most a fifth of the pooled outputs saturate, so the outputs tell the
    convolution values apart."""
    for gain in (1.0, 1 / 4, 1 / 16, 1 / 64, 1 / 256):
        case = conv(*args, **kwargs, gain=gain)
        if len(case.inputs) > 2:
            bound = int(np.prod(case.inputs[1].shape[1:])) * 64
            case.inputs[2] = RNG.integers(-bound, bound, case.inputs[2].shape).astype(case.inputs[2].dtype)
        graph, feeds = fused_graph([(case, pool)])
        pooled = interpreter.run(graph, feeds)["c0_pool"]
        lo, hi = integer_range(pooled.dtype.name)
        if np.mean((pooled == lo) | (pooled == hi)) <= 0.2:
            break
    return case, pool


def fused_graph(cases) -> tuple[Graph, dict[str, np.ndarray]]:
    """One QConv -> MaxPool chain per case; the pooled tensors are the graph's outputs."""
    graph, feeds = Graph("conv_pool"), {}
    for index, (case, pool) in enumerate(cases):
        add_layer(graph, index, case, feeds)
        conv_out = f"c{index}_y0"
        graph.outputs.remove(conv_out)
        attrs = make_attrs("MaxPool", **pool, channels_last=bool(case.attrs.get("channels_last")))
        pooled = get_op("MaxPool").infer(attrs, [graph.type_of(conv_out)])[0]
        graph.tensors[f"c{index}_pool"] = Tensor(f"c{index}_pool", pooled)
        graph.outputs.append(f"c{index}_pool")
        graph.nodes.append(Node(f"c{index}_MaxPool", "MaxPool", attrs, [conv_out], [f"c{index}_pool", ""]))
    verify(graph)
    return graph, feeds
