"""``conv.im2col``: a strided 2-D float Conv on x86-64 with AVX whose output rows are not whole tiles (ResNet-50's
3x3 stride 2 onto 28, 14 and 7 positions ran at 145, 120 and 90 GF/s by rows), every tap's inputs gathered into the
workspace as a (C * taps) x P matrix (conv_plane.py ``im2col_bytes``, ``im2col_correlation``), then plane tiles over
it. Chosen by the select stage between conv_lanes.py's kernel and conv_first.py's row taps (priority 30).
"""

from __future__ import annotations

from pegasus.exporters.glow.kernels.context import KernelContext
from pegasus.exporters.glow.kernels.dtypes import FLOATS, require_dtype
from pegasus.exporters.glow.kernels.reference import conv_plane
from pegasus.exporters.glow.kernels.reference.conv_first import KINDS, first_unpooled, layer_window
from pegasus.exporters.glow.kernels.reference.epilogue import layer_epilogue
from pegasus.exporters.glow.kernels.registry import sizing_context, workspace
from pegasus.exporters.glow.kernels.strategy import Query, Verdict, implementation
from pegasus.exporters.glow.llvm.numeric import Numeric
from pegasus.exporters.glow.llvm.simd import simd_of


def applies(query: Query) -> Verdict:
    """A channels-first Conv without a pooling whose taps fit the im2col workspace on x86-64 with AVX."""
    found = first_unpooled(query)
    if found is not True:
        return found
    k = sizing_context(query)
    return True if conv_plane.im2col_bytes(k, simd_of(k.target)) else "not a strided 2-D x86-64 AVX layer within budget"


@implementation("conv.im2col", *KINDS, family="x86", priority=30, when=applies)
def conv_im2col(k: KernelContext) -> None:
    """Every tap's inputs gathered as a (C * taps) x P matrix, then plane tiles over it."""
    k, epilogue = layer_epilogue(k)
    num = Numeric(k.builder, require_dtype(k, FLOATS))
    simd = simd_of(k.target)
    conv_plane.emit_plane(k, num, conv_plane.im2col_correlation(k, epilogue, layer_window(k), simd), simd)


@workspace("conv.im2col")
def im2col_bytes(k: KernelContext) -> int:
    return conv_plane.im2col_bytes(k, simd_of(k.target))
