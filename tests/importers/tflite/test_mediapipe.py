"""Real .tflite files nobody here wrote: the models mediapipe 0.10.21 ships under mediapipe/modules/
import and match the TFLite interpreter (rtol 1e-4, atol 1e-4, inputs uniform in [-1, 1) as the models'
normalised images are).

mediapipe 0.10.21 pins protobuf < 5, which TensorFlow 2.21 and onnx (protobuf >= 6.31.1) cannot share an
environment with, so it is not a test extra: ``pip install --no-deps mediapipe==0.10.21`` puts the files
in place (only the files are read; mediapipe itself is never imported). Without it these tests skip.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pegasus.importers.tflite.reader import read_tflite
from tests.conftest import run_cli
from tests.importers.tflite.flatbuffer import pack, unpack
from tests.importers.tflite.harness import check_against_interpreter
from tests.support.cli_errors import assert_one_line_error

_SPEC = importlib.util.find_spec("mediapipe")
MODULES = Path(_SPEC.origin).parent / "modules" if _SPEC and _SPEC.origin else None

pytestmark = pytest.mark.skipif(MODULES is None or not MODULES.is_dir(),
                                reason="mediapipe's model files are not installed "
                                       "(pip install --no-deps mediapipe==0.10.21)")


@pytest.mark.parametrize("name, kind", [
    ("face_detection/face_detection_short_range.tflite", "float16"),
    ("iris_landmark/iris_landmark.tflite", "float32"),
    ("face_detection/face_detection_full_range_sparse.tflite", "sparse float16"),
])
def test_matches_interpreter(name, kind):
    path = MODULES / name
    tensors = read_tflite(path).tensors
    assert ("float16" in kind) == any(t.dtype == "float16" and t.data is not None for t in tensors)
    assert ("sparse" in kind) == any(t.sparse for t in tensors)
    check_against_interpreter(path, runs=2, rtol=1e-4, atol=1e-4, low=-1.0, high=1.0)


def test_custom_op_listed(tmp_path):
    """selfie_segmentation ends in mediapipe's custom Convolution2DTransposeBias."""
    path = MODULES / "selfie_segmentation/selfie_segmentation.tflite"
    custom = next((i, n) for i, n in enumerate(read_tflite(path).nodes) if n.domain == "custom")
    result = run_cli("import", "tflite", "--model", path, "--output-model", tmp_path / "m.json")
    assert_one_line_error(result, "unsupported operators (1)", "Convolution2DTransposeBias (domain custom)",
                          f"node '{custom[1].name}'", f"operator {custom[0]}")
    assert not (tmp_path / "m.json").exists()


def test_cut_before_custom_op(tmp_path):
    """--outputs at the custom op's input imports the rest; the reference is the interpreter on the same file
    with the operators from the custom op on removed (it cannot load the custom op)."""
    path = MODULES / "selfie_segmentation/selfie_segmentation.tflite"
    nodes = read_tflite(path).nodes
    position = next(i for i, n in enumerate(nodes) if n.domain == "custom")
    cut = nodes[position].inputs[0]
    model = unpack(path.read_bytes())
    sub = model.subgraphs[0]
    sub.outputs = [sub.operators[position].inputs[0]]
    sub.operators = sub.operators[:position]
    reference = tmp_path / "selfie_cut.tflite"
    reference.write_bytes(pack(model))
    check_against_interpreter(path, reference=reference, outputs=[cut], runs=2, rtol=1e-4, atol=1e-4, low=-1.0,
                              high=1.0)


@pytest.mark.parametrize("scheme", [("perchannel_symmetric_affine", "int8"), ("asymmetric_affine", "uint8")])
def test_real_file_quantized_bundle_bit_exact(scheme, tmp_path):
    """iris_landmark (a real float model) quantized to 8 bits by pegasus: the host bundle's outputs are
    byte-equal to integer inference. Every layer lowers to integer kernels, its 53 PReLUs to QPRelu."""
    from pegasus.importers.tflite.loader import import_tflite
    from pegasus.quantized.lower import lower_to_integer
    from pegasus.runtime import interpreter
    from tests.support.quantized_bundles import assert_bit_exact, export_for, quantize, run_on

    graph = import_tflite(MODULES / "iris_landmark/iris_landmark.tflite")
    rng = np.random.default_rng(3)
    samples = [{name: rng.uniform(-1, 1, graph.type_of(name).shape).astype(np.float32) for name in graph.inputs}
               for _ in range(4)]
    lowered = lower_to_integer(graph, quantize(graph, samples, *scheme))
    assert lowered.float_layers == [], lowered.float_layers
    assert [node.op for node in lowered.graph.nodes].count("QPRelu") == 53
    export_for("host", lowered.graph, tmp_path)
    assert_bit_exact(run_on("host", tmp_path, lowered.graph, samples[0]), interpreter.run(lowered.graph, samples[0]))
