"""``pegasus batch``: a manifest of models in two frameworks where three fail (a truncated file, a bad option,
an unsupported op) while the others convert (their bundles checked against onnxruntime / TFLite), the summary
files, a re-run that skips everything, the same batch on a Dask LocalCluster, and manifest errors (exit 2,
naming the entry and the key, nothing run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.support.requirements import need_module
from tests.workflow.helpers import DEMO, digit, lenet_onnxruntime, run_bundle

pytestmark = pytest.mark.xdist_group("workflow")


def batch(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "pegasus", "batch", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=900)
    return proc


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    from tests.importers.tflite import harness, models
    from tests.support.tflite_models import int8_cnn

    folder = tmp_path_factory.mktemp("batch")
    shutil.copy(DEMO / "lenet_mnist.onnx", folder / "lenet.onnx")
    (folder / "truncated.onnx").write_bytes((DEMO / "lenet_mnist.onnx").read_bytes()[:5000])
    shutil.copy(harness.cached_model(int8_cnn), folder / "int8_cnn.tflite")
    shutil.copy(harness.cached_model(models.custom_op), folder / "custom.tflite")
    (folder / "dataset.txt").write_text("".join(f"{DEMO / name}\n" for name in
                                                (DEMO / "dataset.txt").read_text().split()[:20]))
    (folder / "manifest.yaml").write_text("""\
defaults:
  quantizer: none
models:
  - name: lenet_uint8
    model: lenet.onnx
    source_file: dataset.txt
    channel_mean_value: "0 0.00392156862745098"
    quantizer: asymmetric_affine
    qtype: uint8
    batch_size: 10
    iterations: 2
  - name: lenet_float
    model: lenet.onnx
  - name: truncated
    model: truncated.onnx
  - name: bad_option
    framework: onnx
    model: lenet.onnx
    outputs: no_such_tensor
  - name: int8_cnn
    model: int8_cnn.tflite
    quantizer: asymmetric_affine
  - name: custom_op
    model: custom.tflite
    timeout: 300
""")
    return folder


@pytest.fixture(scope="module")
def first_run(manifest):
    return batch(manifest / "manifest.yaml", "--jobs", "2", "--output-dir", manifest / "out", cwd=manifest)


def _summary(folder):
    return {row["name"]: row for row in json.loads((folder / "summary.json").read_text())}


def test_failures_stay_their_own(manifest, first_run):
    assert first_run.returncode == 1, first_run.stderr
    out = manifest / "out"
    summary = _summary(out)
    assert list(summary) == ["lenet_uint8", "lenet_float", "truncated", "bad_option", "int8_cnn", "custom_op"]
    failed = {name for name, row in summary.items() if row["status"] == "failed"}
    assert failed == {"truncated", "bad_option", "custom_op"}
    assert "import" in summary["truncated"]["reason"]
    assert "no_such_tensor" in summary["bad_option"]["reason"]
    assert "Convolution2DTransposeBias" in summary["custom_op"]["reason"]
    for name in failed:   # one line per finished model, the reason on it, and the table names it
        assert any(line.startswith("failed") and name in line and summary[name]["reason"] in line
                   for line in first_run.stdout.splitlines())
    assert "3 failed" in first_run.stdout
    csv_rows = (out / "summary.csv").read_text().splitlines()
    assert csv_rows[0].startswith("name,framework,status") and len(csv_rows) == 7
    for name in ("lenet_uint8", "lenet_float", "int8_cnn"):
        memory = json.loads(next((out / name / "bundle").glob("*.memory.json")).read_text())
        assert summary[name]["flash"] == memory["weights_in_flash"]["flash"] > 0
        assert (out / name / "log.txt").read_text().count("$ pegasus") >= 2
    assert summary["lenet_uint8"]["scheme"] == "asymmetric_affine-uint8"
    assert summary["int8_cnn"]["scheme"] == "tflite (own table)"   # a pre-quantized model keeps its table


def test_bundles_compute_the_models(manifest, first_run):
    out = manifest / "out"
    x = digit()
    reference = lenet_onnxruntime(x)
    np.testing.assert_allclose(run_bundle(out / "lenet_float" / "bundle", "lenet_float", [x], np.float32, 10),
                               reference, rtol=1e-4, atol=1e-5)
    quantized = run_bundle(out / "lenet_uint8" / "bundle", "lenet_uint8", [x], np.float32, 10)
    assert quantized.argmax() == 4
    np.testing.assert_allclose(quantized, reference, atol=0.05)


def test_rerun_skips_everything_done(manifest, first_run):
    again = batch(manifest / "manifest.yaml", "--output-dir", manifest / "out", cwd=manifest)
    summary = _summary(manifest / "out")
    assert {name for name, row in summary.items() if row["status"] == "skipped"} == {
        "lenet_uint8", "lenet_float", "int8_cnn"}
    assert again.returncode == 1   # the failed ones are tried again and fail again
    (manifest / "manifest.yaml").write_text((manifest / "manifest.yaml").read_text().replace(
        "iterations: 2", "iterations: 1"))   # a changed option converts that model again
    third = batch(manifest / "manifest.yaml", "--output-dir", manifest / "out", cwd=manifest)
    assert _summary(manifest / "out")["lenet_uint8"]["status"] == "ok", third.stdout
    assert _summary(manifest / "out")["lenet_float"]["status"] == "skipped"


def test_same_summary_on_a_dask_cluster(manifest, first_run):
    distributed = need_module("distributed")
    local = _summary(manifest / "out")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        proc = batch(manifest / "manifest.yaml", "--output-dir", manifest / "dask", "--dask-scheduler",
                     cluster.scheduler_address, cwd=manifest)
    assert proc.returncode == 1, proc.stderr
    remote = _summary(manifest / "dask")
    keys = ("status", "flash", "ram", "scheme", "framework")
    assert {n: [r[k] for k in keys] for n, r in remote.items() if r["status"] != "skipped"} == \
        {n: [r[k] if k != "status" else ("ok" if r[k] == "skipped" else r[k]) for k in keys]
         for n, r in local.items()}
    assert [r["reason"] for r in remote.values()] == [r["reason"].replace("up to date", "") for r in local.values()]


@pytest.mark.parametrize("entry, message", [
    ("  - name: a\n    model: lenet.onnx\n    mcpus: cortex-m7\n", "models[1] (a): unknown key 'mcpus'"),
    ("  - name: a\n    model: missing.onnx\n", "models[1] (a): 'model' file not found"),
    ("  - name: a\n    model: lenet.onnx\n    batch_size: ten\n", "models[1] (a): 'batch_size' must be an integer"),
    ("  - name: a\n    model: lenet.onnx\n    quantizer: asymmetric\n", "models[1] (a): 'quantizer' is 'asymmetric'"),
    ("  - name: a\n    model: lenet.onnx\n    quantizer: asymmetric_affine\n",
     "models[1] (a): 'quantizer' asymmetric_affine needs calibration data"),
    ("  - name: a\n    model: lenet.bin\n", "models[1] (a): 'framework' is missing"),
])
def test_bad_manifest_names_entry_and_key(tmp_path, entry, message):
    shutil.copy(DEMO / "lenet_mnist.onnx", tmp_path / "lenet.onnx")
    (tmp_path / "lenet.bin").write_bytes(b"x")
    (tmp_path / "m.yaml").write_text("models:\n  - name: ok\n    model: lenet.onnx\n" + entry)
    proc = batch(tmp_path / "m.yaml", "--output-dir", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_timeout_stops_only_that_model(tmp_path):
    """An entry whose conversion outlives its ``timeout`` fails with that reason; the next entry still converts."""
    shutil.copy(DEMO / "lenet_mnist.onnx", tmp_path / "lenet.onnx")
    (tmp_path / "manifest.yaml").write_text("""\
models:
  - name: too_slow
    model: lenet.onnx
    timeout: 0.05
  - name: in_time
    model: lenet.onnx
""")
    proc = batch(tmp_path / "manifest.yaml", "--output-dir", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    rows = _summary(tmp_path / "out")
    assert rows["too_slow"]["status"] == "failed" and "timed out (timeout: 0.05 s)" in rows["too_slow"]["reason"]
    assert rows["in_time"]["status"] == "ok", rows["in_time"]
