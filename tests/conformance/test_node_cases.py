"""The official ONNX node test cases, run through pegasus' importer and float reference.

Every case whose op types all have a converter at the case's opset runs, at the suite's own rtol and
atol. Cases we cannot support are listed with a reason in ``excluded_<family>.py`` beside this file;
the terminal summary prints the pass count per op (see conftest.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.conformance.backend import run_model
from tests.support.node_cases import case_arrays, exclusions, io_reason, supported


def _op_under_test(case) -> str:
    ops = [node.op_type for node in case.model.graph.node]
    bare = case.name.removesuffix("_expanded").replace("_", "").lower()
    named = [op for op in ops if op.lower() in bare]
    return max(named, key=len) if named else (ops[0] if ops else "?")


def _cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    excluded = exclusions()
    params = []
    for case in cases:
        if not supported(case):
            continue
        reason = excluded.get(case.name)
        reason = io_reason(case) or reason
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=f"{_op_under_test(case)}:{case.name}", marks=marks))
    return params


@pytest.mark.parametrize("case", _cases())
def test_node_case(case):
    for inputs, expected in case.data_sets:
        inputs, expected = case_arrays(inputs), case_arrays(expected)
        with np.errstate(all="ignore"):
            actual = run_model(case.model, inputs)
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            want = np.asarray(want)
            assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
            assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
            if want.dtype.kind in "fc":
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(got, want)
