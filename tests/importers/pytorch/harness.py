"""The PyTorch tests' harness: each model of models.py saved as TorchScript (traced and scripted) and as a
torch.export program, with torch's own outputs on fixed inputs, cached on disk.

Cache: ``~/.cache/pegasus-tests/pytorch/<key>/<model>/`` (``traced.pt``, ``scripted.pt``, ``exported.pt2``,
``reference.npz``), the key a hash of models.py, this file and the torch version, so a changed model or a new
torch rebuilds them. A model's folder is written under a temporary name and renamed, so pytest-xdist workers
building the same model at once each end with a whole folder. The tests import through the command line
(``pegasus.cli.main``, in this process so torch loads once).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np

from pegasus import cli
from pegasus.ir import serialize
from pegasus.runtime.interpreter import run
from tests.importers.pytorch import models

CACHE = Path.home() / ".cache" / "pegasus-tests" / "pytorch"
FORMATS = {"traced": "traced.pt", "scripted": "scripted.pt", "exported": "exported.pt2"}


def cache_key() -> str:
    import torch

    text = "\n".join([inspect.getsource(models), Path(__file__).read_text(), torch.__version__])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _save_all(name: str, folder: Path) -> None:
    import torch

    model, inputs = models.build(name), models.example_inputs(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outputs = model(*inputs)
        torch.jit.save(torch.jit.trace(model, inputs), str(folder / FORMATS["traced"]))
        torch.jit.save(torch.jit.script(model), str(folder / FORMATS["scripted"]))
        torch.export.save(torch.export.export(model, inputs), str(folder / FORMATS["exported"]))
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    np.savez(folder / "reference.npz", **{f"input{i}": t.numpy() for i, t in enumerate(inputs)},
             **{f"output{i}": t.numpy() for i, t in enumerate(outputs)})


def saved_model(name: str) -> Path:
    """The folder holding model ``name`` in the three formats and its reference outputs, built once."""
    folder = CACHE / cache_key() / name
    if not folder.exists():
        building = folder.with_name(f"{name}.{os.getpid()}.tmp")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        _save_all(name, building)
        try:
            os.replace(building, folder)
        except OSError:  # another worker finished first
            shutil.rmtree(building, ignore_errors=True)
    return folder


def decomposed_program(name: str) -> Path:
    """Model ``name`` as a torch.export program saved after ``run_decompositions()`` (core ATen ops), built once
    beside the other formats."""
    import torch

    path = saved_model(name) / "decomposed.pt2"
    if not path.exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(models.build(name), models.example_inputs(name)).run_decompositions()
            temporary = path.with_name(f"decomposed.{os.getpid()}.pt2")
            torch.export.save(program, str(temporary))
        os.replace(temporary, path)
    return path


def reference(folder: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(inputs, torch's outputs) saved with a model."""
    data = np.load(folder / "reference.npz")
    count = sum(k.startswith("input") for k in data.files)
    return [data[f"input{i}"] for i in range(count)], [data[f"output{i}"] for i in range(len(data.files) - count)]


def cli_import(model: Path, out: Path, *args: str) -> tuple[int, str, str]:
    """``pegasus import pytorch --model MODEL ...`` in this process: (exit code, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(["import", "pytorch", "--model", str(model), "--output-model", str(out.with_suffix(".json")),
                         "--output-data", str(out.with_suffix(".data")), *args])
    return code, stdout.getvalue(), stderr.getvalue()


def size_flags(inputs: list[np.ndarray]) -> list[str]:
    """--input-size-list (with the batch) and --input-dtype-list for these inputs."""
    dtypes = ["float" if x.dtype == np.float32 else str(x.dtype) for x in inputs]
    return ["--input-size-list", "#".join(",".join(map(str, x.shape)) for x in inputs),
            "--size-with-batch", ",".join(["True"] * len(inputs)), "--input-dtype-list", "#".join(dtypes)]


def import_and_run(model: Path, out: Path, inputs: list[np.ndarray]) -> tuple[object, list[np.ndarray]]:
    """Import through the CLI, load NAME.json/.data, run the float reference: (graph, outputs)."""
    code, _, stderr = cli_import(model, out, *size_flags(inputs))
    assert code == 0, stderr
    graph = serialize.load(out.with_suffix(".json"), out.with_suffix(".data"))
    results = run(graph, dict(zip(graph.inputs, inputs)))
    return graph, [results[n] for n in graph.outputs]


def _run_cli(*args) -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        code = cli.main([str(a) for a in args])
    assert code == 0, (args[:2], stderr.getvalue())


def quantize_and_run_bundle(model: Path, work: Path, inputs: list[np.ndarray], samples: int = 3,
                            scheme: tuple[str, ...] = ("--quantizer", "asymmetric_affine", "--qtype", "uint8")
                            ) -> tuple[np.ndarray, np.ndarray]:
    """The whole flow through the CLI for a one-input model: import, generate inputmeta over ``inputs[0]`` and
    random samples, quantize, ``inference --dtype quantized`` on ``inputs[0]``, ``export glow`` for the host,
    make and run the bundle's example program on it: (the integer simulation's first output, the bundle's
    outputs as written, every output's float32 values one after another)."""
    rng = np.random.default_rng(0)
    work.mkdir(parents=True, exist_ok=True)
    code, _, stderr = cli_import(model, work / "m", *size_flags(inputs))
    assert code == 0, stderr
    data = [inputs[0]] + [rng.standard_normal(inputs[0].shape).astype(np.float32) for _ in range(samples - 1)]
    for i, sample in enumerate(data):
        np.save(work / f"s{i}.npy", sample)
    (work / "dataset.txt").write_text("".join(f"s{i}.npy\n" for i in range(samples)))
    _run_cli("generate", "inputmeta", "--model", work / "m.json", "--source-file", work / "dataset.txt",
             "--input-meta-output", work / "meta.yml")
    _run_cli("quantize", "--model", work / "m.json", "--model-data", work / "m.data", "--with-input-meta",
             work / "meta.yml", *scheme, "--model-quantize", work / "m.quantize", "--batch-size", samples)
    _run_cli("inference", "--model", work / "m.json", "--model-data", work / "m.data", "--dtype", "quantized",
             "--model-quantize", work / "m.quantize", "--input", work / "s0.npy", "--postprocess", "dump_result",
             "--output-dir", work / "q")
    with np.load(work / "q" / "outputs.npz") as npz:
        got = npz[npz.files[0]]
    _run_cli("export", "glow", "--model", work / "m.json", "--model-data", work / "m.data", "--dtype", "quantized",
             "--model-quantize", work / "m.quantize", "--output-path", work / "bundle", "--network-name", "net",
             "--target", "x86_64")
    subprocess.run(["make", "-s", "-C", str(work / "bundle")], check=True, capture_output=True)
    subprocess.run([str(work / "bundle" / "net_run"), "-o", str(work / "out.bin"), str(work / "s0.npy")], check=True,
                   capture_output=True, timeout=120)
    return got, np.fromfile(work / "out.bin", dtype=np.float32)
