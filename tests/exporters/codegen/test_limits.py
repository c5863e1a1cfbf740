"""Sizes a bundle cannot hold are refused at export, and the largest it can hold still compute right.

The generated code indexes elements and offsets into its buffers with signed 32-bit integers: a tensor of more
than 2**31 - 1 elements or bytes once compiled to a 3-byte object (its loop folded away by the overflow) with a
header announcing 8e15 bytes. Now export refuses it in one line naming the tensor, its size and the limit, and
writes nothing; a buffer past the 32-bit offsets, or buffers adding up past a 32-bit CPU's 4 GiB, likewise.
At the edge, an int8 tensor of 2**31 - 128 elements (and a float32 one of 2**31 - 128 bytes) is reduced by a
host bundle to the value numpy finds. The memory report's columns stay aligned whatever the sizes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper

from pegasus.errors import PegasusError
from pegasus.exporters.glow.codegen import build_module
from pegasus.exporters.glow.compile import compile_object
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.memory import report as memory_report
from pegasus.exporters.glow.memory.plan import MAX_INDEX, check_limits, plan_memory
from pegasus.exporters.glow.target import host_arch, resolve_target
from pegasus.importers.onnx.loader import import_onnx
from pegasus.ir.dtypes import DType
from pegasus.ir.tensor import TensorType

ELEM = {"int8": TensorProto.INT8, "float32": TensorProto.FLOAT}


def single_op(op: str, shape: list[int], dtype: str = "float32", **attrs):
    x = helper.make_tensor_value_info("x", ELEM[dtype], shape)
    y = helper.make_tensor_value_info("y", ELEM[dtype], None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return import_onnx(model, name="edge")


def test_sizes_are_exact_past_int64():
    assert TensorType((100000,) * 4, DType.parse("float32")).nbytes == 4 * 10**20


@pytest.mark.parametrize("shape,dtype,elements,size", [
    ([1, 100000, 100000, 100000], "float32", "1,000,000,000,000,000", "4,000,000,000,000,000"),   # the report
    ([2**29], "float32", "536,870,912", "2,147,483,648"),          # bytes one over the limit
    ([2**31], "int8", "2,147,483,648", "2,147,483,648"),           # elements one over
])
@pytest.mark.parametrize("arch", ["x86_64", "arm"])
def test_oversized_tensor_is_refused_and_nothing_written(tmp_path, shape, dtype, elements, size, arch):
    graph = single_op("Relu", shape, dtype)
    with pytest.raises(PegasusError) as error:
        export_bundle(graph, tmp_path, "edge", resolve_target(arch))
    message = str(error.value)
    assert "\n" not in message and "tensor 'x'" in message and "(and 1 more tensor)" in message
    assert f"{elements} elements, {size} bytes" in message and f"{MAX_INDEX:,}" in message
    assert list(tmp_path.iterdir()) == []


def test_buffer_past_32_bit_offsets_is_refused(tmp_path):
    """Each tensor fits, the input/output buffer holding both does not."""
    graph = single_op("Relu", [(2**31 - 128) // 4])
    with pytest.raises(PegasusError, match=r"^MUTABLE_MEM_SIZE \(inputs/outputs\) would be 4,294,967,040 bytes: "
                                           r"a bundle's buffers hold at most 2,147,483,647 bytes"):
        export_bundle(graph, tmp_path, "edge", resolve_target())
    assert list(tmp_path.iterdir()) == []


def test_buffers_past_4_gib_are_refused_on_32_bit_cpus():
    graph = single_op("Relu", [4])
    plan = dataclasses.replace(plan_memory(graph), constant_size=MAX_INDEX, mutable_size=MAX_INDEX,
                               activations_size=2**30)
    for arch in ("x86_64", "aarch64"):
        check_limits(graph, plan, resolve_target(arch).address_bits)
    for arch in ("arm", "i386"):
        with pytest.raises(PegasusError, match=r"buffers need 5,368,709,118 bytes .*more than the 4 GiB "
                                               r"\(4,294,967,296 bytes\) a 32-bit CPU addresses"):
            check_limits(graph, plan, resolve_target(arch).address_bits)


@pytest.mark.parametrize("dtype,count", [("int8", 2**31 - 128), ("float32", (2**31 - 128) // 4)])
def test_largest_tensors_are_computed_right(tmp_path, dtype, count):
    """ReduceMax over the largest input the input/output buffer holds, on the host: the buffers come from calloc
    (untouched pages cost no memory), three elements are set, the largest one last."""
    if host_arch() != "x86_64":
        pytest.skip("runs the bundle on an x86-64 host")
    result = export_bundle(single_op("ReduceMax", [count], dtype, keepdims=0), tmp_path, "edge",
                           resolve_target(None, None, None, "pic"))
    plan = result.plan
    assert plan.mutable_size <= MAX_INDEX
    subprocess.run(["gcc", "-shared", "-o", str(tmp_path / "libedge.so"), str(tmp_path / "edge.o")], check=True)
    mutable = np.zeros(plan.mutable_size + 64, np.uint8)
    mutable = mutable[(-mutable.ctypes.data) % 64:][:plan.mutable_size]
    x_at, y_at = plan.locations["x"], plan.locations[result.graph.outputs[0]]
    x = mutable[x_at.offset:x_at.offset + x_at.size].view(dtype)
    x[0], x[count // 2], x[-1] = 3, 5, 7
    activations = np.zeros(plan.activations_size + 64, np.uint8)
    pointer = ctypes.POINTER(ctypes.c_uint8)
    entry = ctypes.CDLL(str(tmp_path / "libedge.so")).edge
    assert entry(None, mutable.ctypes.data_as(pointer), activations.ctypes.data_as(pointer)) == 0
    assert mutable[y_at.offset:y_at.offset + y_at.size].view(dtype)[0] == 7


def test_memory_report_columns_stay_aligned():
    """Sizes of 1 to 19 digits and a long name: in each table every number ends in one column, the header's
    Flash and RAM end where their numbers do."""
    graph = single_op("Relu", [4])
    target = resolve_target("arm", "cortex-m7")
    obj = compile_object(build_module(graph, plan_memory(graph), target, "edge"), target)
    plan = dataclasses.replace(plan_memory(graph), constant_size=0, mutable_size=8 * 10**15, activations_size=7)
    lines = memory_report.memory_report("a_rather_long_network_name_for_the_report", plan, obj)[0].splitlines()
    rows = [re.search(r"\d[\d,]*(?=  (Flash|RAM))", line) for line in lines
            if re.match(r"  (Weights|Input/Output|Activations|Code) +[A-Z_.]", line)]
    assert len(rows) == 4 and rows[1].group() == "8,000,000,000,000,000"
    assert len({row.end() for row in rows}) == 1, lines
    header = next(line for line in lines if re.fullmatch(r" +Flash +RAM", line))
    totals = [line for line in lines if line.startswith("  Weights in")]
    assert len(totals) == 2 and all(len(line) == len(header) for line in totals), lines
    flash_end = header.index("Flash") + len("Flash")
    assert all(re.search(r"[\d,]+(?= +[\d,]+$)", line).end() == flash_end for line in totals), lines
