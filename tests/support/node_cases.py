"""Reading ONNX's node test cases: which ones pegasus models can carry (opset converters, tensor inputs and
outputs, dtypes), the exclusion lists of tests/conformance, and the cases' arrays. Shared by the conformance run
and the host bundles of every op (tests/exporters/e2e/test_ops_host.py)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from pegasus.importers.onnx.loader import model_opset
from pegasus.importers.onnx.registry import find_converter
from pegasus.ir.dtypes import DType

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"   # its excluded_*.py lists


def exclusions() -> dict[str, str]:
    merged: dict[str, str] = {}
    for info in pkgutil.iter_modules([str(CONFORMANCE)]):
        if info.name.startswith("excluded_"):
            merged.update(importlib.import_module(f"tests.conformance.{info.name}").EXCLUDED)
    return merged


def supported(case) -> bool:
    opset = model_opset(case.model)
    return all(find_converter(n.op_type, opset, "" if n.domain in ("", "ai.onnx") else n.domain)
               for n in case.model.graph.node)


def io_reason(case) -> str | None:
    """Why a case's inputs/outputs are outside what pegasus models carry, if they are."""
    for vi in list(case.model.graph.input) + list(case.model.graph.output):
        if not vi.type.HasField("tensor_type"):
            return "sequence/optional values: pegasus models carry tensors only"
        try:
            DType.from_onnx(vi.type.tensor_type.elem_type)
        except TypeError as exc:
            return f"{exc} (no such dtype on the microcontroller targets)"
    return None


def case_arrays(values) -> list[np.ndarray]:
    """Test data comes as arrays or, for some dtypes, as TensorProtos."""
    return [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v) for v in values]
