"""What fuzzing the YAML readers found (issue 35; fuzz/targets/yaml_files.py), each input rebuilt here from the
demo's input meta and a one-model manifest, and run through the command line a user types:

- an input meta mean or scale of 1e308 (finite, so accepted) overflowed float32 when an image was preprocessed
  (NumPy's RuntimeWarning); a 400-digit integer stopped the check itself (OverflowError in math.isfinite);
- a dataset or manifest path longer than the file system takes (ENAMETOOLONG) escaped as an OSError from the
  existence check (fileio.require_file, the manifest's file keys)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.security.harness import assert_refused, run_many

DEMO = Path(__file__).resolve().parents[2] / "conversion_scripts" / "demo"


def _meta(folder: Path, name: str, *, scale: str = "[0.00392156862745098]", mean: str = "[0.0]",
          dataset: str = "dataset.txt") -> str:
    text = (DEMO / "lenet_mnist_inputmeta.yml").read_text()
    text = text.replace("path: dataset.txt", f"path: {dataset}")
    text = text.replace("scale: [0.00392156862745098]", f"scale: {scale}").replace("mean: [0.0]", f"mean: {mean}")
    (folder / name).write_text(text)
    return name


def test_input_meta_numbers_and_names(demo_model, tmp_path):
    json_path, data_path = demo_model
    image = sorted((DEMO / "images").iterdir())[0]
    shutil.copy(image, tmp_path)
    (tmp_path / "dataset.txt").write_text(f"{image.name}\n")
    cases = {
        "huge scale": _meta(tmp_path, "scale.yml", scale="[1e308]"),
        "huge mean": _meta(tmp_path, "mean.yml", mean="1e308"),
        "400-digit scale": _meta(tmp_path, "digits.yml", scale="[" + "9" * 400 + "]"),
        "long dataset name": _meta(tmp_path, "long.yml", dataset="d" * 300 + ".txt"),
        "legitimate": _meta(tmp_path, "good.yml"),
    }
    argv = ["inference", "--model", json_path, "--model-data", data_path, "--postprocess", "print_topn"]
    results = dict(zip(cases, run_many([argv + ["--with-input-meta", meta] for meta in cases.values()],
                                       cwd=tmp_path)))
    for what in ("huge scale", "400-digit scale"):
        assert_refused(results[what], "scale.yml" if what == "huge scale" else "digits.yml", "scale", "1e+15")
    assert_refused(results["huge mean"], "mean.yml", "mean")
    assert_refused(results["long dataset name"], "dataset file", "too long")
    assert results["legitimate"].code == 0, results["legitimate"].stderr


def test_manifest_long_names(tmp_path):
    (tmp_path / "lenet.onnx").write_bytes((DEMO / "lenet_mnist.onnx").read_bytes())
    cases = {
        "model": "models:\n  - {name: a, model: " + "m" * 300 + ".onnx}\n",
        "input_meta": "models:\n  - {name: a, model: lenet.onnx, quantizer: asymmetric_affine, input_meta: "
                      + "i" * 300 + ".yml}\n",
    }
    for key, text in cases.items():
        (tmp_path / f"{key}.yaml").write_text(text)
    results = run_many([["batch", f"{key}.yaml", "--output-dir", "out"] for key in cases], cwd=tmp_path)
    for key, result in zip(cases, results):
        assert_refused(result, "models[0]", f"'{key}'", "too long")
    assert not (tmp_path / "out").exists()
