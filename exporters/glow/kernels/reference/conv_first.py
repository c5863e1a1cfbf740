"""The portable implementations of a channels-first float Conv (alone, or heading a fused group without a
pooling), one per way of walking its taps, chosen by the select stage (kernels/strategy.py) in this priority:

- ``conv.pointwise``: a 1x1 Conv without padding on a hosted target (or strided, gathering its input positions
  into the workspace) over the flattened positions, in plane tiles when they fit (conv_plane.py);
- ``conv.row_taps``: a Conv strided along its last axis on a hosted target, each tap's run of that axis gathered
  (conv.py ``row_taps_correlation``);
- ``conv.direct``: register tiles of output channels by a row (conv.py ``Correlation``), over the flattened
  plane when it fits (conv_plane.py ``fits``).

The channels-last, x86 (channel lanes, im2col) and pooling implementations are registered by
conv_channels_last.py, conv_lanes.py, conv_im2col.py and conv_pool.py; ``first_unpooled`` is what they share.
"""

from __future__ import annotations

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, require_dtype
from pegasus.exporters.glow.kernels.reference import conv_plane
from pegasus.exporters.glow.kernels.reference.conv import (
    conv_correlation,
    emit_correlation,
    pointwise_correlation,
    row_taps_bytes,
    row_taps_correlation,
)
from pegasus.exporters.glow.kernels.reference.epilogue import layer_epilogue
from pegasus.exporters.glow.kernels.registry import sizing_context, workspace
from pegasus.exporters.glow.kernels.strategy import Query, Verdict, implementation
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.simd import simd_of
from pegasus.exporters.glow.llvm.windows import pointwise
from pegasus.ops.conv import Conv

KINDS = ("Conv", "Conv+group")


def first_unpooled(query: Query) -> Verdict:
    """A channels-first Conv whose layer ends without a pooling."""
    if query.node.attrs.channels_last:
        return "channels last"
    return True if query.layer.pool is None else "heads a pooling"


def layer_window(k: KernelContext):
    """The layer's convolution window (its weights as the registry lays them)."""
    return Conv.geometry(k.attrs, k.inputs[0].shape, k.inputs[1].shape)


def _pointwise_applies(query: Query) -> Verdict:
    found = first_unpooled(query)
    if found is not True:
        return found
    k = sizing_context(query)
    win = layer_window(k)
    if not pointwise(win):
        return "not 1x1 without padding"
    if len(win.out) > 1 and not query.target.is_cortex_m:
        return True
    return True if row_taps_bytes(k) else "a 1-D or Cortex-M layer with nothing to gather"


def _row_taps_applies(query: Query) -> Verdict:
    found = first_unpooled(query)
    if found is not True:
        return found
    return True if row_taps_bytes(sizing_context(query)) else "not strided along its last axis on a hosted target"


@implementation("conv.pointwise", *KINDS, family="reference", priority=40, when=_pointwise_applies)
def conv_pointwise(k: KernelContext) -> None:
    """A 1x1 Conv over the flattened positions, in plane tiles when they fit."""
    k, epilogue = layer_epilogue(k)
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    simd = simd_of(k.target)
    flat = pointwise_correlation(k, epilogue, layer_window(k))
    cr = conv_plane.as_plane(flat)
    if conv_plane.fits(cr, simd, num, k.target) and conv_plane.pointwise_fits(cr, simd, num):
        conv_plane.emit_plane(k, num, cr, simd)
        return
    emit_correlation(k, num, flat)


@implementation("conv.row_taps", *KINDS, family="reference", priority=20, when=_row_taps_applies)
def conv_row_taps(k: KernelContext) -> None:
    """Each tap's run of the strided last axis gathered, then register tiles over contiguous runs."""
    k, epilogue = layer_epilogue(k)
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    emit_correlation(k, num, row_taps_correlation(k, epilogue, layer_window(k)))


@implementation("conv.direct", *KINDS, family="reference", priority=0, when=first_unpooled)
def conv_direct(k: KernelContext) -> None:
    """Register tiles of output channels by a row of positions, over the flattened plane when it fits."""
    k, epilogue = layer_epilogue(k)
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    simd = simd_of(k.target)
    cr = conv_correlation(k, epilogue)
    if conv_plane.fits(cr, simd, num, k.target):
        conv_plane.emit_plane(k, num, cr, simd)
        return
    emit_correlation(k, num, cr)


@workspace("conv.pointwise", "conv.row_taps")
def gathered_bytes(k: KernelContext) -> int:
    """The input positions (pointwise) or each tap's runs (row taps) gathered."""
    return row_taps_bytes(k)
