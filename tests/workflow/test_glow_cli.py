"""Glow's command lines as the reference documents quote them (paths adapted): model-compiler / image-classifier
give bundles whose outputs equal ``pegasus export glow``'s for the same options and agree with onnxruntime;
options pegasus does not implement are refused by name; a profile of another graph is refused naming the
first differing layer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.workflow.helpers import DEMO, digit, lenet_onnxruntime, run_bundle, script_env

BIN = Path(sys.executable).parent
ONNX = DEMO / "lenet_mnist.onnx"
IMAGES = sorted(str(p) for p in (DEMO / "images").glob("digit_*.png"))[::10]
MODEL_INPUT = "-model-input=data,float,[1,1,28,28]"


def tool(name: str, *args, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN / name), *map(str, args)], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def pegasus(*args, cwd: Path) -> None:
    proc = subprocess.run([str(BIN / "pegasus"), *map(str, args)], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


def run_lenet(folder: Path) -> np.ndarray:
    return run_bundle(folder, "lenet_mnist", [digit()], np.float32, 10)


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("profile")
    # image-classifier 0_1009.png ... -image-mode=0to1 -model=lenet_mnist -model-input-name=data -dump-profile=...
    tool("image-classifier", *IMAGES, "-image-mode=0to1", f"-model={ONNX}", "-model-input-name=data",
         "-dump-profile=profile.yml", cwd=work)
    return work / "profile.yml"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("imported")
    pegasus("import", "onnx", "--model", ONNX, "--output-model", "lenet_mnist.json", cwd=work)
    return work


def test_profile_holds_the_images_ranges(profile):
    from PIL import Image
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(profile.read_text())
    entry = next(t for t in doc["tensors"] if t["nodeOutputName"] == "data")
    pixels = np.stack([np.asarray(Image.open(p), np.float32) / 255 for p in IMAGES])
    assert entry["min"] == pytest.approx(float(pixels.min()), abs=1e-6)
    assert entry["max"] == pytest.approx(float(pixels.max()), abs=1e-6)
    assert sum(entry["histogram"]) == pixels.size and doc["images"] == len(IMAGES)
    assert doc["tool"].startswith("pegasus") and doc["graph_digest"]


def test_float_bundle_matches_export_glow(tmp_path, imported):
    # model-compiler -backend=CPU -model=lenet_mnist -emit-bundle=build -model-input=data,float,[1,1,28,28]
    tool("model-compiler", "-backend=CPU", f"-model={ONNX}", "-emit-bundle=build", MODEL_INPUT, cwd=tmp_path)
    for suffix in (".o", ".h", ".weights.bin", ".weights.txt"):
        assert (tmp_path / "build" / f"lenet_mnist{suffix}").is_file()
    pegasus("export", "glow", "--model", imported / "lenet_mnist.json", "--model-data", imported / "lenet_mnist.data",
            "--output-path", tmp_path / "ref", cwd=tmp_path)
    ours = run_lenet(tmp_path / "build")
    np.testing.assert_array_equal(ours, run_lenet(tmp_path / "ref"))
    np.testing.assert_allclose(ours, lenet_onnxruntime(digit()), atol=1e-5)


@pytest.mark.parametrize(("options", "quantizer", "qtype"), [
    ([], "asymmetric_affine", "i8"),
    (["-quantization-schema=asymmetric", "-enable-channelwise"], "perchannel_symmetric_affine", "i8"),
    (["-quantization-schema=symmetric_with_power2_scale"], "dynamic_fixed_point", "i8"),
    (["-quantization-schema=symmetric_with_power2_scale", "-quantization-precision=Int16",
      "-quantization-precision-bias=Int32"], "dynamic_fixed_point", "i16"),
    (["-quantization-schema=symmetric"], "symmetric_affine", "i8"),
    (["-quantization-schema=symmetric_with_uint8"], "symmetric_affine", "u8"),
    (["-quantization-schema=symmetric", "-quantization-precision-bias=Int8"], "symmetric_affine", "i8"),
    (["-quantization-schema=symmetric_with_uint8", "-quantization-precision-bias=Int8"], "symmetric_affine", "u8"),
    (["-quantization-schema=symmetric_with_power2_scale", "-quantization-precision-bias=Int8"],
     "dynamic_fixed_point", "i8"),
])
def test_profile_guided_bundle_matches_export_glow(tmp_path, profile, imported, options, quantizer, qtype):
    # model-compiler -backend=CPU -model=lenet_mnist -emit-bundle=build -model-input=... -load-profile=profile.yml
    tool("model-compiler", "-backend=CPU", f"-model={ONNX}", "-emit-bundle=build", MODEL_INPUT,
         f"-load-profile={profile}", *options, cwd=tmp_path)
    table = tmp_path / "build" / "lenet_mnist.quantize"
    assert f"quantizer: {quantizer}" in table.read_text() and f"qtype: {qtype}" in table.read_text()
    pegasus("export", "glow", "--model", imported / "lenet_mnist.json", "--model-data", imported / "lenet_mnist.data",
            "--dtype", "quantized", "--model-quantize", table, "--output-path", tmp_path / "ref", cwd=tmp_path)
    ours = run_lenet(tmp_path / "build")
    np.testing.assert_array_equal(ours, run_lenet(tmp_path / "ref"))
    assert ours.argmax() == lenet_onnxruntime(digit()).argmax()


@pytest.mark.parametrize(("option", "named"), [
    ("-keep-original-precision-for-nodes=Add,Div", "-keep-original-precision-for-nodes"),
    ("-quantization-schema=symmetric -quantization-precision=Int16", "-quantization-precision=Int16"),
    ("-quantization-precision=Int16 -quantization-precision-bias=Int8", "-quantization-precision-bias=Int8"),
    ("-quantization-schema=symmetric -enable-channelwise", "-enable-channelwise"),
    ("-quantization-calibration=KL", "-quantization-calibration=KL"),
    ("-backend=Interpreter", "-backend=Interpreter"),
    ("-instrument-debug", "-instrument-debug"),
    ("-model-input=data,int8q,0.1,-13,[1,1,28,28]", "int8q"),
])
def test_unimplemented_option_refused_by_name(tmp_path, profile, option, named):
    args = ["-backend=CPU", f"-model={ONNX}", "-emit-bundle=build", f"-load-profile={profile}"]
    proc = tool("model-compiler", *[a for a in args if not a.startswith(option.split("=")[0] + "=")],
                *option.split(), cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and named in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "build" / "lenet_mnist.o").exists()


def test_use_cmsis_needs_dsp(tmp_path):
    common = ["-backend=CPU", f"-model={ONNX}", MODEL_INPUT, "-target=arm", "-use-cmsis"]
    proc = tool("model-compiler", *common, "-mcpu=cortex-m0", "-emit-bundle=m0", cwd=tmp_path, ok=False)
    assert proc.returncode == 2 and "-use-cmsis" in proc.stderr and "cortex-m0" in proc.stderr
    tool("model-compiler", *common, "-mcpu=cortex-m7", "-float-abi=hard", "-emit-bundle=m7", cwd=tmp_path)
    assert (tmp_path / "m7" / "lenet_mnist.o").is_file()


def test_profile_of_another_graph_refused(tmp_path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(ONNX)
    weights = [i for i in model.graph.initializer if numpy_helper.to_array(i).ndim == 4]
    init = weights[-1]  # the second convolution's kernel
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.5, init.name))
    other = tmp_path / "other" / "lenet_mnist.onnx"
    other.parent.mkdir()
    onnx.save(model, other)
    tool("image-classifier", *IMAGES[:3], "-image-mode=0to1", f"-model={other}", "-model-input-name=data",
         "-dump-profile=other.yml", cwd=tmp_path)
    proc = tool("model-compiler", "-backend=CPU", f"-model={ONNX}", "-emit-bundle=build", MODEL_INPUT,
                "-load-profile=other.yml", cwd=tmp_path, ok=False)
    consumer = next(n.name for n in model.graph.node if init.name in n.input)
    assert proc.returncode == 2 and "another graph" in proc.stderr and f"'{consumer}'" in proc.stderr


def test_image_classifier_prints_top5(tmp_path):
    proc = tool("image-classifier", IMAGES[0], "-image-mode=0to1", f"-model={ONNX}", "-model-input-name=data",
                cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if "Label-K" in line]
    assert len(lines) == 5
    from PIL import Image

    x = (np.asarray(Image.open(IMAGES[0]), np.float32) / 255)[None, None]
    expected = np.argsort(-lenet_onnxruntime(x), kind="stable")[:5]
    assert [int(line.split("Label-K")[1].split(": ")[1].split()[0]) for line in lines][:1] == list(expected[:1])


def test_eiq_cortex_m7_command_runs(tmp_path, imported):
    """The eIQ Cortex-M7 commands of the reference document (its 'symmetric_with_power2 scale' is the option
    symmetric_with_power2_scale): int8 biases on their own power-of-two grid, CMSIS-NN flag."""
    quant = ["-quantization-schema=symmetric_with_power2_scale", "-quantization-precision-bias=Int8"]
    tool("image-classifier", *IMAGES, "-image-mode=0to1", "-image-layout=NCHW", "-image-channel-order=BGR",
         f"-model={ONNX}", "-model-input-name=data", "-dump-profile=profile.yml", *quant, cwd=tmp_path)
    m7 = ["-target=arm", "-mcpu=cortex-m7", "-float-abi=hard"]
    common = [f"-model={ONNX}", MODEL_INPUT, "-backend=CPU", "-load-profile=profile.yml", *quant]
    tool("model-compiler", *common, "-emit-bundle=bundle", *m7, "-use-cmsis", cwd=tmp_path)
    table = tmp_path / "bundle" / "lenet_mnist.quantize"
    from pegasus.ir import serialize
    from pegasus.quantizers.quantize_file import load_table

    entries = load_table(table).tensors
    graph = serialize.load(imported / "lenet_mnist.json", imported / "lenet_mnist.data")
    biases = [n.inputs[2] for n in graph.nodes if n.op in ("Conv", "Gemm") and len(n.inputs) > 2]
    assert len(biases) >= 3 and all(entries[name].qtype == "i8" and entries[name].fl is not None for name in biases)
    # every grid is a power of two, so Glow's bias rescale is a shift: b_q << k, or (b_q + 2**(-k-1)) >> -k
    from pegasus.quantized.lower import lower_to_integer

    lowered = lower_to_integer(graph, load_table(table)).graph
    for node in (n for n in graph.nodes if n.op in ("Conv", "Gemm") and len(n.inputs) > 2):
        x, w, b = (entries[name] for name in node.inputs[:3])
        shift = int(np.log2(b.scale[0] / (x.scale[0] * w.scale[0])))
        b_q = np.clip(np.rint(graph.value_of(node.inputs[2]).astype(np.float64) / b.scale[0]), -128, 127)
        b_q = b_q.astype(np.int64)
        expected = b_q << shift if shift >= 0 else (b_q + (1 << (-shift - 1))) >> -shift
        np.testing.assert_array_equal(lowered.value_of(f"{node.name}_bias_q"), expected, err_msg=node.name)
    model = ["--model", imported / "lenet_mnist.json", "--model-data", imported / "lenet_mnist.data", "--dtype",
             "quantized", "--model-quantize", table]
    pegasus("export", "glow", *model, "--target", "arm", "--mcpu", "cortex-m7", "--float-abi", "hard",
            "--output-path", tmp_path / "ref_m7", cwd=tmp_path)
    for suffix in (".o", ".weights.bin"):
        assert (tmp_path / "bundle" / f"lenet_mnist{suffix}").read_bytes() == \
            (tmp_path / "ref_m7" / f"lenet_mnist{suffix}").read_bytes()
    # the same command for this machine: its bundle runs here
    tool("model-compiler", *common, "-emit-bundle=host", cwd=tmp_path)
    pegasus("export", "glow", *model, "--output-path", tmp_path / "ref", cwd=tmp_path)
    for path in IMAGES:
        x = digit(*map(int, Path(path).stem.split("_")[1:]))
        ours = run_bundle(tmp_path / "host", "lenet_mnist", [x], np.float32, 10)
        np.testing.assert_array_equal(ours, run_bundle(tmp_path / "ref", "lenet_mnist", [x], np.float32, 10))
        assert ours.argmax() == lenet_onnxruntime(x).argmax(), path


def test_int8_bias_enters_the_accumulator_as_glow_scales_it():
    """Glow's quantizeScaleOffset32To8 + libjit_scale_i32i8, worked by hand."""
    from pegasus.quantized.rules.linear import glow_scale

    assert glow_scale(np.float32(2.0 ** -3)) == (0, 3, 1)      # a power of two: (b + 4) >> 3
    assert glow_scale(np.float32(4.0)) == (0, 0, 4)
    # 0.3: doubled while < 256 with post < 15 → 307.2 at post 10; already >= 255, so no pre shift
    assert glow_scale(np.float32(0.3)) == (0, 10, 307)
    # 0.001: doubled while < 256 with post < 15 → 32.768 at post 15, then pre-shifted while < 255 and pre < 7:
    # 65.5, 131.1, 262.1 → pre 3, round(262.144) = 262
    assert glow_scale(np.float32(0.001)) == (3, 15, 262)
