"""Smoke test of the whole flow on the imported PyTorch models: import (torch.export program), generate
inputmeta on a few random samples, ``pegasus quantize`` asymmetric_affine uint8, quantized inference close to
torch's float outputs, and for a few of them (LLVM compiling a bundle takes seconds each) a host bundle
exported (``export glow --dtype quantized``)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from pegasus import cli
from tests.importers.pytorch.harness import FORMATS, cli_import, reference, size_flags
from tests.importers.pytorch.models import ISSUE_MODELS

pytestmark = pytest.mark.xdist_group("pytorch")
SAMPLES = 3
#: the models also compiled into bundles: pooling with ceil_mode and concatenation, depthwise convolutions, both
#: recurrent layers
BUNDLED = ("squeezenet1_1", "ds_cnn", "lstm", "gru")


def _run(*args) -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        code = cli.main([str(a) for a in args])
    assert code == 0, (args[:2], stderr.getvalue())


def test_quantize_and_export_every_model(torch_model, tmp_path):
    rng = np.random.default_rng(0)
    for name in ISSUE_MODELS:
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
        if name not in BUNDLED:
            continue
        _run("export", "glow", "--model", work / "m.json", "--model-data", work / "m.data", "--dtype", "quantized",
             "--model-quantize", work / "m.quantize", "--output-path", work / "bundle", "--network-name", "net",
             "--target", "x86_64")
        assert (work / "bundle" / "net.o").stat().st_size > 0 and (work / "bundle" / "net.h").exists()
