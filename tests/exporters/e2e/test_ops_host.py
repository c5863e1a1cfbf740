"""Every op in the registry, compiled into a host bundle as single-op graphs: the ONNX node test cases
of that op (up to a few per op) are imported, exported, linked with gcc and run; the bundle's outputs
must equal the float reference within rtol 1e-4 / atol 1e-5 (exactly, for integer and bool outputs)."""

from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np
import pytest

import pegasus.exporters.glow.kernels  # noqa: F401  (registers every implementation)
from pegasus.exporters.glow.kernels.strategy import implementations_of
from pegasus.ops.registry import all_ops
from pegasus.runtime import interpreter
from tests.conformance.backend import graph_inputs, prepare
from tests.support.host_runner import run_bundle_host
from tests.support.node_cases import case_arrays, exclusions, io_reason, supported

CASES_PER_OP = 3
NOT_EXPORTED = {  # case name: why the exporter refuses it (each refusal is a clear error, tested elsewhere)
    "test_batchnorm_epsilon_training_mode": "training-mode BatchNormalization uses batch statistics: not inference",
    "test_batchnorm_example_training_mode": "training-mode BatchNormalization uses batch statistics: not inference",
}


def _single_op_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    excluded = exclusions()
    chosen: dict[str, list] = defaultdict(list)
    for case in sorted(cases, key=lambda c: c.name):
        ops = {node.op_type for node in case.model.graph.node}
        if (len(ops) != 1 or "expanded" in case.name or case.name in excluded or case.name in NOT_EXPORTED
                or not supported(case)):
            continue
        if io_reason(case):
            continue
        op = ops.pop()
        if len(chosen[op]) < CASES_PER_OP:
            chosen[op].append(case)
    return [pytest.param(case, id=f"{op}:{case.name}") for op, cases in sorted(chosen.items()) for case in cases]


@pytest.mark.parametrize("case", _single_op_cases())
def test_bundle_matches_reference(case, tmp_path):
    inputs, _ = case.data_sets[0]
    inputs = case_arrays(inputs)
    with np.errstate(all="ignore"):
        graph = prepare(case.model, inputs)
        if not graph.nodes:
            pytest.skip("folded to constants at import: nothing to compile")  # checked by conformance
        feeds = {n: v for n, v in zip(graph_inputs(case.model), inputs) if n in graph.inputs}
        expected = interpreter.run(graph, feeds)
    actual = run_bundle_host(graph, feeds, workdir=tmp_path)
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(all_ops()))
def test_every_op_has_an_emitter(name):
    assert implementations_of(name), f"op {name} has no LLVM implementation"
