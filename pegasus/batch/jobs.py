"""One batch job: a model taken through ``pegasus import`` → ``generate inputmeta`` → ``quantize`` → ``export
glow`` into ``<output-dir>/<name>/``, each step a ``python -m pegasus`` process (the same commands a user runs,
no second implementation), so a crash, a hang or a timeout ends that model only. The commands and their output
go to ``<name>/log.txt`` (at most MAX_LOG_BYTES: BoundedLog); ``<name>/result.json`` records the outcome and the
digest of the entry's options, which makes a later run skip the model while it is newer than its input files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pegasus.batch.manifest import EXPORT_KEYS, IMPORT_KEYS, QUANTIZE_KEYS, Job
from pegasus.fileio import atomic_write

RESULT = "result.json"


def _flags(options: dict, keys: dict) -> list[str]:
    argv = []
    for key in keys:
        if key not in options or key == "quantizer":
            continue
        value, flag = options[key], "--" + key.replace("_", "-") if key != "MLE" else "--MLE"
        if value is True:
            argv.append(flag)
        elif key == "define_symbol":
            for symbol in str(value).split():
                argv += [flag, symbol]
        elif value is not False:
            argv += [flag, str(value)]
    return argv


def up_to_date(job: Job) -> dict | None:
    """The stored result when the model converted with these options and after its input files changed."""
    path = job.folder / RESULT
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if result.get("status") != "ok" or result.get("digest") != job.digest():
        return None
    made = path.stat().st_mtime
    if any(not Path(f).exists() or Path(f).stat().st_mtime > made for f in [job.options["model"], *job.inputs]):
        return None
    return result


#: one job's log.txt stops growing here (a step printing without end, a huge command line); a line says so
MAX_LOG_BYTES = 4 * 2**20
#: a failed step's reason (its last line on stderr) as result.json, the summary and the printed line carry it
MAX_REASON = 400
#: how much of a step's stderr is kept in memory to find that last line
STDERR_TAIL = 64 * 1024


def bounded(text: str, limit: int = MAX_REASON) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _StepFailed(Exception):
    pass


class BoundedLog:
    """Appends to a job's log.txt up to ``limit`` bytes in all, then writes one line saying the rest was
    dropped; safe to write from the threads that drain a step's stdout and stderr."""

    def __init__(self, path: Path, limit: int = MAX_LOG_BYTES):
        self.path, self.limit = path, limit
        self.lock = threading.Lock()
        self.size = path.stat().st_size if path.exists() else 0
        self.cut = self.size >= limit

    def write(self, data: bytes | str) -> None:
        data = data.encode("utf-8", "replace") if isinstance(data, str) else data
        with self.lock:
            if self.cut or not data:
                return
            room = self.limit - self.size
            with open(self.path, "ab") as handle:
                handle.write(data[:room])
                if len(data) > room:
                    handle.write(f"\n... truncated: log.txt is limited to {self.limit:,} bytes\n".encode())
                    self.cut = True
            self.size += min(len(data), room)


def _drain(stream, log: BoundedLog, tail: bytearray | None) -> None:
    """Copy ``stream`` into ``log`` as it comes (and keep its last STDERR_TAIL bytes in ``tail``)."""
    while chunk := stream.read1(65536):
        log.write(chunk)
        if tail is not None:
            tail += chunk
            del tail[:-STDERR_TAIL]
    stream.close()


class _Runner:
    def __init__(self, job: Job):
        self.job, self.folder = job, job.folder
        self.deadline = time.monotonic() + job.timeout if job.timeout else None
        self.log = self.folder / "log.txt"

    def step(self, label: str, *argv: str) -> None:
        command = [sys.executable, "-m", "pegasus", *argv]
        remaining = None if self.deadline is None else max(self.deadline - time.monotonic(), 0.01)
        log = BoundedLog(self.log)
        log.write("$ pegasus " + " ".join(argv) + "\n")
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.folder)
        tail = bytearray()
        pumps = [threading.Thread(target=_drain, args=(proc.stdout, log, None), daemon=True),
                 threading.Thread(target=_drain, args=(proc.stderr, log, tail), daemon=True)]
        for pump in pumps:
            pump.start()
        try:
            proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            for pump in pumps:
                pump.join()
            log.write(f"timed out after {self.job.timeout:g} s\n")
            raise _StepFailed(f"{label}: timed out (timeout: {self.job.timeout:g} s)") from None
        for pump in pumps:
            pump.join()
        if proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            raise _StepFailed(f"{label}: crashed ({name})")
        if proc.returncode != 0:
            lines = [line for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
            reason = lines[-1].removeprefix("pegasus: error: ") if lines else f"exit code {proc.returncode}"
            raise _StepFailed(bounded(f"{label}: {reason}"))

    def convert(self) -> dict:
        job, options, folder = self.job, self.job.options, self.folder
        json_path, data_path = folder / f"{job.name}.json", folder / f"{job.name}.data"
        table = folder / f"{job.name}.quantize"
        table.unlink(missing_ok=True)
        imported = ["import", job.framework, "--model", options["model"], "--output-model", str(json_path),
                    "--output-data", str(data_path), *_flags(options, IMPORT_KEYS)]
        if job.framework == "tflite":
            imported += ["--output-quantize", str(table)]
        self.step("import", *imported)
        prequantized = table.is_file() and "\nrounding: tflite" in table.read_text()
        meta = options.get("input_meta")
        if "source_file" in options:
            meta = str(folder / f"{job.name}_inputmeta.yml")
            generate = ["generate", "inputmeta", "--model", str(json_path), "--source-file", options["source_file"],
                        "--input-meta-output", meta]
            generate += _flags(options, {"channel_mean_value": str, "separated_database": bool})
            self.step("inputmeta", *generate)
        quantizer = options.get("quantizer")
        if quantizer is None and meta is not None:
            quantizer = "asymmetric_affine"
        quantized = prequantized and quantizer != "none"
        scheme = "tflite (own table)" if quantized else "float32"
        if not prequantized and quantizer not in (None, "none"):
            if meta is None:
                raise _StepFailed(f"quantize: quantizer {quantizer} needs 'source_file' or 'input_meta' (the model "
                                  "is not pre-quantized)")
            self.step("quantize", "quantize", "--model", str(json_path), "--model-data", str(data_path),
                      "--with-input-meta", meta, "--model-quantize", str(table), "--rebuild", "--quantizer",
                      quantizer, *_flags(options, QUANTIZE_KEYS))
            quantized, scheme = True, f"{quantizer}-{options.get('qtype', 'uint8')}"
        bundle = folder / "bundle"
        export = ["export", "glow", "--model", str(json_path), "--model-data", str(data_path), "--output-path",
                  str(bundle), *_flags(options, EXPORT_KEYS)]
        if quantized:
            export += ["--dtype", "quantized", "--model-quantize", str(table)]
        self.step("export", *export)
        memory = json.loads(next(bundle.glob("*.memory.json")).read_text())
        return {"scheme": scheme, "flash": memory["weights_in_flash"]["flash"],
                "ram": memory["weights_in_flash"]["ram"]}


def run_job(job: Job, force: bool = False) -> dict:
    """Convert one model (or find it up to date); never raises for the model's own failure."""
    start = time.monotonic()
    if not force:
        stored = up_to_date(job)
        if stored is not None:
            return {**stored, "status": "skipped", "reason": "up to date"}
    folder = job.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULT).unlink(missing_ok=True)
    runner = _Runner(job)
    runner.log.write_text(f"# pegasus batch: {job.name} ({job.framework}), pid {os.getpid()}\n")
    result = {"name": job.name, "framework": job.framework, "status": "ok", "reason": "", "scheme": "",
              "flash": None, "ram": None}
    try:
        result.update(runner.convert())
    except _StepFailed as exc:
        result.update(status="failed", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - a worker-side fault of this model only (disk full, ...)
        result.update(status="failed", reason=bounded(f"{type(exc).__name__}: {exc}"))
    result["seconds"] = round(time.monotonic() - start, 2)
    result["digest"] = job.digest()
    atomic_write(folder / RESULT, json.dumps(result, indent=2) + "\n")
    return result
