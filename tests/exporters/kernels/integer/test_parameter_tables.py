"""Per-channel requantisation tables live in the weights (kernels/parameters.py), so layers of one shape share
one function: checked on the object (one function for three convolutions, one for two depthwise layers, no
table left in its read-only data), and by running the bundles, whose layers each need their own multipliers,
against the reference interpreter bit for bit on Cortex-M and the host. Also the rule codegen._shared merges by:
a function is reused only by calls whose arguments it promises no more ``noalias`` than they keep.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from llvmlite import ir

from pegasus.exporters.glow.codegen import _shared
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.runtime import interpreter
from tests.support import toolchains
from tests.support.bundle_cases import Case, build_graph
from tests.support.paired_weights import conv

RNG = np.random.default_rng(77)


def depthwise(name: str, channels: int) -> Case:
    x = RNG.integers(-128, 127, (1, 7, 6, channels), endpoint=True).astype(np.int8)
    w = RNG.integers(-127, 127, (channels, 1, 3, 3), endpoint=True).astype(np.int8)
    bias = RNG.integers(-2000, 2000, channels).astype(np.int32)
    attrs = {"multiplier": tuple(int(v) for v in RNG.integers(1 << 29, 1 << 31, channels)),
             "shift": tuple(int(v) for v in RNG.integers(36, 40, channels)), "out_zero_point": -128,
             "out_dtype": "int8", "rounding": "tflite", "channels_last": True, "pads": (1, 1, 1, 1),
             "group": channels, "x_zero_point": -5, "lo": -128}
    return Case(name, "QConv", [x, w, bias], attrs, constant=(1, 2))


#: three 1x1 convolutions and two depthwise layers, each shape twice or more, each layer its own multipliers
CASES = [conv(f"pointwise{i}", 16, 12, 1, relu=True) for i in range(3)] + [depthwise(f"dw{i}", 8) for i in range(2)]


def layer_functions(obj) -> list[str]:
    return sorted(line.split()[-1] for line in toolchains.arm_symbols(obj) if " t layer" in line)


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4", "cortex-m0"])
def test_layers_of_one_shape_share_one_function(cpu, tmp_path):
    graph, feeds = build_graph(CASES)
    assert len({case.attrs["multiplier"] for case in CASES}) == len(CASES)
    result = export_bundle(graph, tmp_path, "net", resolve_target("arm", cpu))
    # a block of tables per layer, in the weights; on DSP cores every layer's parameters are in the table that
    # replaces its biases (integer_conv_weights.block_table, depthwise_table: TFLite rounding and a fused ReLU)
    assert len(result.plan.parameters) == (len(CASES) if cpu == "cortex-m0" else 0)
    assert len(layer_functions(tmp_path / "net.o")) == 2
    rodata = subprocess.run(["arm-none-eabi-nm", str(tmp_path / "net.o")], capture_output=True, text=True).stdout
    assert "_multiplier" not in rodata and "_shift" not in rodata
    blob = (tmp_path / "net.weights.bin").read_bytes()
    for offset, data in result.plan.parameters:
        assert blob[offset:offset + len(data)] == data
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_cortex_m(tmp_path, "net", cpu, feeds, spec)
    want = interpreter.run(graph, feeds)
    assert all(len(np.unique(v)) > 3 for v in want.values())       # not all clamped
    for name, value in want.items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)


def test_shared_tables_on_the_host(tmp_path):
    graph, feeds = build_graph(CASES)
    export_bundle(graph, tmp_path, "net", resolve_target())
    spec = {name: (graph.type_of(name).shape, graph.type_of(name).dtype.numpy) for name in graph.outputs}
    outputs = toolchains.run_host(tmp_path, "net", feeds, spec)
    for name, value in interpreter.run(graph, feeds).items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)


def _function(module: ir.Module, name: str, noalias: tuple[bool, bool]) -> ir.Function:
    ptr = ir.IntType(8).as_pointer()
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr]), name=name)
    for arg, flag in zip(function.args, noalias):
        if flag:
            arg.add_attribute("noalias")
    b = ir.IRBuilder(function.append_basic_block("entry"))
    b.store(b.load(function.args[0]), function.args[1])
    b.ret_void()
    return function


def test_a_function_is_shared_only_where_its_noalias_holds():
    module, bodies = ir.Module(), {}
    loose = _function(module, "a", (False, True))
    assert _shared(module, loose, bodies) is loose
    assert _shared(module, _function(module, "b", (True, True)), bodies) is loose      # promises less: reused
    tight = _function(module, "c", (True, False))
    assert _shared(module, tight, bodies) is tight                                    # would promise more: kept
    assert _shared(module, _function(module, "d", (True, False)), bodies) is tight
    assert sorted(f.name for f in module.functions) == ["a", "c"]
