"""Issue 37 item 6: work grows about linearly with the graph. A generated 50,000-layer ONNX model (a chain of
Identity and Add layers, the shape that made identity removal quadratic: 16,384 Identities took 92 s before)
is imported and exported in one process within a generous bound for a shared 2-core machine, and the bundle's
example program, built with its Makefile, computes what onnxruntime computes."""

from __future__ import annotations

import subprocess
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tests.security.harness import run_many

LAYERS = 50_000
#: seconds for import + export of LAYERS layers: measured 25-60 s (idle to a load of 10 on 2 cores); the
#: quadratic passes took minutes for a third of this
BOUND = 180


def _chain_model(path, layers: int) -> None:
    nodes, previous = [], "x"
    for index in range(layers):
        out = f"t{index}"
        if index % 2:
            nodes.append(helper.make_node("Add", [previous, "step"], [out], name=f"add{index}"))
        else:
            nodes.append(helper.make_node("Identity", [previous], [out], name=f"identity{index}"))
        previous = out
    step = numpy_helper.from_array(np.array([[0.25, -0.5, 1.0, 0.125]], np.float32), "step")
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 4])], [step])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_50k_layer_chain_imports_and_exports_in_time(tmp_path):
    model = tmp_path / "chain.onnx"
    _chain_model(model, LAYERS)
    start = time.monotonic()
    results = run_many([
        ["import", "onnx", "--model", model, "--output-model", tmp_path / "chain.json",
         "--output-data", tmp_path / "chain.data"],
        ["export", "glow", "--model", tmp_path / "chain.json", "--model-data", tmp_path / "chain.data",
         "--output-path", tmp_path / "bundle"],
    ], cwd=tmp_path, timeout=BOUND + 60)
    elapsed = time.monotonic() - start
    for result in results:
        assert result.code == 0, result.stderr
    assert elapsed < BOUND, f"import + export of {LAYERS} layers took {elapsed:.0f} s"

    folder = tmp_path / "bundle"
    build = subprocess.run(["make", "-C", str(folder)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    x = np.array([[1.5, -2.0, 0.75, 3.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run([str(folder / "chain_run"), "-o", str(tmp_path / "y.bin"), str(tmp_path / "x.npy")],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    expected = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.fromfile(tmp_path / "y.bin", np.float32).reshape(1, 4), expected, rtol=1e-5)
