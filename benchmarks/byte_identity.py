"""Byte identity of exported bundles across a refactoring of the exporter.

A change that only moves code (the export pipeline's stages, the kernels' layout) must leave every bundle
unchanged. This script exports a fixed corpus — the demo LeNet under every quantization scheme (host and
Cortex-M7), the four trained MLPerf Tiny models, int8 and float (host, Cortex-M4, Cortex-M7), and the light
ONNX models of the onnx wheel (host) — and records the SHA-256 of each bundle's ``.o``, ``.h`` and
``.weights.bin``. Save the hashes before the change and compare after:

    python benchmarks/byte_identity.py --save before.json
    python benchmarks/byte_identity.py --check before.json     # exit 1 naming every bundle that changed

``--only SUBSTRING`` restricts the corpus (e.g. ``--only lenet``). Everything runs in one process through
``pegasus.cli.main``, as the command lines a user types.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "conversion_scripts" / "demo"
MLPERF = Path(os.environ.get("PEGASUS_MLPERF_TINY", ROOT.parent / "shared" / "models" / "mlperf_tiny"))
MLPERF_FILES = ("kws_ref_model", "kws_ref_model_float32", "vww_96_int8", "vww_96_float", "pretrainedResnet_quant",
                "pretrainedResnet", "ad01_int8", "ad01_fp32")
LENET_SCHEMES = (("asymmetric_affine", "uint8"), ("perchannel_symmetric_affine", "int8"),
                 ("symmetric_affine", "int8"), ("dynamic_fixed_point", "int8"), ("dynamic_fixed_point", "int16"))
#: the light models small enough to export in seconds (VGG-19's, AlexNet's and ZFNet's weights are hundreds of MB)
LIGHT = ("squeezenet", "shufflenet", "inception_v1", "inception_v2", "resnet50", "densenet121")
SUFFIXES = (".o", ".h", ".weights.bin")


def _pegasus(*argv: object) -> None:
    from pegasus.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    if code:
        raise SystemExit(f"pegasus {' '.join(map(str, argv))} exited {code}: {err.getvalue().strip()}")


def _light_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _import(model: Path, framework: str, work: Path, name: str) -> Path:
    json_path = work / f"{name}.json"
    if not json_path.exists():
        extra = ("--output-quantize", work / f"{name}.quantize") if framework == "tflite" else ()
        _pegasus("import", framework, "--model", model, "--output-model", json_path, "--output-data",
                 work / f"{name}.data", *extra)
    return json_path


def cases(work: Path):
    """(case name, export argv without --output-path) for the whole corpus, importing/quantizing as needed."""
    lenet = _import(DEMO / "lenet_mnist.onnx", "onnx", work, "lenet")
    base = ("--model", lenet, "--model-data", work / "lenet.data", "--network-name", "lenet")
    for target in (("--target", "x86_64"), ("--target", "arm", "--mcpu", "cortex-m7")):
        tag = target[-1]
        yield f"lenet-float-{tag}", (*base, *target)
        for quantizer, qtype in LENET_SCHEMES:
            table = work / f"lenet-{quantizer}-{qtype}.quantize"
            if not table.exists():
                _pegasus("quantize", "--model", lenet, "--model-data", work / "lenet.data", "--with-input-meta",
                         DEMO / "lenet_mnist_inputmeta.yml", "--quantizer", quantizer, "--qtype", qtype,
                         "--batch-size", 10, "--iterations", 2, "--model-quantize", table, "--rebuild")
            yield f"lenet-{quantizer}-{qtype}-{tag}", (*base, *target, "--dtype", "quantized",
                                                        "--model-quantize", table)
    for stem in MLPERF_FILES:
        path = MLPERF / f"{stem}.tflite"
        if not path.exists():
            print(f"skipping {path}: missing", file=sys.stderr)
            continue
        model = _import(path, "tflite", work, stem)
        quantized = stem.endswith(("int8", "_quant")) or stem == "kws_ref_model"
        dtype = ("--dtype", "quantized", "--model-quantize", work / f"{stem}.quantize") if quantized else ()
        for target in (("--target", "x86_64"), ("--target", "arm", "--mcpu", "cortex-m4"),
                       ("--target", "arm", "--mcpu", "cortex-m7")):
            yield f"{stem}-{target[-1]}", ("--model", model, "--model-data", work / f"{stem}.data", "--network-name",
                                           "model", *target, *dtype)
    for light in LIGHT:
        model = _import(_light_dir() / f"light_{light}.onnx", "onnx", work, light)
        yield f"light-{light}-x86_64", ("--model", model, "--model-data", work / f"{light}.data", "--network-name",
                                        "model", "--target", "x86_64")


def digests(only: str | None) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="pegasus-identity-") as tmp:
        work = Path(tmp)
        for name, argv in cases(work):
            if only and not name.startswith(only) and f"-{only}" not in name:
                continue
            out = work / "bundles" / name
            started = time.monotonic()
            _pegasus("export", "glow", *argv, "--output-path", out)
            result[name] = {suffix: hashlib.sha256(next(out.glob(f"*{suffix}")).read_bytes()).hexdigest()
                            for suffix in SUFFIXES}
            print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path, help="write the digests to this JSON file")
    mode.add_argument("--check", type=Path, help="compare with the digests in this JSON file")
    parser.add_argument("--only", help="only the cases whose name contains this")
    args = parser.parse_args()
    now = digests(args.only)
    if args.save:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"{len(now)} bundles hashed into {args.save}")
        return 0
    before = json.loads(args.check.read_text())
    changed = [f"{name}{suffix}" for name, files in now.items() for suffix, digest in files.items()
               if before.get(name, {}).get(suffix) != digest]
    missing = sorted(set(before) - set(now)) if not args.only else []
    for entry in changed:
        print(f"changed: {entry}")
    for entry in missing:
        print(f"not exported: {entry}")
    print(f"{len(now)} bundles, {len(now) * len(SUFFIXES)} files: {len(changed)} changed, {len(missing)} missing")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
