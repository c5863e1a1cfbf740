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
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pegasus.exporters.glow.kernels.conv import weights_known
from pegasus.exporters.glow.kernels.integer_conv_plan import ConvPlan, conv_plan, pack_weights
from pegasus.exporters.glow.kernels.integer_depthwise import direct_taps, qconv_depthwise_last, qconv_direct
from pegasus.exporters.glow.kernels.integer_im2col import qconv_im2col
from pegasus.exporters.glow.kernels.registry import KernelContext, emitter, packer, piece, workspace
from pegasus.ir.graph import Graph, Node


def kernel_of(cp: ConvPlan) -> Callable[[KernelContext, ConvPlan], None]:
    if cp.depthwise and cp.channels_last:
        return qconv_depthwise_last
    return qconv_direct if direct_taps(cp) else qconv_im2col


@packer("QConv")
def pack_qconv(node: Node, graph: Graph) -> dict[int, np.ndarray]:
    return pack_weights(node, graph)


@workspace("QConv")
def qconv_workspace(k: KernelContext) -> int:
    cp = conv_plan(k)
    return piece(cp.buffer_bytes) if kernel_of(cp) is qconv_im2col else 0


@emitter("QConv", channels_last=weights_known)
def qconv(k: KernelContext) -> None:
    cp = conv_plan(k)
    kernel_of(cp)(k, cp)
