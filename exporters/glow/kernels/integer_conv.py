"""The QConv emitter (pegasus/ops/integer.py): computes exactly the bits of the NumPy reference, with the
operands, accumulators and requantisation of integer_dot.py, channels first or channels last
(``channels_last``: pegasus/ops/layout.py), by one of these kernels:

- integer_depthwise.py: a depthwise convolution (one input channel per group) sums its taps straight
  from the input: channels first, each channel's weights held across its positions (small windows);
  channels last, vectors of channels per position;
- integer_im2col.py: every other convolution copies the receptive fields of a few output positions into
  the layer's workspace and takes dot products with the weight rows (SMLAD on Cortex-M with the DSP
  extension, PMADDWD on x86-64).

A channels-last layer runs natively when its weights are constants, re-laid at export for its kernel
(``pack_weights``); one with computed weights runs channels first between transposes
(exporters/glow/lower.py).

Both channels-last kernels stream (``qconv_stream``): the output positions are finished in row-major order,
so the memory planner may write a layer's output over its dying input.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pegasus.exporters.glow.kernels.context import KernelContext, piece
from pegasus.exporters.glow.kernels.conv import weights_known
from pegasus.exporters.glow.kernels.integer_conv_plan import (
    ConvPlan,
    conv_plan,
    pack_weights,
    pointwise_layout,
)
from pegasus.exporters.glow.kernels.integer_depthwise import direct_taps, qconv_depthwise_last, qconv_direct
from pegasus.exporters.glow.kernels.integer_im2col import qconv_im2col
from pegasus.exporters.glow.kernels.registry import Stream, emitter, packer, streams, workspace
from pegasus.exporters.glow.kernels.strategy import Choice, Query


def kernel_of(cp: ConvPlan) -> Callable[[KernelContext, ConvPlan], None]:
    if cp.depthwise and cp.channels_last:
        return qconv_depthwise_last
    return qconv_direct if direct_taps(cp) else qconv_im2col


@packer("QConv")
def pack_qconv(query: Query, choice: Choice) -> dict[int, np.ndarray]:
    """A channels-last layer's weights as its kernels read them (integer_conv_plan.py ``pack_weights``)."""
    node = query.node
    if not node.attrs.channels_last:
        return {}
    return pack_weights(node, query.graph, query.target)


@workspace("QConv")
def qconv_workspace(k: KernelContext) -> int:
    cp = conv_plan(k)
    if kernel_of(cp) is not qconv_im2col or pointwise_layout(cp):     # a pointwise layer needs no buffer
        return 0
    return piece(cp.buffer_bytes)


@streams("QConv")
def qconv_stream(k: KernelContext) -> Stream | None:
    """A channels-last layer of batch 1 streams in both of its kernels (their loop nests, read for this):
    ``qconv_depthwise_last`` loops over the positions in row-major order, each position's channel blocks
    read and written before the next position — on DSP Cortex-M (integer_depthwise_dsp.py) a block of up to
    four positions along a row, whose positions after the second wait in a stack buffer until the block's
    windows are read, so the bytes it writes early lie below every input byte still to read at the planner's
    64-byte-aligned delta; ``qconv_im2col`` copies the receptive fields of a tile of
    consecutive positions into its workspace before writing any output of the tile — but loops over the
    groups outside the positions, so only a layer of one group streams. Its border loads clamp a padding
    tap into the input and discard the value."""
    cp = conv_plan(k)
    kernel = kernel_of(cp)
    if not cp.channels_last or cp.x.shape[0] != 1 or (kernel is qconv_im2col and cp.group != 1):
        return None
    if kernel not in (qconv_depthwise_last, qconv_im2col):
        return None
    return Stream(tuple(cp.axes), cp.xa.channels * cp.x.type.dtype.itemsize,
                  cp.ya.channels * cp.y.type.dtype.itemsize)


@emitter("QConv", channels_last=weights_known)
def qconv(k: KernelContext) -> None:
    cp = conv_plan(k)
    kernel_of(cp)(k, cp)
