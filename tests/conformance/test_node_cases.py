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
import onnx
import pytest
from onnx import numpy_helper

from pegasus.importers.onnx.loader import model_opset
from pegasus.importers.onnx.registry import find_converter
from pegasus.ir.dtypes import DType
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
    bare = case.name.removesuffix("_expanded").replace("_", "").lower()
    named = [op for op in ops if op.lower() in bare]
    return max(named, key=len) if named else (ops[0] if ops else "?")


def _supported(case) -> bool:
    opset = model_opset(case.model)
    return all(find_converter(n.op_type, opset, "" if n.domain in ("", "ai.onnx") else n.domain)
               for n in case.model.graph.node)


def _io_reason(case) -> str | None:
    """Why a case's inputs/outputs are outside what pegasus models carry, if they are."""
    for vi in list(case.model.graph.input) + list(case.model.graph.output):
        if not vi.type.HasField("tensor_type"):
            return "sequence/optional values: pegasus models carry tensors only"
        try:
            DType.from_onnx(vi.type.tensor_type.elem_type)
        except TypeError as exc:
            return f"{exc} (no such dtype on the microcontroller targets)"
    return None


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
        reason = _io_reason(case) or reason
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=f"{_op_under_test(case)}:{case.name}", marks=marks))
    return params


def _arrays(values) -> list[np.ndarray]:
    """Test data comes as arrays or, for some dtypes, as TensorProtos."""
    return [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v) for v in values]


@pytest.mark.parametrize("case", _cases())
def test_node_case(case):
    for inputs, expected in case.data_sets:
        inputs, expected = _arrays(inputs), _arrays(expected)
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
