"""Every ONNX node test case with float inputs, quantized (calibrated on its own inputs) as uint8 and as
int16 dynamic fixed point, lowers to an integer graph that runs: same outputs (names, shapes, dtypes)
as the float model, finite wherever the float outputs are. Models never seen before must quantize —
unsupported layers fall back to float, they never crash the lowering."""

from __future__ import annotations

import warnings

import numpy as np
from onnx.backend.test.case.node import collect_testcases

from pegasus.quantized.lower import lower_to_integer
from pegasus.runtime import interpreter
from tests.conformance.backend import graph_inputs, prepare
from tests.support.quantized_bundles import SCHEMES, quantize


def _float_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(collect_testcases())
    for case in cases:
        if not case.data_sets:
            continue
        inputs, _ = case.data_sets[0]
        try:
            graph = prepare(case.model, list(inputs))
        except Exception:  # not importable (excluded in conformance with a reason)
            continue
        feeds = {n: v for n, v in zip(graph_inputs(case.model), inputs) if n in graph.inputs}
        if graph.nodes and set(feeds) == set(graph.inputs) and all(graph.type_of(n).dtype.is_float
                                                                   for n in graph.inputs):
            yield case.name, graph, feeds


def test_every_float_node_case_quantizes_and_runs(capsys):
    checked, integer_layers = 0, 0
    with np.errstate(all="ignore"):
        for name, graph, feeds in _float_cases():
            try:
                expected = interpreter.run(graph, feeds)
            except Exception:
                continue
            for scheme in ("u8", "dfp16"):
                lowered = lower_to_integer(graph, quantize(graph, [feeds], *SCHEMES[scheme]))
                actual = interpreter.run(lowered.graph, feeds)
                assert list(actual) == list(expected), name
                for out, want in expected.items():
                    got = actual[out]
                    assert got.shape == want.shape and got.dtype == want.dtype, (name, scheme, out)
                    if want.dtype.kind == "f":
                        assert np.isfinite(got[np.isfinite(want)]).all(), (name, scheme, out)
                checked += 1
                integer_layers += sum(node.op.startswith("Q") or node.op in ("LookupTable", "Requantize")
                                      for node in lowered.graph.nodes)
    with capsys.disabled():
        print(f"\n{checked} quantized node-case models ran ({integer_layers} integer kernels among them)")
    assert checked > 1000
