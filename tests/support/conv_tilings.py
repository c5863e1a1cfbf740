"""Conv and pooling kernels under every register tiling (forced through the target's SIMD description) and
in float16, in host bundles: shared by the float kernel and fusion tests."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from pegasus.exporters.glow.kernels.fused import conv_pool as conv_pool_kernels
from pegasus.exporters.glow.kernels.reference import conv as conv_kernels
from pegasus.exporters.glow.kernels.reference import linear as linear_kernels
from pegasus.exporters.glow.kernels.reference import pool as pool_kernels
from pegasus.exporters.glow.llvm.simd import Simd
from tests.support.bundle_cases import Case, run_cases

#: register files to tile for (None: the host target's own, SSE2 on x86-64)
TILINGS = {"host": None, "avx512": Simd(64, 32), "scalar-fpu": Simd(4, 32), "helium": Simd(16, 8)}


@contextmanager
def tiling(simd: Simd | None):
    """Make the dense kernels tile for ``simd`` whatever the target (the IR stays valid for any)."""
    if simd is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for module in (conv_kernels, linear_kernels, pool_kernels, conv_pool_kernels):
            patch.setattr(module, "simd_of", lambda target: simd)
        yield


def run_tiled(cases: list[Case], tmp_path_factory, name: str, simd: Simd | None) -> dict:
    with tiling(simd):
        return run_cases(cases, tmp_path_factory.mktemp(name))


def half_precision(case: Case) -> Case:
    """float16 in, float16 out: sums in float32 in another order than NumPy's, rounded once to float16."""
    case.rtol, case.atol = 2e-3, 2e-3
    return case
