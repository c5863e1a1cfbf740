"""``pegasus run`` on a depthwise-separable (MobileNet-style) block — depthwise 3x3, ReLU, pointwise 1x1,
global average pool, Gemm — on Cortex-M7/M33/M55, Cortex-A53 and the host, against onnxruntime; and its
per-layer profile on cortex-m7, which must sum to the unprobed count."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import run_cli


@pytest.fixture(scope="module")
def separable(tmp_path_factory):
    folder = tmp_path_factory.mktemp("separable")
    rng = np.random.default_rng(11)
    inits = {"dw": rng.normal(size=(8, 1, 3, 3)), "dwb": rng.normal(size=8), "pw": rng.normal(size=(16, 8, 1, 1)),
             "pwb": rng.normal(size=16), "fc": rng.normal(size=(10, 16)), "fcb": rng.normal(size=10)}
    nodes = [helper.make_node("Conv", ["x", "dw", "dwb"], ["d"], group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Conv", ["r", "pw", "pwb"], ["p"]),
             helper.make_node("Relu", ["p"], ["q"]),
             helper.make_node("GlobalAveragePool", ["q"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "separable", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    path = folder / "separable.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    assert run_cli("import", "onnx", "--model", path, "--output-model", folder / "separable.json",
                   "--output-data", folder / "separable.data").code == 0
    x = folder / "x.npy"
    np.save(x, rng.uniform(-1, 1, (1, 8, 16, 16)).astype(np.float32))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return folder, x, session.run(None, {"x": np.load(x)})[0]


@pytest.mark.parametrize("flags", [["--target", "arm", "--mcpu", "cortex-m7"], ["--target", "arm", "--mcpu",
                                   "cortex-m33"], ["--target", "arm", "--mcpu", "cortex-m55"],
                                   ["--target", "aarch64"], ["--target", "x86_64"]], ids=lambda f: f[-1])
def test_separable_block_matches_onnxruntime(separable, tmp_path, flags):
    folder, x, expected = separable
    result = run_cli("run", "--model", folder / "separable.json", "--model-data", folder / "separable.data",
                     "--input", x, "--output-dir", tmp_path, *flags)
    assert result.code == 0, result.stderr
    (got,) = np.load(tmp_path / "outputs.npz").values()
    np.testing.assert_allclose(got[0], expected, atol=1e-5 * max(1.0, float(np.abs(expected).max())), rtol=0)


def test_separable_profile_sums_to_the_whole(separable, tmp_path):
    folder, x, _ = separable
    result = run_cli("run", "--model", folder / "separable.json", "--model-data", folder / "separable.data",
                     "--input", x, "--target", "arm", "--mcpu", "cortex-m7", "--profile")
    assert result.code == 0, result.stderr
    whole = int(re.search(r"instructions per inference: ([\d,]+)", result.stdout).group(1).replace(",", ""))
    rows = re.findall(r"^\s+([\d,]+)\s+[\d.]+%\s+([\d,]+)\s+\S+\s+(\S.*)$", result.stdout, re.M)
    total = sum(int(cost.replace(",", "")) for cost, _, _ in rows)
    assert abs(total - whole) <= 40 * (len(rows) + 1), result.stdout
    macs = {name: int(count.replace(",", "")) for _, count, name in rows}
    assert sum(macs.values()) == 16 * 16 * 8 * 9 + 16 * 16 * 16 * 8 + 16 * 10, result.stdout


@pytest.fixture(scope="module")
def separable_int8(separable):
    """The block quantized per-channel int8 on 8 random samples."""
    folder, _, _ = separable
    rng = np.random.default_rng(5)
    lines = []
    for i in range(8):
        np.save(folder / f"s{i}.npy", rng.uniform(-1, 1, (1, 8, 16, 16)).astype(np.float32))
        lines.append(f"s{i}.npy\n")
    (folder / "dataset.txt").write_text("".join(lines))
    meta = folder / "separable_inputmeta.yml"
    assert run_cli("generate", "inputmeta", "--model", folder / "separable.json", "--source-file",
                   folder / "dataset.txt", "--input-meta-output", meta).code == 0
    result = run_cli("quantize", "--model", folder / "separable.json", "--model-data", folder / "separable.data",
                     "--with-input-meta", meta, "--quantizer", "perchannel_symmetric_affine", "--qtype", "int8",
                     "--batch-size", "8", "--iterations", "1", "--rebuild")
    assert result.code == 0, result.stderr
    return folder / "separable.quantize"


@pytest.mark.parametrize("flags", [["--target", "arm", "--mcpu", "cortex-m7"], ["--target", "arm", "--mcpu",
                                   "cortex-m4"], ["--target", "arm", "--mcpu", "cortex-m33"],
                                   ["--target", "aarch64"], ["--target", "x86_64"]], ids=lambda f: f[-1])
def test_quantized_separable_block_is_exact(separable, separable_int8, tmp_path, flags):
    """Quantized, the target's outputs are the integer simulation's exactly (pegasus run compares them)."""
    folder, x, expected = separable
    result = run_cli("run", "--model", folder / "separable.json", "--model-data", folder / "separable.data",
                     "--dtype", "quantized", "--model-quantize", separable_int8, "--input", x,
                     "--output-dir", tmp_path, *flags)
    assert result.code == 0, result.stderr
    assert re.search(r"largest difference 0\b", result.stdout), result.stdout
    (got,) = np.load(tmp_path / "outputs.npz").values()
    scale = float(np.abs(expected).max())
    assert np.abs(got[0] - expected).max() <= 0.1 * scale, (got, expected)   # and close to onnxruntime's float
