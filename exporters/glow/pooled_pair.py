"""Two integer convolutions, each fused with its max pooling, computed as one layer over rows of 16-bit centred
inputs: LeNet's conv1 + pool1 -> conv2 + pool2 on Cortex-M with the DSP extension.

Why. SMLAD multiplies 16-bit pairs, so 8-bit activations are unpacked (a load and two SXTB16 per four values)
each time a kernel reads them — and a 5x5 convolution over 20 channels reads each value 25 times per pair of
output channels. Unpacked once into RAM, the tensor T between the two layers would take twice its bytes, more
than the two layers' whole plan (LeNet int8: T is 2,880 B of 3,680). Streamed, T never exists whole: output row
r of the second convolution B needs T's rows r * stride .. r * stride + KH - 1 only, so the layer keeps the last
KH rows of T in a window (the rows in order; the older ones dropped by moving the others down) as int16
``t - zt`` channels last, where each kernel row of B is one run of KW * C contiguous halfwords that LDRD loads
two pairs at a time. A row of T is computed once, just before the first output row of B that reads it, by the
first convolution A over a window of its own: the rows of A's input X it needs, unpacked the same way
(``x - zx``). Both weights are integer_halves' halfword pairs of output channels (256 w1 + w0: one SMLAD takes
four MACs' weights).

A stage (``StagePlan``) is one convolution with its pooling over such a window (``ring_rows`` rows). When it can
hold a pooled row's whole input (``together``: A's, KH + (pool - 1) * stride rows of X) the max of each pooling
window is taken over the raw sums and requantised once (as integer_conv_pool's ``raw_max``: the multipliers are
non-negative); B's holds KH rows only, so B requantises the sums of one convolution row at a time and keeps the
max in its output. The kernel is kernels/cortex_m/integer_pooled_pair.py; its sums are the unfused layers'
integers, so the bundle's output is bit for bit theirs.

The pair is formed (``pair_layers``) when ``pair_plan``'s conditions hold and the layer's bytes — the rings,
X when it lives in the activations, the output Y — stay within what the two layers take one after the other,
max(X + T, T + Y): LeNet int8 with integer I/O (X is the placeholder) takes 2,416 + 352 + 800 B where the
layers took 3,680; with float I/O X is the quantized input in the activations and the layers stay apart, and
so with ``--reuse-input-memory`` (``inputs_reused``: X's bytes are the layers' to reuse).
The weights are laid for the kernel when the pair is formed, so an export without fusion keeps the imported
bytes its unfused kernels read; the packers leave both layers' weights as they are (``pair_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from pegasus.exporters.glow.fuse import Layer, headed_layer
from pegasus.exporters.glow.kernels.context import piece
from pegasus.exporters.glow.kernels.cortex_m import integer_halves
from pegasus.exporters.glow.target import CPUS
from pegasus.ir.dtypes import DType
from pegasus.ir.graph import Graph, Node
from pegasus.ops.conv import Conv
from pegasus.ops.fixedpoint import integer_range
from pegasus.ops.integer import clamp_bounds
from pegasus.ops.layout import first_shape
from pegasus.ops.pool import MaxPool

BYTES = (DType.INT8, DType.UINT8)
#: bytes a kernel row may read past a window's last row (taps whose weights are the zeros padding a run)
TAIL = 8
#: LDRD's immediate offsets reach 1,020 bytes: the positions of a group lie within
LDRD_REACH = 1020


@dataclass(frozen=True)
class StagePlan:
    """One convolution + max pooling over a window of 16-bit centred input rows (channels last)."""

    channels: int                   # C: input channels
    width: int                      # W: input width
    kernel: tuple[int, int]         # (KH, KW)
    strides: tuple[int, int]        # the convolution's (sy, sx)
    pool: tuple[int, int]           # the pooling's kernel, equal to its strides
    pooled: tuple[int, int]         # the pooled output's (rows, columns)
    out_channels: int               # M (even)
    x_zero: int                     # the input's zero point: the window holds x - x_zero
    x_range: tuple[int, int]        # the least and largest x - x_zero (a ReLU's output: from 0)
    together: bool                  # the window holds a pooled row's whole input (module docstring)

    @property
    def x_magnitude(self) -> int:
        return max(abs(v) for v in self.x_range)

    @property
    def wide(self) -> bool:
        """Whether every position's run starts on a word (LDRD, groups of four taps), else LDR, groups of two."""
        return self.strides[1] * self.channels % 2 == 0 and self.width * self.channels % 2 == 0

    @property
    def step(self) -> int:
        return 4 if self.wide else 2

    @property
    def run(self) -> int:
        """Taps of one kernel row: contiguous in the window."""
        return self.kernel[1] * self.channels

    @property
    def stored_run(self) -> int:
        """A kernel row's halfwords as stored: the run padded with zero weights to whole groups."""
        return -(-self.run // self.step) * self.step

    @property
    def row_halves(self) -> int:
        return self.width * self.channels

    @property
    def ring_rows(self) -> int:
        return self.kernel[0] + ((self.pool[0] - 1) * self.strides[0] if self.together else 0)

    @property
    def ring_bytes(self) -> int:
        return piece(self.ring_rows * self.row_halves * 2 + TAIL)

    @property
    def weight_shape(self) -> tuple[int, int, int]:
        """The laid weights: halfword pairs of channels (M / 2, KH, stored_run)."""
        return (self.out_channels // 2, self.kernel[0], self.stored_run)

    @property
    def positions(self) -> int:
        """Most positions a group sums at once: their sums, the group's operands and two pointers fill the 14
        registers (LDRD: 4 weight words and 2 inputs; LDR: 2 and 1)."""
        return 3 if self.wide else 4

    def lay(self, w: np.ndarray) -> np.ndarray | None:
        """Weights (M, C, KH, KW) int8 as ``weight_shape`` int16 halfwords, None when they cannot be
        (integer_halves)."""
        m, kh = self.out_channels, self.kernel[0]
        if w.dtype != np.int8 or w.shape != (m, self.channels, *self.kernel):
            return None
        rows = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(m, kh, self.run)
        if not integer_halves.halves_within(rows.reshape(m, -1), *self.x_range):
            return None
        padded = np.zeros((m, kh, self.stored_run), np.int8)
        padded[:, :, :self.run] = rows
        return np.ascontiguousarray(integer_halves.halfwords(padded.reshape(m, -1)).reshape(self.weight_shape))


def _stage(graph: Graph, conv: Node, pool: Node, together: bool, producers: dict[str, Node]) -> StagePlan | None:
    """``conv`` + ``pool`` as a stage, or None when the kernel cannot compute them."""
    attrs = conv.attrs
    x, y = graph.type_of(conv.inputs[0]), graph.type_of(pool.outputs[0])
    last = bool(attrs.channels_last)
    bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
    if (x.rank != 4 or x.shape[0] != 1 or x.dtype not in BYTES or y.dtype not in BYTES or attrs.group != 1
            or attrs.w_zero_point or not graph.tensors[conv.inputs[1]].is_constant
            or bool(pool.attrs.channels_last) != last
            or (bias and graph.type_of(bias).dtype is not DType.INT32)
            or any(int(m) < 0 for m in attrs.multiplier) or any(name for name in pool.outputs[1:])):
        return None
    channels, _, width = first_shape(x.shape, last)[1:]
    w = graph.type_of(conv.inputs[1])
    m = graph.type_of(conv.outputs[0]).shape[-1 if last else 1]
    if w.rank != 4 or m % 2 or w.dtype is not DType.INT8 or w.shape[:2] != (m, channels):
        return None     # the kernel reads (M, C, KH, KW) int8 weights, an even number of channels
    kernel = tuple(int(k) for k in w.shape[2:])
    win = Conv.geometry(attrs, first_shape(x.shape, last), (m, channels, *kernel))
    if (any(win.pads_begin) or any(win.pads_end) or any(d != 1 for d in win.dilations)
            or win.strides[0] > kernel[0]):    # every input row read: the window fills row after row
        return None
    pool_win = MaxPool.geometry(pool.attrs, (1, m, *win.out))
    pooled = tuple(pool_win.out)
    if (any(pool_win.pads_begin) or any(pool_win.pads_end) or tuple(pool_win.kernel) != tuple(pool_win.strides)
            or any(d != 1 for d in pool_win.dilations)
            or any(n * k > o for n, k, o in zip(pooled, pool_win.kernel, win.out))):
        return None
    lo, hi = _input_range(graph, conv.inputs[0], producers)
    zero = int(attrs.x_zero_point)
    stage = StagePlan(channels, width, kernel, tuple(win.strides), tuple(pool_win.kernel), pooled, m, zero,
                      (lo - zero, hi - zero), together)
    if stage.together and stage.pool[0] * stage.pool[1] > stage.positions:    # a group is a whole window
        stage = replace(stage, together=False)
    reach = (stage.positions - 1) * stage.strides[1] * channels * 2 + stage.stored_run * 2
    return stage if reach <= LDRD_REACH else None


def _input_range(graph: Graph, name: str, producers: dict[str, Node]) -> tuple[int, int]:
    """The least and largest value of 8-bit tensor ``name``: the clamp of the requantising node writing it
    (through a max pooling: a fused ReLU narrows it), else its type's range."""
    node = producers.get(name)
    if node is not None and node.op == "MaxPool":
        node = producers.get(node.inputs[0])
    if node is not None and hasattr(node.attrs, "out_zero_point"):
        return clamp_bounds(node.attrs)
    return integer_range(graph.type_of(name).dtype.numpy)


def _dsp_cortex_m(target) -> bool:
    info = CPUS.get(getattr(target, "cpu", ""))
    return info is not None and info.has_dsp and target.is_cortex_m


@dataclass(frozen=True)
class PairPlan:
    first: StagePlan
    second: StagePlan
    a: Node
    pool_a: Node
    b: Node
    pool_b: Node

    @property
    def workspace_bytes(self) -> int:
        return self.second.ring_bytes + self.first.ring_bytes


def pair_plan(graph: Graph, b: Node, target, inputs_reused: bool = False) -> PairPlan | None:
    """The pair whose second convolution is ``b`` on ``target`` (module docstring), else None; ``pair_of`` checks
    the weights' values. ``inputs_reused``: the export plans the graph inputs' bytes for other tensors too
    (``--reuse-input-memory``), so X counts in the bytes either way."""
    if b.op != "QConv" or not _dsp_cortex_m(target):
        return None
    producers, t_name = graph.producers(), b.inputs[0]
    pool_a = producers.get(t_name)
    if (pool_a is None or pool_a.op != "MaxPool" or t_name in graph.outputs
            or len(graph.consumers().get(t_name, [])) != 1):
        return None
    a = producers.get(pool_a.inputs[0])
    if a is None or a.op != "QConv" or bool(a.attrs.channels_last) != bool(b.attrs.channels_last):
        return None
    layer_a, layer_b = headed_layer(graph, a, target), headed_layer(graph, b, target)
    if (layer_a is None or layer_b is None or layer_a.nodes != [a, pool_a] or len(layer_b.nodes) != 2
            or layer_b.nodes[1].op != "MaxPool"):
        return None
    pool_b = layer_b.nodes[1]
    first, second = _stage(graph, a, pool_a, True, producers), _stage(graph, b, pool_b, False, producers)
    if first is None or second is None:
        return None
    plan = PairPlan(first, second, a, pool_a, b, pool_b)
    x, t, y = a.inputs[0], graph.type_of(t_name), graph.type_of(pool_b.outputs[0])
    free = graph.tensors[x].is_constant or (x in graph.inputs and not inputs_reused)
    x_bytes = 0 if free else graph.type_of(x).nbytes
    if x_bytes + plan.workspace_bytes + y.nbytes > max(x_bytes + t.nbytes, t.nbytes + y.nbytes):
        return None
    return plan


def pair_of(graph: Graph, node: Node, target, inputs_reused: bool = False
            ) -> tuple[PairPlan, np.ndarray, np.ndarray] | None:
    """(the pair, A's laid weights, B's) when QConv ``node`` is either convolution of a pair whose weights can be
    laid, else None (``inputs_reused``: ``pair_plan``'s)."""
    if node.op != "QConv" or not _dsp_cortex_m(target):
        return None
    plan = pair_plan(graph, node, target, inputs_reused)
    if plan is None:    # the first convolution: the pair is its pooling's reader's
        consumers = graph.consumers()
        readers = consumers.get(node.outputs[0], [])
        pool = readers[0] if len(readers) == 1 and readers[0].op == "MaxPool" else None
        second = consumers.get(pool.outputs[0], []) if pool is not None else []
        plan = pair_plan(graph, second[0], target, inputs_reused) if len(second) == 1 else None
        if plan is None or plan.a is not node:
            return None
    first = plan.first.lay(graph.value_of(plan.a.inputs[1]))
    second = plan.second.lay(graph.value_of(plan.b.inputs[1]))
    return None if first is None or second is None else (plan, first, second)


@dataclass
class PooledPair(Layer):
    """Two QConv + MaxPool groups computed as one layer (module docstring): ``nodes`` A, A's pooling, B, B's
    pooling."""

    plan: PairPlan | None = field(default=None)

    @property
    def inputs(self) -> list[str]:
        a, b = self.nodes[0], self.nodes[2]
        return a.inputs + b.inputs[1:]

    @property
    def outputs(self) -> list[str]:
        return self.nodes[-1].outputs[:1]

    @property
    def op(self) -> str:
        return "pair_" + "_".join(node.op for node in self.nodes)

    @property
    def kind(self) -> str:
        return "PooledPair"

    def workspace_bytes(self) -> int:
        return self.plan.workspace_bytes


def pair_layers(graph: Graph, layers: list[Layer], target, inputs_reused: bool = False) -> list[Layer]:
    """``layers`` with each QConv + MaxPool group followed by the group reading its output replaced by their
    ``PooledPair`` where ``pair_of`` allows it (the pack stage then lays both weights for the pair's kernel:
    schedule/blocks.py)."""
    out: list[Layer] = []
    for layer in layers:
        previous = out[-1] if out else None
        if type(layer) is Layer and type(previous) is Layer and len(layer.nodes) == 2 and len(previous.nodes) == 2:
            found = pair_of(graph, layer.nodes[0], target, inputs_reused)
            if found is not None and previous.nodes == [found[0].a, found[0].pool_a]:
                out[-1] = PooledPair(previous.nodes + layer.nodes, found[0])
                continue
        out.append(layer)
    return out
