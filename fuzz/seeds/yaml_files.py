"""The YAML corpus, written by pegasus's own commands for the demo LeNet: ``.quantize`` tables of several schemes
(``pegasus quantize``, and one ``--hybrid`` table with customized layers), input meta (``pegasus generate
inputmeta`` and the demo's own file, each in a folder with its dataset and one digit), batch manifests (with the
files they name, as empty stand-ins: no job runs) and a Glow profile (``model-profiler``'s writer)."""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
from pathlib import Path

from fuzz.targets import CORPUS
from fuzz.targets.yaml_files import LENET, NAME, lenet, lenet_files

DEMO = LENET.parent
SCHEMES = [("asymmetric_affine", "uint8", "asymmetric_affine_uint8"),
           ("perchannel_symmetric_affine", "int8", "perchannel_int8"),
           ("dynamic_fixed_point", "int16", "dynamic_fixed_point_i16"),
           ("symmetric_affine", "int8", "symmetric_int8")]


def _pegasus(*argv: str) -> None:
    from pegasus.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main([str(arg) for arg in argv])
    if code != 0:
        raise SystemExit(f"pegasus {' '.join(map(str, argv))} exited {code}")


def _fresh(name: str) -> Path:
    folder = CORPUS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _work() -> tuple[Path, Path, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="pegasus-seeds-"))
    json_path, data_path = (shutil.copy(p, tmp) for p in lenet_files())
    (tmp / "images").mkdir()
    shutil.copy(DEMO / "images" / "digit_000_0.png", tmp / "images")
    shutil.copy(DEMO / "images" / "digit_001_0.png", tmp / "images")
    (tmp / "dataset.txt").write_text("images/digit_000_0.png\nimages/digit_001_0.png\n")
    return tmp, Path(json_path), Path(data_path)


def quantize_tables(tmp: Path, json_path: Path, data_path: Path) -> None:
    folder = _fresh("quantize_table")
    meta = tmp / "meta.yml"
    _pegasus("generate", "inputmeta", "--model", json_path, "--source-file", tmp / "dataset.txt",
             "--channel-mean-value", "0 0.00392156862745098", "--input-meta-output", meta)
    common = ["--model", json_path, "--model-data", data_path, "--with-input-meta", meta, "--rebuild"]
    for quantizer, qtype, stem in SCHEMES:
        _pegasus("quantize", *common, "--quantizer", quantizer, "--qtype", qtype,
                 "--model-quantize", folder / f"{stem}.quantize", "--batch-size", "2")
    # a hybrid table: the uint8 table with two layers raised (as a user edits it)
    hybrid = folder / "hybrid_uint8.quantize"
    text = (folder / "asymmetric_affine_uint8.quantize").read_text()
    layers = [node.name for node in lenet().nodes]
    custom = f"customized_quantize_layers: {{{layers[0]}: dynamic_fixed_point-i16, {layers[-2]}: float32}}"
    hybrid.write_text(text.replace("customized_quantize_layers: {}", custom))


def input_metas(tmp: Path, json_path: Path) -> None:
    folder = _fresh("inputmeta")
    variants = {"demo": None, "generated": [], "mean_scale": ["--channel-mean-value", "128 0.0078125"]}
    for name, extra in variants.items():
        item = folder / name
        item.mkdir()
        shutil.copytree(tmp / "images", item / "images")
        shutil.copy(tmp / "dataset.txt", item)
        if extra is None:
            shutil.copy(DEMO / "lenet_mnist_inputmeta.yml", item)
        else:
            _pegasus("generate", "inputmeta", "--model", json_path, "--source-file", item / "dataset.txt",
                     *extra, "--input-meta-output", item / f"{NAME}_inputmeta.yml")
            meta = item / f"{NAME}_inputmeta.yml"
            meta.write_text(meta.read_text().replace(str(item) + "/", ""))  # relative, as users keep it
    # raw tensors (.npy) instead of images
    import numpy as np

    item = folder / "tensors"
    item.mkdir()
    np.save(item / "x0.npy", np.zeros((1, 1, 28, 28), np.float32))
    (item / "dataset.txt").write_text("x0.npy\n")
    meta = (DEMO / "lenet_mnist_inputmeta.yml").read_text().replace("category: image", "category: undefined")
    (item / "tensors_inputmeta.yml").write_text(meta)


MANIFESTS = {
    "import_only": """\
models:
  - name: lenet
    model: lenet_mnist.onnx
    input_size_list: "1,28,28"
""",
    "full": """\
defaults:
  quantizer: asymmetric_affine
  qtype: uint8
  target: arm
  mcpu: cortex-m7
  timeout: 600
models:
  - name: lenet_u8
    model: lenet_mnist.onnx
    input_meta: lenet_mnist_inputmeta.yml
    batch_size: 2
    iterations: 1
    algorithm: moving_average
    moving_average_weight: 0.05
  - name: lenet_i16
    model: lenet_mnist.onnx
    source_file: dataset.txt
    channel_mean_value: "0 0.00392156862745098"
    quantizer: dynamic_fixed_point
    qtype: int16
    float_abi: hard
    bundle_api: dynamic
  - name: yolo
    model: yolo.cfg
    weights: yolo.weights
    quantizer: none
    no_fuse: true
""",
    "frameworks": """\
defaults:
  no_optimize: false
models:
  - {name: tf, model: frozen.pb, inputs: [input], outputs: [out], input_size_list: "224,224,3", subgraph: 0}
  - {name: caffe, model: net.prototxt, weights: net.caffemodel, proto: caffe}
  - {name: keras, model: net.h5, framework: keras, allow_unsafe: false}
  - {name: tfl, model: net.tflite, quantizer: asymmetric_affine}
""",
}


def manifests() -> None:
    folder = _fresh("manifest")
    stand_ins = ["lenet_mnist.onnx", "lenet_mnist_inputmeta.yml", "dataset.txt", "yolo.cfg", "yolo.weights",
                 "frozen.pb", "net.prototxt", "net.caffemodel", "net.h5", "net.tflite"]
    for name, text in MANIFESTS.items():
        item = folder / name
        item.mkdir()
        for stand_in in stand_ins:
            (item / stand_in).write_bytes(b"")
        (item / "batch.yaml").write_text(text)


def profiles(tmp: Path) -> None:
    from pegasus.commands.glow_profile import image_feeds, write_profile

    folder = _fresh("glow_profile")
    images = [str(p) for p in sorted((tmp / "images").iterdir())]
    for mode in ("0to1", "neg1to1"):
        options = {"image-mode": mode}
        write_profile(lenet(), image_feeds(lenet(), images, options), len(images), options,
                      folder / f"lenet_{mode}.yaml")


def main() -> None:
    tmp, json_path, data_path = _work()
    try:
        quantize_tables(tmp, json_path, data_path)
        input_metas(tmp, json_path)
        manifests()
        profiles(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
