"""The ONNX importer tests' harness: graphs shaped as other tools write them (torch.onnx.export, tf2onnx,
onnxruntime's quantizer), imported through the command line and compared with onnxruntime running the same file.

``check(model, tmp_path)`` saves the model, runs ``pegasus import onnx`` in this process, runs the float reference
on seeded inputs and compares every output with onnxruntime's (CPU, graph optimisations off) at rtol 1e-4,
atol 1e-5. ``make_model`` builds a checked ModelProto from nodes the way the tests write them.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from pegasus import cli
from pegasus.ir import serialize
from pegasus.runtime.interpreter import run


def make_model(nodes, inputs, outputs, initializers, opset: int, domains: dict[str, int] | None = None):
    """A checked model of one graph at ``opset`` (plus other ``domains``: version). ``outputs`` are value infos,
    or names whose types ONNX shape inference gives."""
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    named = [o for o in outputs if isinstance(o, str)]
    if named:
        probe = helper.make_model(helper.make_graph(nodes, "probe", inputs, [], initializers), opset_imports=imports)
        probe.ir_version = 8
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
        outputs = [inferred[o] if isinstance(o, str) else o for o in outputs]
    graph = helper.make_graph(nodes, "tested", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=imports, producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def run_cli_here(*args) -> tuple[int, str, str]:
    """``pegasus ARGS`` in this process: (exit code, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main([str(a) for a in args])
    return code, stdout.getvalue(), stderr.getvalue()


def cli_import(path: Path, *args: str) -> tuple[int, str, str, Path]:
    """``pegasus import onnx --model PATH ...`` in this process: (exit code, stdout, stderr, json path)."""
    out = path.with_suffix(".json")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["import", "onnx", "--model", str(path), "--output-model", str(out),
                         "--output-data", str(out.with_suffix(".data")), *args])
    return code, stdout.getvalue(), stderr.getvalue(), out


def onnxruntime_outputs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def seeded_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Normal floats (batch 1 for a symbolic dim) for every graph input that is not an initializer."""
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def check(model: onnx.ModelProto, tmp_path: Path, feeds: dict[str, np.ndarray] | None = None,
          rtol: float = 1e-4, atol: float = 1e-5) -> list[np.ndarray]:
    """Import ``model`` through the CLI and compare the float reference with onnxruntime; pegasus's outputs."""
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    feeds = feeds or seeded_inputs(model)
    code, _, stderr, out = cli_import(path)
    assert code == 0, stderr
    graph = serialize.load(out, out.with_suffix(".data"))
    results = run(graph, feeds)
    got = [results[name] for name in graph.outputs]
    for name, expected, actual in zip(graph.outputs, onnxruntime_outputs(path, feeds), got):
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    return got
