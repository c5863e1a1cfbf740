"""The QConv implementations (pegasus/ops/integer.py): each computes exactly the bits of the NumPy reference, with
the operands, accumulators and requantisation of integer_dot.py, channels first or channels last
(``channels_last``: pegasus/ops/layout.py). The select stage (kernels/strategy.py) takes the first that applies:

- ``qconv.depthwise_dsp`` (integer_depthwise_dsp.py, Cortex-M with the DSP extension): a channels-last depthwise
  convolution of 8-bit operands and a multiple of four channels, in blocks of positions along a row;
- ``qconv.depthwise_last`` (integer_depthwise.py): a channels-last depthwise convolution (one input channel per
  group) sums vectors of channels per position straight from the input;
- ``qconv.direct`` (integer_depthwise.py): a channels-first depthwise convolution with a small window
  (``direct_taps``) holds each channel's weights across its positions;
- ``qconv.im2col`` (integer_im2col.py): every other convolution copies the receptive fields of a few output
  positions into the layer's workspace and takes dot products with the weight rows (SMLAD on Cortex-M with the
  DSP extension, PMADDWD on x86-64).

A channels-last layer runs natively when its weights are constants, re-laid by the pack stage for its kernel
(``pack_weights``) as the select stage decided (``qconv_params``: the choice's "weights", which ``conv_plan``
reads); one with computed weights runs channels first between transposes (exporters/glow/lower.py).

Both channels-last kernels stream (``depthwise_stream``, ``im2col_stream``): the output positions are finished in
row-major order, so the memory planner may write a layer's output over its dying input.
"""

from __future__ import annotations

import numpy as np

from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.integer.integer_conv_plan import (
    BYTES,
    Activation,
    conv_plan,
    depthwise,
    pointwise_layout,
    weight_shape,
)
from pegasus.exporters.glow.kernels.integer.integer_conv_weights import pack_weights, weights_layout, weights_table
from pegasus.exporters.glow.kernels.integer.integer_depthwise import direct_taps, qconv_depthwise_last, qconv_direct
from pegasus.exporters.glow.kernels.integer.integer_im2col import qconv_im2col
from pegasus.exporters.glow.kernels.reference.conv import weights_known
from pegasus.exporters.glow.kernels.registry import (
    Stream,
    channels_last_ops,
    packer,
    sizing_context,
    streams,
    workspace,
)
from pegasus.exporters.glow.kernels.strategy import Choice, Query, Verdict, implementation
from pegasus.exporters.glow.llvm.windows import axes_of
from pegasus.ops.conv import Conv
from pegasus.ops.layout import first_shape

IMPLEMENTATIONS = ("qconv.depthwise_last", "qconv.direct", "qconv.im2col")
channels_last_ops("QConv", supports=weights_known)


def _depthwise(query: Query) -> bool:
    """One input channel per group (the input's channels, whatever the weights' layout)."""
    node = query.node
    x = query.type_of(node.inputs[0])
    channels = x.shape[-1] if node.attrs.channels_last else x.shape[1]
    return depthwise(node.attrs.group, channels // node.attrs.group)


def depthwise_last_applies(query: Query) -> Verdict:
    if not query.node.attrs.channels_last:
        return "channels first"
    return True if _depthwise(query) else "not depthwise"


def direct_applies(query: Query) -> Verdict:
    """A channels-first depthwise layer of at most ``DIRECT_TAPS`` taps (its weights are never re-laid)."""
    if query.node.attrs.channels_last or not _depthwise(query):
        return "not a channels-first depthwise layer"
    return True if direct_taps(conv_plan(sizing_context(query))) else "a window of too many taps"


def qconv_params(query: Query) -> dict[str, str | None]:
    """How the layer's weights are stored and what replaces its biases (integer_conv_weights.py ``weights_layout``,
    ``weights_table``; channels first: as imported)."""
    node, pooled = query.node, query.layer.pool is not None
    if not node.attrs.channels_last:
        return {"weights": BYTES, "table": None}
    layout = weights_layout(node, query.graph, query.target, pooled)
    return {"weights": layout, "table": weights_table(node, query.graph, layout, pooled)}


@packer(*IMPLEMENTATIONS)
def pack_qconv(query: Query, choice: Choice) -> dict[int, np.ndarray]:
    """A channels-last layer's weights as its kernels read them (integer_conv_weights.py ``pack_weights``), laid out
    as the choice says."""
    node = query.node
    if not node.attrs.channels_last:
        return {}
    return pack_weights(node, query.graph, query.target, query.layer.pool is not None, choice.param("weights"),
                        choice.param("table"))


@workspace("qconv.im2col")
def im2col_workspace(k: KernelContext) -> int:
    cp = conv_plan(k)
    return 0 if pointwise_layout(cp) else piece(cp.buffer_bytes)     # a pointwise layer needs no buffer


def _stream(k: KernelContext) -> Stream | None:
    """A channels-last layer of batch 1 walks its positions in row-major order: its window's geometry, which the
    weights' layout does not change (``weight_shape``), so the stream holds for the weights as imported or laid."""
    x, y, group = k.inputs[0], k.outputs[0], k.attrs.group
    if not k.attrs.channels_last or x.shape[0] != 1:
        return None
    xa, ya = Activation(x, True), Activation(y, True)
    w_shape = weight_shape(k.inputs[1].shape, True, depthwise(group, xa.channels // group))
    win = Conv.geometry(k.attrs, first_shape(x.shape, True), w_shape)
    return Stream(tuple(axes_of(win, xa.sizes)), xa.channels * x.type.dtype.itemsize,
                  ya.channels * y.type.dtype.itemsize)


@streams("qconv.depthwise_last")
def depthwise_stream(k: KernelContext) -> Stream | None:
    """A layer of batch 1 streams: ``qconv_depthwise_last`` (its loop nest, read for this) loops over the positions
    in row-major order, each position's channel blocks read and written before the next position — on DSP
    Cortex-M (integer_depthwise_dsp.py) a block of up to four positions along a row, whose positions after the
    second wait in a stack buffer until the block's windows are read, so the bytes it writes early lie below
    every input byte still to read at the planner's 64-byte-aligned delta."""
    return _stream(k)


@streams("qconv.im2col")
def im2col_stream(k: KernelContext) -> Stream | None:
    """A channels-last layer of batch 1 and one group streams: ``qconv_im2col`` copies the receptive fields of a
    tile of consecutive positions into its workspace before writing any output of the tile — but loops over the
    groups outside the positions, so only a layer of one group streams. Its border loads clamp a padding tap
    into the input and discard the value."""
    return _stream(k) if k.attrs.group == 1 else None


@implementation("qconv.depthwise_last", "QConv", family="integer", priority=20, when=depthwise_last_applies,
                params=qconv_params)
def depthwise_last(k: KernelContext) -> None:
    """A channels-last depthwise QConv: vectors of channels per position, straight from the input."""
    qconv_depthwise_last(k, conv_plan(k))


@implementation("qconv.direct", "QConv", family="integer", priority=10, when=direct_applies,
                params=qconv_params)
def direct(k: KernelContext) -> None:
    """A channels-first depthwise QConv of a small window: each channel's weights held across its positions."""
    qconv_direct(k, conv_plan(k))


@implementation("qconv.im2col", "QConv", family="integer", priority=0,
                params=qconv_params)
def im2col(k: KernelContext) -> None:
    """Any QConv: receptive fields of a tile of positions copied to the workspace, dot products with weight rows."""
    qconv_im2col(k, conv_plan(k))
