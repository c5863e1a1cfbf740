"""benchmarks/bench_tinyml.py run as a user runs it, on the MLPerf Tiny autoencoder only (cortex-m7,
--skip-float): its CSV has every column, and its figures are those measured here independently — the
instructions of the same .tflite imported, lowered and exported by this test and counted by
toolchains.count_instructions_cortex_m, the buffers of that export, the MACs of the autoencoder's layer sizes
and TFLite Micro's arena of the same file."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from pegasus.commands.quantized_model import lower_model
from pegasus.exporters.glow.export import export_bundle
from pegasus.exporters.glow.target import resolve_target
from pegasus.ir import serialize
from tests.conftest import ROOT, run_cli
from tests.support import toolchains
from tests.support.tflm import tflm_arena_bytes

pytestmark = pytest.mark.xdist_group("tflite")

BENCH = ROOT / "benchmarks" / "bench_tinyml.py"
COLUMNS = ["model", "cpu", "instructions", "macs", "macs_per_instruction", "best_published_cycles",
           "tflm_cmsis_m4_cycles", "target_instructions", "instructions_target", "float_instructions",
           "float_over_int8", "float_ratio_target", "activations", "mutable", "ram", "ram_reusing_input",
           "tflm_arena", "ram_over_arena", "ram_target", "stack", "stack_target", "code_int8", "code_float",
           "code_target", "weights_int8", "weights_float", "lenet_activations_target", "lenet_code_target"]
# The autoencoder's dense layers (MLPerf Tiny AD): 640 -> 128 x4 -> 8 -> 128 x4 -> 640.
AD_WIDTHS = (640, 128, 128, 128, 128, 8, 128, 128, 128, 128, 640)


def test_bench_tinyml_autoencoder_cortex_m7(tmp_path):
    out = tmp_path / "results" / "tinyml.csv"
    proc = subprocess.run([sys.executable, str(BENCH), "--models", "ad_autoencoder", "--cpus", "cortex-m7",
                           "--skip-float", "--csv", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "INSTRUCTIONS per inference, not cycles" in proc.stdout
    with out.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert reader.fieldnames == COLUMNS
    assert [(row["model"], row["cpu"]) for row in rows] == [("ad_autoencoder", "cortex-m7")]
    row = rows[0]

    from benchmarks.tinyml_models import tflite_model

    path = tflite_model("ad_autoencoder")
    imported = run_cli("import", "tflite", "--model", path, "--output-model", tmp_path / "ad.json",
                       "--output-data", tmp_path / "ad.data", "--output-quantize", tmp_path / "ad.quantize")
    assert imported.code == 0, imported.stderr
    graph = lower_model(serialize.load(tmp_path / "ad.json", tmp_path / "ad.data"), str(tmp_path / "ad.quantize"),
                        show=False).graph
    bundle = tmp_path / "bundle"
    plan = export_bundle(graph, bundle, "ad", resolve_target("arm", "cortex-m7")).plan
    (name,) = graph.inputs
    kind = graph.type_of(name)
    assert kind.dtype.numpy == np.int8
    feeds = {name: np.random.default_rng(0).integers(-128, 127, tuple(kind.shape), dtype=np.int8, endpoint=True)}
    instructions = toolchains.count_instructions_cortex_m(bundle, "ad", "cortex-m7", feeds)

    assert int(row["instructions"]) == instructions
    assert int(row["macs"]) == sum(a * b for a, b in zip(AD_WIDTHS, AD_WIDTHS[1:]))
    assert (int(row["activations"]), int(row["mutable"])) == (plan.activations_size, plan.mutable_size)
    assert int(row["ram"]) == plan.activations_size + plan.mutable_size
    assert int(row["weights_int8"]) == plan.constant_size == (bundle / "ad.weights.bin").stat().st_size
    reused = export_bundle(graph, tmp_path / "reuse", "ad", resolve_target("arm", "cortex-m7"),
                           reuse_input_memory=True).plan
    assert int(row["ram_reusing_input"]) == reused.activations_size + reused.mutable_size
    arena = tflm_arena_bytes(path)
    assert int(row["tflm_arena"]) == arena
    assert row["ram_target"] == ("PASS" if 2 * int(row["ram"]) <= arena else "MISS")
    assert row["instructions_target"] == ("PASS" if instructions <= 490_000 else "MISS")
    assert row["float_instructions"] == row["code_float"] == row["code_target"] == row["weights_float"] == ""
    assert int(row["stack"]) > 0 and int(row["code_int8"]) > 0
    assert row["stack_target"] == ("PASS" if int(row["stack"]) <= 512 else "MISS")
