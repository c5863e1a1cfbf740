"""Smoke test of the whole flow on the imported PyTorch models: import (torch.export program), generate
inputmeta on a few random samples, ``pegasus quantize`` asymmetric_affine uint8, quantized inference close to
torch's float outputs, and a host bundle exported (``export glow --dtype quantized``) for each, whose example
program gives the integer simulation's outputs byte for byte."""

from __future__ import annotations

import contextlib
import io
import subprocess

import numpy as np
import pytest

from pegasus import cli
from tests.importers.pytorch.harness import FORMATS, cli_import, reference, size_flags
from tests.importers.pytorch.models import ISSUE_MODELS

pytestmark = pytest.mark.xdist_group("pytorch")
SAMPLES = 3


def _run(*args) -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        code = cli.main([str(a) for a in args])
    assert code == 0, (args[:2], stderr.getvalue())


@pytest.mark.parametrize("name", ISSUE_MODELS)
def test_quantize_and_export(torch_model, tmp_path, name):
    rng = np.random.default_rng(0)
    folder = torch_model(name)
    inputs, expected = reference(folder)
    work = tmp_path / name
    work.mkdir()
    code, _, stderr = cli_import(folder / FORMATS["exported"], work / "m", *size_flags(inputs))
    assert code == 0, stderr
    samples = [inputs[0]] + [rng.standard_normal(inputs[0].shape).astype(np.float32) for _ in range(SAMPLES - 1)]
    for i, sample in enumerate(samples):
        np.save(work / f"s{i}.npy", sample)
    (work / "dataset.txt").write_text("".join(f"s{i}.npy\n" for i in range(SAMPLES)))
    _run("generate", "inputmeta", "--model", work / "m.json", "--source-file", work / "dataset.txt",
         "--input-meta-output", work / "meta.yml")
    _run("quantize", "--model", work / "m.json", "--model-data", work / "m.data", "--with-input-meta",
         work / "meta.yml", "--quantizer", "asymmetric_affine", "--qtype", "uint8", "--model-quantize",
         work / "m.quantize", "--batch-size", SAMPLES)
    _run("inference", "--model", work / "m.json", "--model-data", work / "m.data", "--dtype", "quantized",
         "--model-quantize", work / "m.quantize", "--input", work / "s0.npy", "--postprocess", "dump_result",
         "--output-dir", work / "q")
    with np.load(work / "q" / "outputs.npz") as npz:
        got = [npz[k] for k in npz.files]
    want = expected[0]
    error = float(np.max(np.abs(got[0].reshape(want.shape) - want)) / np.max(np.abs(want)))
    assert error < 0.05, (name, error)   # measured 0.004 (DS-CNN) to 0.011 (mobilenet_v3_small) of the peak
    _run("export", "glow", "--model", work / "m.json", "--model-data", work / "m.data", "--dtype", "quantized",
         "--model-quantize", work / "m.quantize", "--output-path", work / "bundle", "--network-name", "net",
         "--target", "x86_64")
    # the bundle's example program on the same sample: byte-equal to the integer simulation
    subprocess.run(["make", "-s", "-C", str(work / "bundle")], check=True, capture_output=True)
    subprocess.run([str(work / "bundle" / "net_run"), "-o", str(work / "out.bin"), str(work / "s0.npy")], check=True,
                   capture_output=True, timeout=120)
    ran = np.fromfile(work / "out.bin", dtype=np.float32)
    assert ran[:got[0].size].tobytes() == got[0].astype(np.float32).ravel().tobytes(), name
