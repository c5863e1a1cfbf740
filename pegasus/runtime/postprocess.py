"""What ``pegasus inference`` does with results: print the top-5 classes, dump tensors as Acuity does
(``attach_<name>_out0_<sample>_<d0>_<d1>...tensor``, one value per line) and ``outputs.npz``."""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

from pegasus.fileio import atomic_path, atomic_write

POSTPROCESS_CHOICES = ("print_topn", "dump_result", "classification_classic")


def top_n(values: np.ndarray, n: int = 5) -> list[tuple[int, float]]:
    flat = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(-flat, kind="stable")[:n]
    return [(int(i), float(flat[i])) for i in order]


def format_top_n(name: str, values: np.ndarray, n: int = 5) -> str:
    pairs = top_n(values, n)
    best, score = pairs[0]
    ranked = " ".join(f"{index}:{value:.6f}" for index, value in pairs)
    return f"{name}: class {best} ({score:.4f}); top-{len(pairs)} {ranked}"


#: longest tensor part of a dump file name (file systems allow 255 bytes per name; the shape follows it)
MAX_NAME_PART = 96


def _digest(tensor: str) -> str:
    return hashlib.sha256(tensor.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def dump_names(tensors: list[str]) -> dict[str, str]:
    """The file-name part of each tensor: its name with anything but letters, digits, '_', '.' and '-' made '_'.
    A name too long for a file name keeps its start and gets a digest of the whole name; names that become the
    same text (``a/b`` and ``a:b``) each get their digest, so every tensor has its own file."""
    parts = {}
    for tensor in dict.fromkeys(tensors):
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", tensor)
        parts[tensor] = safe if len(safe) <= MAX_NAME_PART else f"{safe[:MAX_NAME_PART - 13]}~{_digest(tensor)}"
    counts = Counter(parts.values())
    return {tensor: part if counts[part] == 1 else f"{part[:MAX_NAME_PART - 13]}~{_digest(tensor)}"
            for tensor, part in parts.items()}


def dump_name(part: str, sample: int, shape: tuple[int, ...]) -> str:
    """``attach_<part>_out0_<sample>_<d0>_<d1>...tensor`` (``part`` from ``dump_names``); a shape of many axes
    is cut short with a digest of it, so the name stays within the file system's 255 bytes."""
    dims = "_".join(str(d) for d in shape)
    if len(dims) > 80:
        dims = f"{dims[:60]}~{_digest(dims)}"
    return f"attach_{part}_out0_{sample}_{dims}.tensor"


def dump_tensor(folder: Path, part: str, sample: int, value: np.ndarray) -> Path:
    target = folder / dump_name(part, sample, value.shape)
    text = "\n".join(f"{v:.6f}" if np.issubdtype(value.dtype, np.floating) else str(v) for v in value.ravel())
    atomic_write(target, text + "\n")
    return target


def save_outputs_npz(folder: Path, stacked: dict[str, list[np.ndarray]]) -> Path:
    target = folder / "outputs.npz"
    # written member by member as np.savez does, without passing names as keywords (a tensor called 'file' or
    # 'allow_pickle' would collide with savez's own parameters); np.load(...)[name] reads each back
    with atomic_path(target, suffix=".npz") as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            for name, values in stacked.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.stack(values), allow_pickle=False)
    return target
