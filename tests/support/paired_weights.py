"""8-bit QConv layers whose weights Cortex-M's DSP kernels store as 16-bit pairs, and the check that their bundle
equals the reference interpreter on the host and under QEMU: shared by the cortex_m kernel tests."""

from __future__ import annotations

import numpy as np

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph

RNG = np.random.default_rng(2024)


def conv(name: str, channels: int, outputs: int, kernel: int, stride: int = 1, pad: int = 0, unsigned: bool = False,
         relu: bool = False, size: tuple[int, int] = (6, 5)) -> Case:
    dtype = np.uint8 if unsigned else np.int8
    lo, hi = (0, 255) if unsigned else (-128, 127)
    x = RNG.integers(lo, hi, (1, *size, channels), endpoint=True).astype(dtype)
    w = RNG.integers(lo, hi, (outputs, channels, kernel, kernel), endpoint=True).astype(dtype)
    bias = RNG.integers(-3000, 3000, outputs).astype(np.int32)
    depth = channels * kernel * kernel
    attrs = {"multiplier": tuple(int(v) for v in RNG.integers(1 << 29, 1 << 30, outputs)),
             "shift": (38 + depth.bit_length() // 2,) * outputs, "out_zero_point": 9 if unsigned else -3,
             "out_dtype": "uint8" if unsigned else "int8", "rounding": "tflite", "channels_last": True,
             "pads": (pad,) * 4, "strides": (stride, stride), "x_zero_point": 131 if unsigned else 4,
             "w_zero_point": 120 if unsigned else 0, **({"lo": 9 if unsigned else -3} if relu else {})}
    return Case(name, "QConv", [x, w, bias], attrs, constant=(1, 2))


def assert_bundle_matches(cases, cpu, tmp_path) -> None:
    """The bundle of ``cases`` on ``cpu`` under qemu gives the reference interpreter's outputs bit for bit."""
    graph, feeds = build_graph(cases)
    want = interpreter.run(graph, feeds)
    assert sum(len(np.unique(v)) > 3 for v in want.values()) == len(cases)    # not all clamped
    export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    for name, value in want.items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)
