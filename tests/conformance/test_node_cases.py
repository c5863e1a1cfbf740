"""The official ONNX node test cases, run through pegasus' importer and float reference.

Every case whose op types all have a converter at the case's opset runs, at the suite's own rtol and
atol. Cases we cannot support are listed with a reason in ``excluded_<family>.py`` beside this file;
the terminal summary prints the pass count per op (see conftest.py).
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from pegasus.importers.onnx.loader import model_opset
from pegasus.importers.onnx.registry import find_converter
from tests.conformance.backend import run_model

HERE = Path(__file__).parent


def _exclusions() -> dict[str, str]:
    merged: dict[str, str] = {}
    for info in pkgutil.iter_modules([str(HERE)]):
        if info.name.startswith("excluded_"):
            merged.update(importlib.import_module(f"tests.conformance.{info.name}").EXCLUDED)
    return merged


def _op_under_test(case) -> str:
    ops = [node.op_type for node in case.model.graph.node]
    named = [op for op in ops if op.lower() in case.name.replace("_", "").lower()]
    return max(named, key=len) if named else (ops[0] if ops else "?")


def _supported(case) -> bool:
    opset = model_opset(case.model)
    return all(find_converter(n.op_type, opset, "" if n.domain in ("", "ai.onnx") else n.domain)
               for n in case.model.graph.node)


def _non_tensor_io(case) -> bool:
    values = list(case.model.graph.input) + list(case.model.graph.output)
    return any(not vi.type.HasField("tensor_type") for vi in values)


def _cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    excluded = _exclusions()
    params = []
    for case in cases:
        if not _supported(case):
            continue
        reason = excluded.get(case.name)
        if _non_tensor_io(case):
            reason = "sequence/optional values: pegasus models carry tensors only"
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=f"{_op_under_test(case)}:{case.name}", marks=marks))
    return params


@pytest.mark.parametrize("case", _cases())
def test_node_case(case):
    for inputs, expected in case.data_sets:
        with np.errstate(all="ignore"):
            actual = run_model(case.model, list(inputs))
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            want = np.asarray(want)
            assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
            assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
            if want.dtype.kind in "fc":
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(got, want)
