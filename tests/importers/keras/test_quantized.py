"""Keras models through the whole flow as a user runs it: import (compared with Keras), quantize, and the
integer bundle on this machine, which must equal ``pegasus inference --dtype quantized`` exactly."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.importers.keras import models
from tests.importers.keras.harness import check_import


@pytest.mark.parametrize("quantizer", [("asymmetric_affine", "uint8"), ("perchannel_symmetric_affine", "int8")])
def test_bilinear_upsampling_bundle_is_exact(tmp_path, keras_model, quantizer):
    """UpSampling2D(bilinear) interpolates the integer levels (it ran in float, whose float32 rounding decided
    .5 ties otherwise than the reference: a few outputs 1-2 steps apart)."""
    built = keras_model(models.unet_decoder, "tf_keras")
    check_import(built.files[".h5"], built)
    model, data, table = tmp_path / "m.json", tmp_path / "m.data", tmp_path / "m.quantize"
    assert run_cli("import", "keras", "--model", built.files[".h5"], "--output-model", model,
                   "--output-data", data).code == 0
    rng = np.random.default_rng(3)
    samples = [built.inputs[0]] + [rng.uniform(-2, 2, built.inputs[0].shape).astype(np.float32) for _ in range(3)]
    for k, sample in enumerate(samples):
        np.save(tmp_path / f"x{k}.npy", sample)
    (tmp_path / "dataset.txt").write_text("".join(f"x{k}.npy\n" for k in range(len(samples))))
    meta = tmp_path / "meta.yml"
    assert run_cli("generate", "inputmeta", "--model", model, "--source-file", tmp_path / "dataset.txt",
                   "--input-meta-output", meta).code == 0
    result = run_cli("quantize", "--model", model, "--model-data", data, "--with-input-meta", meta, "--model-quantize",
                     table, "--quantizer", quantizer[0], "--qtype", quantizer[1], "--iterations", str(len(samples)))
    assert result.code == 0, result.stderr
    result = run_cli("run", "--model", model, "--model-data", data, "--dtype", "quantized", "--model-quantize", table,
                     "--target", "x86_64", "--input", *[tmp_path / f"x{k}.npy" for k in range(len(samples))])
    assert result.code == 0, result.stderr
    differences = re.findall(r"largest difference (\S+)", result.stdout)
    assert len(differences) == len(samples) and all(float(d) == 0 for d in differences), result.stdout
    assert "up_bilinear' (Resize) runs in float" not in result.stdout + result.stderr
