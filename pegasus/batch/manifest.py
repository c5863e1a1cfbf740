"""The batch manifest: ``defaults:`` and ``models:`` read with ruamel.yaml and checked into ``Job``s before any
model runs, so a typo (unknown key, missing file, bad value) is one error naming the entry and the key."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from pegasus import __version__
from pegasus.errors import PegasusError

FRAMEWORK_SUFFIXES = {".onnx": "onnx", ".tflite": "tflite", ".pb": "tensorflow", ".pbtxt": "tensorflow",
                      ".meta": "tensorflow", ".h5": "keras", ".hdf5": "keras", ".keras": "keras", ".pt": "pytorch",
                      ".pth": "pytorch", ".pt2": "pytorch", ".prototxt": "caffe", ".cfg": "darknet"}

# key -> (step, kind): kind is str, int, float, bool, a tuple of allowed values, or "file" (relative to the manifest)
IMPORT_KEYS = {"weights": "file", "inputs": str, "outputs": str, "input_size_list": str, "size_with_batch": str,
               "input_dtype_list": str, "define_symbol": str, "subgraph": int, "signature": str,
               "mean_values": str, "std_values": str, "predef_file": "file", "subgraphs": str,
               "proto": ("caffe", "lstm_caffe"), "allow_unsafe": bool, "no_optimize": bool}
META_KEYS = {"source_file": "file", "channel_mean_value": str, "separated_database": bool, "input_meta": "file"}
QUANTIZE_KEYS = {"quantizer": ("none", "asymmetric_affine", "dynamic_fixed_point", "perchannel_symmetric_affine",
                               "qbfloat16"),
                 "qtype": ("uint8", "int8", "int16", "bfloat16"),
                 "algorithm": ("normal", "kl_divergence", "moving_average"), "batch_size": int, "iterations": int,
                 "moving_average_weight": float, "divergence_first_quantize_bits": int, "MLE": bool,
                 "compute_entropy": bool}
EXPORT_KEYS = {"target": str, "mcpu": str, "float_abi": ("soft", "hard"), "relocation_model": ("pic", "static"),
               "bundle_api": ("static", "dynamic"), "quantized_io": bool, "network_name": str, "no_fuse": bool}
OWN_KEYS = {"name": str, "framework": tuple(sorted(set(FRAMEWORK_SUFFIXES.values()))), "model": "file",
            "timeout": float}
KEYS = {**OWN_KEYS, **IMPORT_KEYS, **META_KEYS, **QUANTIZE_KEYS, **EXPORT_KEYS}


#: largest number a numeric key takes (a batch size, a timeout): beyond it no value means anything
MAX_NUMBER = 2**53

#: longest option value (it becomes a command-line argument and a line of log.txt)
MAX_VALUE_CHARS = 16384


def _shown(value) -> str:
    """``value`` as an error message shows it: repr, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Job:
    """One model of the manifest, every path absolute: what a worker (local or on a Dask cluster) needs."""

    name: str
    framework: str
    options: dict
    output_dir: str
    timeout: float | None = None
    inputs: list[str] = field(default_factory=list)   # files whose change makes the outputs stale

    @property
    def folder(self) -> Path:
        return Path(self.output_dir) / self.name

    def digest(self) -> str:
        text = json.dumps({"options": self.options, "framework": self.framework, "pegasus": __version__},
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


def framework_of(path: Path) -> str | None:
    if path.is_dir():
        return "tensorflow" if (path / "saved_model.pb").is_file() else None
    return FRAMEWORK_SUFFIXES.get(path.suffix.lower())


def _check_value(where: str, key: str, value, kind, base: Path):
    if kind == "file":
        if not isinstance(value, str) or not value or len(value) > MAX_VALUE_CHARS:
            raise PegasusError(f"{where}: '{key}' must be a path, got {_shown(value)}")
        try:
            path = (base / value).resolve()
            exists = path.exists()
        except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a loop of links
            raise PegasusError(f"{where}: '{key}' cannot be looked up: {getattr(exc, 'strerror', None) or exc}: "
                               f"{_shown(value)}") from None
        if not exists:
            raise PegasusError(f"{where}: '{key}' file not found: {path}")
        return str(path)
    if isinstance(kind, tuple):
        if value not in kind:
            raise PegasusError(f"{where}: '{key}' is {_shown(value)}; valid: {', '.join(kind)}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise PegasusError(f"{where}: '{key}' must be true or false, got {_shown(value)}")
        return value
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= MAX_NUMBER or \
                (kind is int and value != int(value)):  # NaN fails the bound; a 400-digit int is compared exactly
            what = "an integer" if kind is int else "a number"
            raise PegasusError(f"{where}: '{key}' must be {what}, got {_shown(value)}")
        if value <= 0 and key != "subgraph":
            raise PegasusError(f"{where}: '{key}' must be positive, got {_shown(value)}")
        return kind(value)
    if isinstance(value, (list, tuple)) and key in ("inputs", "outputs"):
        value = " ".join(str(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PegasusError(f"{where}: '{key}' must be a string, got {_shown(value)}")
    value = str(value)
    if len(value) > MAX_VALUE_CHARS:
        raise PegasusError(f"{where}: '{key}' is {len(value):,} characters long (at most {MAX_VALUE_CHARS:,})")
    return value


def _entry(raw, index: int, defaults: dict, base: Path, output_dir: Path) -> Job:
    if not isinstance(raw, dict):
        raise PegasusError(f"models[{index}]: each entry must be a mapping (name: ..., model: ...), got {_shown(raw)}")
    where = f"models[{index}]" + (f" ({raw['name'][:60]})" if isinstance(raw.get("name"), str) else "")
    merged = {**defaults, **raw}
    options = {}
    for key, value in merged.items():
        if key not in KEYS:
            raise PegasusError(f"{where}: unknown key {_shown(key)} (known: {', '.join(sorted(KEYS))})")
        options[key] = _check_value(where, key, value, KEYS[key], base)
    for key in ("name", "model"):
        if key not in options:
            raise PegasusError(f"{where}: '{key}' is missing")
    name = options.pop("name")
    if name in (".", "..") or "/" in name or "\\" in name or len(name) > 100:
        raise PegasusError(f"{where}: 'name' must be a plain folder name, got {_shown(name)}")
    framework = options.pop("framework", None) or framework_of(Path(options["model"]))
    if framework is None:
        raise PegasusError(f"{where}: 'framework' is missing and cannot be taken from '{options['model']}' "
                           f"(suffixes known: {' '.join(FRAMEWORK_SUFFIXES)}, or a SavedModel folder)")
    if framework == "darknet" and "weights" not in options:
        raise PegasusError(f"{where}: 'weights' is missing (darknet needs the .weights file)")
    quantizer = options.get("quantizer")
    has_data = "source_file" in options or "input_meta" in options
    if quantizer not in (None, "none") and not has_data and framework != "tflite":
        raise PegasusError(f"{where}: 'quantizer' {quantizer} needs calibration data: 'source_file' or 'input_meta'")
    timeout = options.pop("timeout", None)
    files = [value for key, value in options.items() if KEYS.get(key) == "file"]
    return Job(name=name, framework=framework, options=options, output_dir=str(output_dir), timeout=timeout,
               inputs=files)


def load_manifest(path: str | Path, output_dir: str | Path | None) -> list[Job]:
    """The manifest's jobs, checked; PegasusError (exit 2) names the entry and key of the first error."""
    from pegasus import yamlsafe

    path = Path(path)
    data = yamlsafe.load(path, "manifest", round_trip=False)  # no aliases: a list str()'d into a command line
    if not isinstance(data, dict):
        raise PegasusError(f"manifest {path}: expected a mapping with 'models:' (and optional 'defaults:')")
    unknown = set(data) - {"defaults", "models"}
    if unknown:   # YAML keys may be null, numbers or lists: named as text
        raise PegasusError(f"manifest {path}: unknown top-level key '{sorted(map(str, unknown))[0]}' "
                           "(known: defaults, models)")
    defaults = data.get("defaults") or {}
    models = data.get("models")
    if not isinstance(defaults, dict):
        raise PegasusError(f"manifest {path}: 'defaults' must be a mapping")
    for key in ("name", "model"):
        if key in defaults:
            raise PegasusError(f"manifest {path}: defaults: '{key}' belongs in each model's entry")
    if not isinstance(models, list) or not models:
        raise PegasusError(f"manifest {path}: 'models' must be a non-empty list")
    base = path.resolve().parent
    out = Path(output_dir).resolve() if output_dir else base / "batch_output"
    jobs = [_entry(raw, index, defaults, base, out) for index, raw in enumerate(models)]
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.name in seen:
            raise PegasusError(f"models[{index}] ({job.name}): 'name' already used by models[{seen[job.name]}]")
        seen[job.name] = index
    return jobs
