"""The Acuity guide's own command lines (shared/reference, §3.4–3.6), typed as the guide writes them with the
demo LeNet's files in place of its xxx and ${NAME}: each is accepted and does what the guide documents (issue 35,
defect 6), or, where pegasus has no such thing, says in one line what it does here."""

from __future__ import annotations

import json
import shlex
import shutil

import numpy as np
import pytest

from tests.conftest import DEMO_DIR
from tests.security.harness import run_many
from tests.support.requirements import need_module


def guide(text: str, **names: str) -> list[str]:
    """A command line of the guide (backslash-newline continuations joined, ``./bin/pegasus`` dropped)."""
    for key, value in names.items():
        text = text.replace(key, value)
    argv = shlex.split(text.replace("\\\n", " ").removeprefix("$ "), comments=True)  # as sh reads it
    assert argv[0].endswith("pegasus")
    return argv[1:]


QUANTIZE = """../bin/pegasus quantize --quantizer asymmetric_affine\\
--qtype uint8 --with-input-meta ${NAME}_inputmeta.yml \\
--model ${NAME}.json --model-data ${NAME}.data \\
--quantized-rebuild \\
# --batch-size 16 --iterations 10"""

ENTROPY = """$ ./bin/pegasus quantize \\
--quantizer asymmetric_affine \\
--qtype uint8 \\
--rebuild \\
--with-input-meta lenet_inputmeta.yml \\
--model lenet.json \\
--model-data lenet.data \\
--compute-entropy"""

HYBRID = """$ ./bin/pegasus quantize \\
--model 'lenet.json' \\
--model-data 'lenet.data' \\
--model-quantize 'lenet.quantize' \\
--quantizer 'asymmetric_affine' \\
--qtype 'uint8' \\
--with-input-meta 'lenet_inputmeta.yml' \\
--hybrid"""

EXPORT = """./bin/pegasus export ovxlib \\
--model xxx.json --model-data xxx.data \\
-model-quantize xxxx.quantize --with-input-meta xxxx_inputmeta.yml \\
--dtype quantized \\
--optimize VIPNAN001_PID0X88 \\
--viv-sdk ./bin/vcmdtools \\
--pack-nbg-unify"""

EXPORT_HYBRID = """$ ./bin/pegasus export ovxlib \\
--model lenet.quantize.json \\
--model-data lenet.data \\
--model-quantize lenet.quantize \\
--with-input-meta ${NAME}_inputmeta.yml \\
--dtype quantized \\
--optimize VIPNANOQI_PID0X88 \\
--viv-sdk ../bin/vcmdtools \\
--pack-nbg-unify"""

INFERENCE = """./bin/pegasus inference \\
--dtype quantized --model xxx.json \\
--model-data xxx.data --with-input-meta xxxx_inputmeta.yml"""


def _table(path) -> dict:
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(path.read_text())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, demo_model):
    """lenet.json/.data (the demo LeNet), a dataset of three digits and its input meta, as the guide's step 1
    leaves them."""
    folder = tmp_path_factory.mktemp("acuity")
    json_path, data_path = demo_model
    shutil.copy(json_path, folder / "lenet.json")
    shutil.copy(data_path, folder / "lenet.data")
    images = sorted((DEMO_DIR / "images").iterdir())[:3]
    for image in images:
        shutil.copy(image, folder)
    (folder / "dataset.txt").write_text("".join(f"{image.name}\n" for image in images))
    return folder


def test_guide_workflow(workspace):
    names = {"${NAME}": "lenet", "xxxx_inputmeta": "lenet_inputmeta", "xxxx.quantize": "lenet.quantize",
             "xxx.": "lenet."}
    (workspace / "post.yml").write_text("postprocess: {}\n")
    cases = [
        # step 1 (LeNet: one channel, so one mean and the scale)
        ["generate", "inputmeta", "--model", "lenet.json", "--channel-mean-value", "0 0.00392156862745098",
         "--source-file", "dataset.txt", "--input-meta-output", "lenet_inputmeta.yml"],
        # a table of another scheme first: --quantized-rebuild must replace it (the guide's note 2)
        ["quantize", "--quantizer", "dynamic_fixed_point", "--qtype", "int16", "--with-input-meta",
         "lenet_inputmeta.yml", "--model", "lenet.json", "--model-data", "lenet.data", "--rebuild"],
        guide(QUANTIZE, **names),
        guide(INFERENCE, **names),
        guide(INFERENCE, **names) + ["--postprocess-file", "post.yml", "--device", "GPU", "--output-dir", "gpu"],
        guide(EXPORT, **names),
        guide(ENTROPY, **names),
        guide(HYBRID, **names),
        guide(EXPORT_HYBRID, **names),
        # the table's algorithm 'auto' (Acuity's automatic hybrid)
        ["quantize", "--model", "lenet.json", "--model-data", "lenet.data", "--with-input-meta", "lenet_inputmeta.yml",
         "--rebuild", "--algorithm", "auto", "--model-quantize", "auto.quantize"],
    ]
    (meta, first, quantize, inference, inference_file, export, entropy, hybrid, export_hybrid, auto) = \
        run_many(cases, cwd=workspace)
    for result in (meta, first, quantize, inference, inference_file, entropy, hybrid, auto):
        assert result.code == 0, result.stderr[-2000:]
    assert "Traceback" not in quantize.stderr
    assert _table(workspace / "lenet.quantize")["quantizer"] == "asymmetric_affine"  # rebuilt, not reused

    # inference --dtype quantized without --model-quantize takes lenet.quantize beside the model
    assert "using lenet.quantize" in inference.stderr
    assert (workspace / "outputs.npz").is_file()
    notes = [line for line in inference_file.stderr.splitlines() if "note:" in line]
    assert any("--postprocess-file post.yml" in line for line in notes), inference_file.stderr
    assert any("--device GPU" in line for line in notes), inference_file.stderr
    assert (workspace / "gpu" / "outputs.npz").is_file()
    quantized = np.load(workspace / "outputs.npz")
    assert quantized.files and all(np.isfinite(quantized[name]).all() for name in quantized.files)

    # --compute-entropy: entropy.txt and suggested layers; --hybrid: NAME.quantize.json with converters
    assert (workspace / "entropy.txt").is_file()
    assert (workspace / "lenet.quantize.json").is_file()
    hybrid_graph = json.loads((workspace / "lenet.quantize.json").read_text())
    assert "DtypeConverter" in json.dumps(hybrid_graph) or not _table(workspace / "lenet.quantize")[
        "customized_quantize_layers"]

    assert _table(workspace / "auto.quantize")["algorithm"] == "kl_divergence"
    assert sum("--algorithm auto" in line for line in auto.stderr.splitlines()) == 1, auto.stderr

    # export ovxlib: one line naming the equivalent export glow command, exit 2
    for result, model in ((export, "lenet.json"), (export_hybrid, "lenet.quantize.json")):
        assert result.code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Glow bundles for Arm CPUs" in lines[0], result.stderr
        assert f"pegasus export glow --model {model}" in lines[0]
        assert "--model-quantize lenet.quantize" in lines[0]

    # and that command works as given (to the host: no cross toolchain needed to check it)
    command = shlex.split(export.stderr.split("the equivalent is: ")[1])[1:]
    command[command.index("--target") + 1] = "x86_64"
    (glow,) = run_many([command], cwd=workspace)
    assert glow.code == 0, glow.stderr[-2000:]
    assert (workspace / "lenet_bundle" / "lenet.h").is_file()


def test_keras_convert_engine(tmp_path):
    """``import keras --model xxxx.hdf5 ... --convert-engine Keras`` (the guide's table): imported, one note."""
    keras = need_module("keras")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(3)])
    model.save(tmp_path / "net.h5")
    text = "./bin/pegasus import keras --model net.h5 --output-data net.data --output-model net.json"
    (plain, engine, tflite) = run_many([guide(text), guide(text) + ["--convert-engine", "Keras"],
                                        guide(text) + ["--convert-engine", "TFLite"]], cwd=tmp_path)
    for result in (plain, engine, tflite):
        assert result.code == 0, result.stderr[-2000:]
    assert "--convert-engine" not in plain.stderr
    for result, value in ((engine, "Keras"), (tflite, "TFLite")):
        notes = [line for line in result.stderr.splitlines() if "--convert-engine" in line]
        assert len(notes) == 1 and value in notes[0]
    from pegasus.ir import serialize
    from pegasus.runtime import interpreter

    graph = serialize.load(tmp_path / "net.json", tmp_path / "net.data")
    x = np.random.default_rng(0).standard_normal((1, 6)).astype(np.float32)
    (ours,) = interpreter.run(graph, {graph.inputs[0]: x}).values()
    np.testing.assert_allclose(ours, model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
