"""A QConv fused with the MaxPool that reads it (exporters/glow/fuse.py, kernels/fused/integer_conv_pool.py), compiled
into bundles and compared byte for byte with the reference interpreter running the two layers one after the other.

The geometries are chosen to break the kernel: pooling stride different from its kernel (overlapping and
gapped windows), pads in the pooling and in the convolution (windows crossing the input's padding), ceil_mode,
pooling dilation, odd pooling widths (no pairs of positions), rows of 4q + 1 taps (neighbouring windows
sharing words) at the edges, strided and dilated convolutions, groups,
depthwise (channels last on a DSP CPU: weights stored as 16-bit pairs), 1-D, batch 2, odd output channel
counts; operands int8, uint8 (zero points on both sides), int16 (SMLALD pairs, and single MACs when a zero
point keeps them from pairing); outputs int8, uint8 (an unsigned max) and int16 with clamps; channels first and
channels last. The outputs are kept mostly unsaturated (``chain``). Every case runs on the host, on Cortex-M7
and Cortex-M4 (the SMLAD path) and Cortex-M0 (no DSP extension) under qemu, and is checked to be fused: its
convolution output has no place in memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.fuse import fuse_layers
from pegasus.exporters.glow.lower import lower_for_export
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.channels_last import last
from tests.support.conv_pool_chains import P22, chain, fused_graph
from tests.support.host_runner import run_bundle_host
from tests.support.integer_cases import I8, U8, output_spec

I16 = ("int16", 0)


CASES = [
    chain(P22, "lenet-conv1", (1, 1, 16, 16), (6, 1, 5, 5), ("int8", -128), I8),
    chain(P22, "lenet-conv2", (1, 8, 12, 12), (10, 8, 5, 5), ("int8", 3), I8),
    chain({"kernel_shape": (2, 2), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": 1},
          "neighbours-edges-u8", (1, 3, 11, 12), (4, 3, 5, 5), U8, ("uint8", 119), out_dtype="uint8",
          pads=(2, 2, 1, 1)),
    chain({"kernel_shape": (2, 2), "strides": (1, 1)}, "neighbours-9-taps", (1, 2, 12, 14), (3, 2, 2, 9), ("int8", 1),
          ("int8", -3)),
    chain({"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
          "overlap-pads", (1, 5, 9, 10), (7, 5, 3, 3), ("int8", -9), I8, pads=(1, 1, 1, 1)),
    chain({"kernel_shape": (2, 2), "strides": (3, 3), "pads": (1, 0, 0, 1)},
          "gapped-stride3", (1, 4, 11, 13), (5, 4, 3, 2), I8, I8, pads=(0, 1, 2, 0)),
    chain({"kernel_shape": (2, 2), "strides": (2, 2), "ceil_mode": 1},
          "ceil-strided-dilated", (1, 3, 15, 14), (4, 3, 3, 3), I8, I8, strides=(2, 1), dilations=(2, 2),
          pads=(2, 1, 1, 2)),
    chain({"kernel_shape": (3, 3), "strides": (1, 2)}, "u8-zero-points-odd-pool", (1, 6, 10, 9), (5, 6, 3, 3), U8,
          ("uint8", 121), out_dtype="uint8", out_zero_point=7, per_channel=False),
    chain({"kernel_shape": (2, 2), "strides": (1, 1), "dilations": (2, 2)},
          "pool-dilated", (2, 4, 10, 10), (6, 4, 3, 3), ("int8", 5), ("int8", -2), pads=(1, 1, 1, 1)),
    chain(P22, "i16-i16-to-i16", (1, 4, 9, 9), (5, 4, 3, 3), I16, I16, out_dtype="int16", lo=-20000, hi=20000,
          pads=(1, 1, 1, 1)),
    chain({"kernel_shape": (2, 3), "strides": (2, 2), "pads": (0, 1, 1, 1)},
          "i16-zx-i8", (1, 3, 8, 9), (4, 3, 3, 3), ("int16", 41), I8, out_dtype="int16"),
    chain({"kernel_shape": (2, 2), "strides": (2, 2), "ceil_mode": 1},
          "grouped", (1, 8, 9, 9), (6, 4, 3, 3), I8, I8, group=2, pads=(1, 1, 1, 1)),
    chain(P22, "depthwise", (1, 6, 10, 10), (6, 1, 3, 3), ("int8", -4), I8, group=6, pads=(1, 1, 1, 1)),
    chain({"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
          "depthwise-8ch", (1, 8, 9, 9), (8, 1, 3, 3), ("int8", 6), ("int8", 2), group=8, pads=(1, 1, 1, 1)),
    chain(P22, "relu-clamp-no-bias", (1, 8, 8, 8), (3, 8, 3, 3), ("int8", -1), I8, bias=None, out_zero_point=-5,
          lo=-5),
    chain(P22, "long-runs-24ch", (1, 24, 6, 6), (5, 24, 3, 3), ("int8", 2), I8, pads=(1, 1, 1, 1)),
    chain({"kernel_shape": (2, 2), "strides": (2, 2), "pads": (1, 1, 0, 0)},
          "odd-channels-7", (1, 7, 7, 7), (3, 7, 2, 2), ("uint8", 100), ("uint8", 130), out_dtype="uint8"),
    chain({"kernel_shape": (3,), "strides": (2,)}, "1d", (2, 6, 23), (4, 6, 5), ("int8", -7), I8, pads=(2, 1)),
]
ALL = [(case, pool) for case, pool in CASES] + [(last(case), pool) for case, pool in CASES]


def ids(cases) -> list[str]:
    return [case.id for case, _ in cases]


@pytest.fixture(scope="module")
def chains():
    graph, feeds = fused_graph(ALL)
    return graph, feeds, interpreter.run(graph, feeds)


def test_every_chain_is_fused(chains):
    graph = lower_for_export(chains[0])
    fused = [layer for layer in fuse_layers(graph) if layer.fused]
    assert [(layer.nodes[0].op, layer.nodes[-1].op) for layer in fused] == [("QConv", "MaxPool")] * len(ALL)


def _check(outputs: dict, expected: dict) -> None:
    for index, (case, _) in enumerate(ALL):
        name = f"c{index}_pool"
        assert outputs[name].dtype == expected[name].dtype, case.id
        np.testing.assert_array_equal(outputs[name], expected[name], err_msg=case.id)


def test_fused_chains_match_reference_on_host(chains, tmp_path):
    graph, feeds, expected = chains
    _check(run_bundle_host(graph, feeds, workdir=tmp_path), expected)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m0"])
def test_fused_chains_match_reference_on_cortex_m(cpu, chains, tmp_path):
    graph, feeds, expected = chains
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    conv_outputs = [f"c{index}_y0" for index in range(len(ALL))]
    assert not any(name in result.plan.locations for name in conv_outputs)   # never stored
    _check(toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, output_spec(graph)), expected)
