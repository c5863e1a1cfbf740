"""Quantizing a graph under a scheme (calibration, the table, lowering to integers), exporting it for a
target and running the bundle, bit-exact against ``pegasus inference --dtype quantized``."""

from __future__ import annotations

import numpy as np

from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir import serialize
from pegasus.ir.graph import Graph
from pegasus.quantized.params import QuantTable
from pegasus.quantizers.assign import build_table
from pegasus.quantizers.calibrate import calibrate
from pegasus.quantizers.schemes import Scheme
from tests.support import toolchains
from tests.support.model_bundles import output_spec

SCHEMES = {"u8": ("asymmetric_affine", "uint8"), "dfp8": ("dynamic_fixed_point", "int8"),
           "pc8": ("perchannel_symmetric_affine", "int8"), "dfp16": ("dynamic_fixed_point", "int16")}


def quantize(graph: Graph, samples: list[dict[str, np.ndarray]], quantizer: str, qtype: str,
             custom: dict[str, str] | None = None) -> QuantTable:
    scheme = Scheme.of(quantizer, qtype)
    calibration = calibrate(graph, samples, total=len(samples), batch_size=len(samples), signed=scheme.qtype != "u8",
                            progress=False)
    return build_table(graph, calibration.ranges, scheme, algorithm="normal", digest=serialize.graph_digest(graph),
                       custom=custom)


def assert_bit_exact(actual: dict, expected: dict) -> None:
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), (
            f"{name}: {np.count_nonzero(got != want)} of {want.size} values differ; max |diff| "
            f"{np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))}")


def run_on(key: str, folder, graph: Graph, feeds) -> dict[str, np.ndarray]:
    spec = output_spec(graph)
    if key == "host":
        return toolchains.run_host(folder, "net", feeds, spec)
    if key == "aarch64":
        return toolchains.run_aarch64(folder, "net", feeds, spec)
    return toolchains.run_cortex_m(folder, "net", key, feeds, spec)


def export_for(key: str, graph: Graph, folder) -> None:
    arch, cpu = {"host": (None, None), "aarch64": ("aarch64", "cortex-a53")}.get(key, ("arm", key))
    export_bundle(graph, folder, "net", resolve_target(arch, cpu))
