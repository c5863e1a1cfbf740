"""Conv + activation (+ pooling) chains built into one float graph (``Builder``), the layer fusion tests'
cases; GRAPH and FEEDS are all chains as independent branches of one model."""

from __future__ import annotations

import numpy as np

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs

RNG = np.random.default_rng(11)


def act(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


def wts(*shape, dtype=np.float32) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(dtype)


class Builder:
    """A graph of independent chains, each from its own input: Conv then the given layers."""

    def __init__(self):
        self.graph = Graph("fusion")
        self.feeds: dict[str, np.ndarray] = {}

    def tensor(self, name: str, value: np.ndarray | None = None, ttype: TensorType | None = None,
               constant: bool = True) -> str:
        if value is not None and constant:
            self.graph.tensors[name] = Tensor.constant(name, value)
        else:
            self.graph.tensors[name] = Tensor(name, ttype or TensorType.of(value))
            if value is not None:
                self.graph.inputs.append(name)
                self.feeds[name] = value
        return name

    def node(self, prefix: str, op: str, inputs: list[str], outputs: int = 1, **attrs) -> list[str]:
        made = make_attrs(op, **attrs)
        types = get_op(op).infer(made, [self.graph.type_of(n) if n else None for n in inputs])
        names = [self.tensor(f"{prefix}_{op}{len(self.graph.nodes)}_{i}", ttype=t) for i, t in enumerate(types)]
        self.graph.nodes.append(Node(f"{prefix}_{op}{len(self.graph.nodes)}", op, made, inputs, names[:outputs]))
        return names[:outputs]

    def chain(self, key: str, x: np.ndarray, w: np.ndarray, bias: bool, conv: dict,
              layers: list[tuple[str, dict]]) -> str:
        inputs = [self.tensor(f"{key}act", x, constant=False), self.tensor(f"{key}wts", w)]
        if bias:
            inputs.append(self.tensor(f"{key}_b", act(w.shape[0], dtype=w.dtype)))
        (current,) = self.node(key, "Conv", inputs, **conv)
        for op, attrs in layers:
            (current,) = self.node(key, op, [current], **attrs)
        self.graph.outputs.append(current)
        return current


RELU, SIGMOID, TANH = ("Relu", {}), ("Sigmoid", {}), ("Tanh", {})


CLIP = ("Clip", {"min": -0.2, "max": 0.3})


LEAKY = ("LeakyRelu", {"alpha": 0.1})


HARD_SWISH = ("HardSwish", {})


def maxpool(**attrs) -> tuple[str, dict]:
    return "MaxPool", attrs


def avgpool(**attrs) -> tuple[str, dict]:
    return "AveragePool", attrs


# id: (x, w, bias, conv attrs, layers after the Conv)
CHAINS = {
    "lenet-like": (act(1, 3, 16, 16), wts(8, 3, 5, 5), True, {}, [RELU, maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
    "pad-relu-clip-max3x3s2-overlap": (act(1, 4, 13, 15), wts(6, 4, 3, 3), True, {"pads": [1, 1, 1, 1]},
                                       [RELU, CLIP, maxpool(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]),
    "stride-asym-pads-max-ceil": (act(2, 3, 17, 19), wts(5, 3, 3, 3), False, {"strides": [2, 1], "pads": [0, 2, 1, 0]},
                                  [maxpool(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1)]),
    "dilated-leaky-avg-overlap": (act(1, 3, 14, 16), wts(4, 3, 3, 3), True, {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
                                  [LEAKY, avgpool(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])]),
    "group-avg-ceil-include-pad": (act(1, 4, 11, 12), wts(6, 2, 3, 3), True, {"group": 2},
                                   [avgpool(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1,
                                         count_include_pad=1)]),
    "group-avg-ceil-exclude-pad": (act(1, 4, 11, 12), wts(6, 2, 3, 3), True, {"group": 2},
                                   [avgpool(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)]),
    "depthwise-hardswish-max": (act(1, 8, 12, 12), wts(8, 1, 3, 3), True, {"group": 8, "pads": [1, 1, 1, 1]},
                                [HARD_SWISH, maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
    "pool-dilated-strided": (act(1, 2, 15, 21), wts(3, 2, 3, 3), True, {},
                             [RELU, maxpool(kernel_shape=[2, 2], strides=[1, 3], dilations=[2, 2])]),
    "max-stride1-overlap": (act(1, 3, 9, 30), wts(4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]},
                            [SIGMOID, maxpool(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])]),
    "wide-row-avg": (act(1, 2, 6, 70), wts(5, 2, 3, 3), True, {"pads": [1, 1, 1, 1]},
                     [RELU, avgpool(kernel_shape=[2, 2], strides=[2, 2])]),
    # pooled rows ending in a narrower tile (pool.py _pooled_lanes, conv.py narrow_tail): 24 pooled = 16 + 8 under
    # AVX-512, 10 = 4 + 4 + 2 under 4 lanes; the padded one has more convolution outputs than conv_plane takes
    "narrow-tail-pooled": (act(1, 3, 6, 50), wts(5, 3, 3, 3), True, {},
                           [RELU, maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
    "narrow-tail-pooled-short": (act(1, 2, 6, 22), wts(3, 2, 3, 3), True, {},
                                 [maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
    "narrow-tail-pooled-padded": (act(1, 2, 38, 112), wts(4, 2, 3, 3), True, {"pads": [1, 1, 1, 1]},
                                  [RELU, maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
    "window-in-pool-padding": (act(1, 2, 4, 4), wts(3, 2, 3, 3), True, {"pads": [1, 1, 1, 1]},
                               [avgpool(kernel_shape=[3, 3], strides=[3, 3], pads=[2, 2, 2, 2])]),
    "1d-relu-max": (act(1, 3, 40), wts(4, 3, 5), True, {"pads": [2, 2]},
                    [RELU, maxpool(kernel_shape=[3], strides=[2])]),
    "3d-avg": (act(1, 2, 6, 7, 8), wts(3, 2, 3, 3, 3), True, {"pads": [1, 1, 1, 1, 1, 1]},
               [TANH, avgpool(kernel_shape=[2, 2, 2], strides=[2, 2, 2])]),
    "f64-relu-max": (act(1, 3, 10, 10, dtype=np.float64), wts(4, 3, 3, 3, dtype=np.float64), True, {},
                     [RELU, maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
    "act-only-relu-clip": (act(1, 3, 12, 13), wts(7, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}, [RELU, CLIP]),
    "act-only-sigmoid": (act(2, 4, 9, 9), wts(6, 2, 3, 3), False, {"group": 2, "strides": [2, 2]}, [SIGMOID]),
    "act-only-depthwise-hardswish": (act(1, 6, 10, 11), wts(6, 1, 3, 3), True, {"group": 6, "pads": [1, 1, 1, 1]},
                                     [HARD_SWISH]),
    "pool-only": (act(1, 3, 10, 10), wts(4, 3, 3, 3), True, {}, [maxpool(kernel_shape=[2, 2], strides=[2, 2])]),
}


def chains_graph() -> tuple[Graph, dict[str, np.ndarray]]:
    builder = Builder()
    for key, (x, w, bias, conv, layers) in CHAINS.items():
        builder.chain(key, x, w, bias, conv, layers)
    verify(builder.graph)
    return builder.graph, builder.feeds


GRAPH, FEEDS = chains_graph()
