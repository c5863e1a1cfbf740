"""The QConv emitter (pegasus/ops/integer.py): computes exactly the bits of the NumPy reference, with the
operands, accumulators and requantisation of integer_dot.py, by one of two kernels:

- integer_depthwise.py: a depthwise convolution (one input channel per group, a small window) sums its
  taps straight from the input, each channel's weights held across its positions;
- integer_im2col.py: every other convolution copies the receptive fields of a few output positions into
  the layer's workspace and takes dot products with the weight rows (SMLAD on Cortex-M with the DSP
  extension, PMADDWD on x86-64).
"""

from __future__ import annotations

from pegasus.exporters.glow.kernels.conv import axes_of
from pegasus.exporters.glow.kernels.integer_conv_plan import conv_plan
from pegasus.exporters.glow.kernels.integer_depthwise import direct_taps, qconv_direct
from pegasus.exporters.glow.kernels.integer_im2col import qconv_im2col
from pegasus.exporters.glow.kernels.registry import KernelContext, emitter, piece, workspace
from pegasus.ops.conv import Conv


@workspace("QConv")
def qconv_workspace(k: KernelContext) -> int:
    cp = conv_plan(k)
    return 0 if direct_taps(cp) else piece(cp.buffer_bytes)


@emitter("QConv")
def qconv(k: KernelContext) -> None:
    cp = conv_plan(k)
    win = Conv.geometry(k.attrs, cp.x.shape, cp.w.shape)
    axes = axes_of(win, cp.x.shape[2:])
    (qconv_direct if direct_taps(cp) else qconv_im2col)(k, cp, axes)
